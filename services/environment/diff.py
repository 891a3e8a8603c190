"""The diff of a workspace against its base, as a patch `git apply` reproduces exactly.

Both trees are walked through fds (tools/tree_scan.py: no link is ever followed, FIFOs and
devices are skipped, a budget bounds time and size). Every shape a session can leave comes out
in git's own format, so applying the patch to a copy of the base rebuilds the session's files
byte for byte:

* text files: unified hunks, `\\ No newline at end of file` where due;
* binary files (a NUL, invalid UTF-8, or over `MAX_TEXT_BYTES`): `GIT binary patch` literal
  hunks (zlib-deflated, git's base85 lines) with full blob ids, which `git apply` requires;
* new and deleted files (`new file mode`, `deleted file mode`), the executable bit (`old mode`
  / `new mode`), symlinks (mode 120000, the target as content without a newline); a change of
  type (file ↔ symlink) and a rename are a deletion and an addition;
* names git would quote are C-quoted as git does (spaces too, which git also accepts quoted).

Directories are implied by the files in them (git tracks no empty directory). A `.git` entry
anywhere is left out: `git apply` refuses such paths.
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import os
import zlib
from pathlib import Path

from etude.environment.tools.tree_scan import Content, Node, WalkBudget, read_node, scan_tree
from etude.environment.types import WalkLimitError, WorkspaceDiff

MAX_TEXT_BYTES = 1024 * 1024
"""Larger files are sent as binary literals: difflib is slow on huge inputs."""
DEADLINE_SECONDS = 60.0
MAX_ENTRIES = 200_000
MAX_CHANGED_BYTES = 256 * 1024 * 1024
MAX_DIFF_CHARS = 48 * 1024 * 1024
"""Below the gRPC message limit (64 MiB by default), so a Diff is always deliverable."""

NO_NEWLINE = "\\ No newline at end of file\n"
NULL_ID = "0" * 40
_BINARY_LINE_BYTES = 52
_QUOTED = {7: "\\a", 8: "\\b", 9: "\\t", 10: "\\n", 11: "\\v", 12: "\\f", 13: "\\r"}


def default_budget() -> WalkBudget:
    return WalkBudget(DEADLINE_SECONDS, MAX_ENTRIES, MAX_CHANGED_BYTES, what="Diff")


def diff_trees(base: Path, current: Path, budget: WalkBudget | None = None) -> WorkspaceDiff:
    """Compare file by file; size, mtime and mode spare reading files that did not change
    (an overlay shows untouched files with the base's own inode data)."""
    budget = budget or default_budget()
    before, after = scan_tree(base, budget, _skip_git), scan_tree(current, budget, _skip_git)
    skipped = sorted({*before.skipped, *after.skipped} | _git_entries(before.nodes, after.nodes))
    parts: list[str] = []
    changed: list[str] = []
    size = 0
    for rel in sorted(before.nodes.keys() | after.nodes.keys(), key=os.fsencode):
        if _is_git(rel):
            continue
        old_node, new_node = before.nodes.get(rel), after.nodes.get(rel)
        if old_node and new_node and _looks_unchanged(old_node, new_node):
            continue
        old = read_node(base, rel, budget) if old_node else None
        new = read_node(current, rel, budget) if new_node else None
        budget.check_time()
        if old is None and new is None:
            continue
        if old and new and _same(old, new):
            continue
        changed.append(rel)
        for section in _sections(rel, old, new):
            size += len(section)
            if size > MAX_DIFF_CHARS:
                raise WalkLimitError(f"Diff stopped: the patch is over {MAX_DIFF_CHARS} characters")
            parts.append(section)
    return WorkspaceDiff("".join(parts), changed, skipped)


def _skip_git(path: str, name: str) -> bool:
    return _is_git_name(name)


def _is_git_name(name: str) -> bool:
    return name.lower() == ".git"


def _is_git(rel: str) -> bool:
    return any(_is_git_name(part) for part in rel.split("/"))


def _git_entries(*trees: dict[str, Node]) -> set[str]:
    return {rel for tree in trees for rel in tree if _is_git(rel)}


def _looks_unchanged(old: Node, new: Node) -> bool:
    same_mode = old.kind == new.kind and (old.mode & 0o100) == (new.mode & 0o100)
    return same_mode and (old.size, old.mtime_ns) == (new.size, new.mtime_ns)


def _same(old: Content, new: Content) -> bool:
    return (old.kind, _git_mode(old), old.data) == (new.kind, _git_mode(new), new.data)


def _git_mode(content: Content) -> str:
    if content.kind == "symlink":
        return "120000"
    return "100755" if content.mode & 0o100 else "100644"


def _blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


# --- one file's sections ------------------------------------------------------------------


def _sections(rel: str, old: Content | None, new: Content | None) -> list[str]:
    if old and new and old.kind != new.kind:
        return [_section(rel, old, None), _section(rel, None, new)]  # a change of type
    return [_section(rel, old, new)]


def _section(rel: str, old: Content | None, new: Content | None) -> str:
    a, b = quote_path(f"a/{rel}"), quote_path(f"b/{rel}")
    lines = [f"diff --git {a} {b}\n"]
    old_data = old.data if old else b""
    new_data = new.data if new else b""
    if old is None:
        assert new is not None
        lines.append(f"new file mode {_git_mode(new)}\n")
        lines.append(f"index {NULL_ID}..{_blob_id(new_data)}\n")
    elif new is None:
        lines.append(f"deleted file mode {_git_mode(old)}\n")
        lines.append(f"index {_blob_id(old_data)}..{NULL_ID}\n")
    else:
        same_mode = _git_mode(old) == _git_mode(new)
        if not same_mode:
            lines.append(f"old mode {_git_mode(old)}\nnew mode {_git_mode(new)}\n")
        if old_data == new_data:
            return "".join(lines)  # the mode alone changed
        mode = f" {_git_mode(new)}" if same_mode else ""
        lines.append(f"index {_blob_id(old_data)}..{_blob_id(new_data)}{mode}\n")
    old_text, new_text = _text(old_data), _text(new_data)
    if old_text is not None and new_text is not None:
        hunks = _text_hunks(old_text, new_text)
        if hunks:  # an empty file created or deleted has no hunk, as in git
            lines.append(f"--- {a if old else '/dev/null'}\n+++ {b if new else '/dev/null'}\n")
            lines.append(hunks)
    else:
        lines.append(f"GIT binary patch\n{_literal(new_data)}\n{_literal(old_data)}\n")
    return "".join(lines)


def _text(data: bytes) -> str | None:
    if len(data) > MAX_TEXT_BYTES or b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _split_lines(text: str) -> list[str]:
    """Lines ending in "\\n" (the last may lack it); only "\\n" ends a line, as in git."""
    lines = [line + "\n" for line in text.split("\n")]
    lines[-1] = lines[-1][:-1]
    return lines if lines[-1] else lines[:-1]


def _text_hunks(old: str, new: str) -> str:
    body = difflib.unified_diff(_split_lines(old), _split_lines(new), n=3)
    out = []
    for index, line in enumerate(body):
        if index < 2:
            continue  # difflib's own ---/+++ lines; ours carry git's names
        out.append(line if line.endswith("\n") else f"{line}\n{NO_NEWLINE}")
    return "".join(out)


def _literal(data: bytes) -> str:
    """A `literal` hunk: the deflated bytes in lines of at most 52, each led by its length
    (A–Z for 1–26, a–z for 27–52) and base85-encoded in groups of 4 (the last zero-padded)."""
    packed = zlib.compress(data)
    lines = [f"literal {len(data)}\n"]
    for start in range(0, len(packed), _BINARY_LINE_BYTES):
        chunk = packed[start : start + _BINARY_LINE_BYTES]
        n = len(chunk)
        prefix = chr(ord("A") + n - 1) if n <= 26 else chr(ord("a") + n - 27)
        lines.append(prefix + base64.b85encode(chunk, pad=True).decode("ascii") + "\n")
    return "".join(lines)


def quote_path(name: str) -> str:
    """`name` as git writes it in a patch: as is when plain, else in double quotes with C
    escapes and every byte outside printable ASCII in octal (git's `core.quotePath`)."""
    raw = os.fsencode(name)
    if all(0x20 < byte < 0x7F and byte not in (0x22, 0x5C) for byte in raw):
        return name
    out = []
    for byte in raw:
        if byte in (0x22, 0x5C):
            out.append("\\" + chr(byte))
        elif byte in _QUOTED:
            out.append(_QUOTED[byte])
        elif 0x20 <= byte < 0x7F:
            out.append(chr(byte))
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'
