"""The classes a repository defines, by name, with what they derive from: enough to tell,
without importing the code, whether two exception classes are unrelated (neither derives
from the other). A canary that expects another exception than the real test
(`canary_sites`) must expect one the right program cannot raise.

Read with a regular expression over every Python file (`class Name(Base, pkg.Other):`), so
a large repository costs one pass of reading, and a grading, which changes a few files of
a repository it grades again and again, reads only those (`with_files`). A class whose
bases cannot be followed to builtins (a base from a dependency, a header split over lines)
has no known ancestry, and nothing is concluded about it.
"""

from __future__ import annotations

import builtins
import os
import re
from pathlib import Path

_CLASS = re.compile(r"^[ \t]*class[ \t]+(\w+)[ \t]*(?:\(([^)]*)\))?[ \t]*:", re.MULTILINE)
_MAX_FILE_BYTES = 2 * 1024**2
_SKIPPED_DIRECTORIES = {".git", "node_modules", "__pycache__", ".tox", ".venv", "venv"}


Definitions = dict[str, set[str]]
"""Class name → the names of its bases, as one file (or a whole tree) defines them."""


class ClassIndex:
    def __init__(self, files: dict[str, Definitions]) -> None:
        """`files`: each Python file's definitions, by its path under the tree."""
        self._files = files
        self._bases: Definitions = {}
        for definitions in files.values():  # a name defined twice: the bases of both
            for name, bases in definitions.items():
                self._bases.setdefault(name, set()).update(bases)
        self._ancestry: dict[str, frozenset[str] | None] = {}

    @classmethod
    def of_tree(cls, root: Path) -> ClassIndex:
        files: dict[str, Definitions] = {}
        for directory, subdirs, names in os.walk(root):
            subdirs[:] = [d for d in subdirs if d not in _SKIPPED_DIRECTORIES]
            for name in names:
                if name.endswith(".py"):
                    path = Path(directory, name)
                    files[str(path.relative_to(root))] = _read(path)
        return cls(files)

    def with_files(self, root: Path, paths: list[str]) -> ClassIndex:
        """This index with `paths` (under `root`) read again: a copy of the tree it was made
        from in which those files changed, appeared or went."""
        files = dict(self._files)
        for path in paths:
            if path.endswith(".py"):
                files[path] = _read(root / path)
        return ClassIndex(files)

    def ancestry(self, name: str) -> frozenset[str] | None:
        """`name` and every class it derives from, by name; None where that is not known
        (an unknown base anywhere up the chain)."""
        if name not in self._ancestry:
            self._ancestry[name] = None  # a cycle finds nothing known
            self._ancestry[name] = self._follow(name)
        return self._ancestry[name]

    def _follow(self, name: str) -> frozenset[str] | None:
        builtin = getattr(builtins, name, None)
        if name not in self._bases:
            if isinstance(builtin, type):
                return frozenset(c.__name__ for c in builtin.__mro__)
            return None
        found = {name}
        for base in self._bases[name]:
            above = self.ancestry(base)
            if above is None:
                return None
            found |= above
        return frozenset(found)

    def is_exception(self, name: str) -> bool:
        return "BaseException" in (self.ancestry(name) or ())

    def unrelated(self, first: str, second: str) -> bool:
        """Neither derives from the other, as far as both ancestries are known."""
        a, b = self.ancestry(first), self.ancestry(second)
        return a is not None and b is not None and first not in b and second not in a


def _read(path: Path) -> Definitions:
    """The classes one file defines (none where it is missing, a link or too large)."""
    definitions: Definitions = {}
    try:
        if path.is_symlink() or path.stat().st_size > _MAX_FILE_BYTES:
            return definitions
        text = path.read_text(errors="replace")
    except OSError:
        return definitions
    for match in _CLASS.finditer(text):
        named = [
            part.strip().split(".")[-1] for part in (match[2] or "").split(",")
            if part.strip() and "=" not in part  # `metaclass=...` is no base
        ]  # fmt: skip
        definitions.setdefault(match[1], set()).update(named or ["object"])
    return definitions
