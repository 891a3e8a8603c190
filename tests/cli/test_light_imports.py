"""`etude --help` and the light subcommands start without the heavy libraries: torch and
transformers are imported only by the commands that train, serve or read a model."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "transformers")


def test_the_command_line_imports_no_torch_or_transformers():
    probe = (
        "import sys; from typer.testing import CliRunner; from etude.cli.app import app; "
        "r = CliRunner().invoke(app, ['--help']); assert r.exit_code == 0, r.output; "
        f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    ran = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "", f"etude --help imported {ran.stdout.strip()}"
