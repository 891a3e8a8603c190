"""The `etude` command line."""

from etude.cli.app import app

__all__ = ["app"]
