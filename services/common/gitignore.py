"""The common subset of `.gitignore` rules, and the glob syntax the tools share with it.

Supported: blank lines and `#` comments, `!` negation, a trailing `/` for directories only, a
leading or inner `/` anchoring the pattern to the `.gitignore`'s directory, `*`, `?`, `[...]`
classes, `**` as a whole component, and backslash escapes. Not supported: `.git/info/exclude`,
global excludes and `.ignore` files (ripgrep is told to skip those too, so both grep engines
see the same rules).

As in git, the deepest `.gitignore` with a matching pattern decides, the last matching pattern
in a file wins, and an ignored directory is not entered, so nothing inside it can be re-included.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_GLOB_SPECIALS = "*?[\\"


@dataclass(frozen=True, slots=True)
class Pattern:
    """One rule. `body` is the glob without `!`, the anchoring `/` and the trailing `/`."""

    body: str
    negated: bool
    dir_only: bool
    anchored: bool
    regex: re.Pattern[str]

    def matches(self, relative: str, is_dir: bool) -> bool:
        """Whether `relative` (a path relative to the rule's directory) matches."""
        if self.dir_only and not is_dir:
            return False
        return self.regex.fullmatch(relative) is not None

    def rebased(self, prefix: str) -> str:
        """This rule as a line of a `.gitignore` in an ancestor directory `prefix` levels up.

        Used to hand rules from above the searched directory to ripgrep, which reads them
        relative to its working directory (the workspace root).
        """
        base = escape_glob(prefix)
        body = self.body if self.anchored else f"**/{self.body}"
        line = f"/{base}/{body}" if base else f"/{body}"
        return ("!" if self.negated else "") + line + ("/" if self.dir_only else "")


def parse_line(line: str) -> Pattern | None:
    """A `.gitignore` line as a rule, or None for blanks, comments and unusable lines."""
    line = _strip_trailing_spaces(line.rstrip("\r\n"))
    if not line or line.startswith("#"):
        return None
    negated = line.startswith("!")
    if negated or line.startswith(("\\!", "\\#")):
        line = line[1:]  # drop the `!`, or the backslash that made `!`/`#` literal
    dir_only = line.endswith("/")
    line = line.rstrip("/")
    anchored = "/" in line
    line = line.lstrip("/")
    if not line:
        return None
    prefix = "" if anchored else "(?:.*/)?"
    regex = re.compile(prefix + glob_to_regex(line), re.DOTALL)
    return Pattern(line, negated, dir_only, anchored, regex)


def parse(text: str) -> list[Pattern]:
    return [pattern for line in text.splitlines() if (pattern := parse_line(line))]


def compile_glob(glob: str) -> Pattern:
    """A user glob for grep and file_search, with the same rules as a `.gitignore` line.

    Without a `/` it matches a file name at any depth (`*.py`); with one it is anchored to the
    search directory (`src/**/*.py`).
    """
    glob = glob.strip()
    if glob.startswith("./"):
        glob = glob[2:]
    pattern = parse_line(glob.replace("!", "\\!", 1) if glob.startswith("!") else glob)
    if pattern is None:
        raise ValueError(f"glob {glob!r} matches nothing")
    return pattern


def glob_to_regex(glob: str) -> str:
    """Translate a glob where `*`, `?` and classes never cross `/` and `**` spans directories."""
    out: list[str] = []
    components = glob.split("/")
    for index, component in enumerate(components):
        last = index == len(components) - 1
        if component == "**":
            # `**/` matches zero or more directories; a trailing `/**` everything inside.
            out.append(".*" if last else "(?:.*/)?")
            continue
        out.append(_component_to_regex(component))
        if not last:
            out.append("/")
    return "".join(out)


def escape_glob(text: str) -> str:
    return "".join(f"\\{char}" if char in _GLOB_SPECIALS else char for char in text)


def _component_to_regex(component: str) -> str:
    out: list[str] = []
    index = 0
    while index < len(component):
        char = component[index]
        if char == "*":
            while index + 1 < len(component) and component[index + 1] == "*":
                index += 1  # `a**b` is not a whole component: an ordinary star
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[" and (end := _class_end(component, index)) > 0:
            out.append(_class_to_regex(component[index + 1 : end]))
            index = end
        elif char == "\\" and index + 1 < len(component):
            index += 1
            out.append(re.escape(component[index]))
        else:
            out.append(re.escape(char))
        index += 1
    return "".join(out)


def _class_end(component: str, start: int) -> int:
    """Index of the `]` closing the class opened at `start`, or -1 (then `[` is literal)."""
    index = start + 1
    if index < len(component) and component[index] in "!^":
        index += 1
    if index < len(component) and component[index] == "]":
        index += 1  # a leading `]` is a member of the class
    while index < len(component):
        if component[index] == "\\":
            index += 2
            continue
        if component[index] == "]":
            return index
        index += 1
    return -1


def _class_to_regex(inner: str) -> str:
    negated = inner[:1] in ("!", "^")
    if negated:
        inner = inner[1:]
    members = []
    index = 0
    while index < len(inner):
        char = inner[index]
        if char == "\\" and index + 1 < len(inner):
            index += 1
            members.append(re.escape(inner[index]))
        else:  # ranges like `a-z` pass through; a `-` at either end is literal in both syntaxes
            members.append(re.escape(char) if char in "\\]^[" else char)
        index += 1
    body = "".join(members)
    # A class never matches `/`, negated or not, so it cannot cross a directory.
    return f"[^/{body}]" if negated else f"(?!/)[{body}]"


def _strip_trailing_spaces(line: str) -> str:
    stripped = line.rstrip(" ")
    if stripped.endswith("\\") and len(stripped) < len(line):
        return stripped[:-1] + " "  # an escaped trailing space is kept
    return stripped


class IgnoreRules:
    """The `.gitignore` rules in force while walking down a tree: one frame per directory."""

    def __init__(self) -> None:
        self._frames: list[tuple[str, list[Pattern]]] = []

    def push(self, directory: str, patterns: list[Pattern]) -> None:
        """Enter `directory` (workspace-relative, "" for the root) with its rules."""
        self._frames.append((directory, patterns))

    def pop(self) -> None:
        self._frames.pop()

    def frames(self) -> list[tuple[str, list[Pattern]]]:
        return list(self._frames)

    def ignored(self, relative: str, is_dir: bool) -> bool:
        for directory, patterns in reversed(self._frames):
            if not patterns:
                continue
            if directory:
                if not relative.startswith(directory + "/"):
                    continue
                inner = relative[len(directory) + 1 :]
            else:
                inner = relative
            for pattern in reversed(patterns):
                if pattern.matches(inner, is_dir):
                    return not pattern.negated
        return False
