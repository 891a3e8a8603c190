"""Text helpers shared by the tools: numbering lines, plurals, printable names (capping
long output is the sandbox's `etude.sandbox.output.cap_output`)."""

from __future__ import annotations


def numbered_line(number: int, line: str) -> str:
    """One line the way `cat -n` shows it, so line numbers in read_file and edit_file agree."""
    return f"{number:>6}\t{line}"


def printable(text: str) -> str:
    """Make text decoded with `surrogateescape` (odd file names, invalid UTF-8) safe to send."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """`1 line`, `2 lines`; pass `nouns` for irregular plurals."""
    return f"{count} {noun}" if count == 1 else f"{count} {nouns or noun + 's'}"
