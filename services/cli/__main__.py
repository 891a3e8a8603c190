from etude.cli.app import app

app()
