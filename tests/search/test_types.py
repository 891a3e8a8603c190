"""Which paths the search index covers: the rule the search service reads workspaces by and
the environment sends a session's changes by (etude.search.types)."""

from __future__ import annotations

import pytest

from etude.search.files import read_workspace
from etude.search.types import is_indexed_path


@pytest.mark.parametrize(
    ("path", "indexed"),
    [
        ("pkg/mod.py", True),
        ("README.md", True),
        (".hidden_file.py", True),
        (".git/config", False),
        ("src/.venv/lib/x.py", False),
        ("node_modules/a/index.js", False),
        ("pkg/__pycache__/mod.cpython-312.pyc", False),
        ("pkg/build/gen.py", False),
        ("pkg/native.so", False),
        ("docs/logo.png", False),
    ],
)
def test_indexed_paths(path, indexed):
    assert is_indexed_path(path) is indexed


def test_reading_a_workspace_follows_the_rule(tmp_path):
    for path in ("pkg/mod.py", "pkg/build/gen.py", ".git/config", "pkg/data.gz", "dist/x.py"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("text\n")
    assert [path for path, _ in read_workspace(tmp_path, 1 << 20)] == ["pkg/mod.py"]
