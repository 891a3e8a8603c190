"""The search service's plain types, what other folders may import: which paths of a
workspace the index covers. The environment follows the same rule when it sends a
session's changed files (etude.environment.search_sync), so both agree on what is indexed.
"""

from __future__ import annotations

SKIPPED_DIRS = frozenset({"__pycache__", "node_modules", "build", "dist", "site-packages"})
"""Directories never indexed, besides hidden ones (`.git`, `.venv`, caches)."""
BINARY_SUFFIXES = (".pyc", ".so", ".o", ".a", ".png", ".jpg", ".gif", ".zip", ".gz", ".whl")


def is_indexed_path(path: str) -> bool:
    """Whether the workspace-relative `path` of a file is one the index covers (by its name;
    the content must still be text)."""
    parts = path.split("/")
    hidden = any(p.startswith(".") or p in SKIPPED_DIRS for p in parts[:-1])
    return not hidden and not path.endswith(BINARY_SUFFIXES)
