"""Text helpers shared by the tools (and the sandbox): capping long output, numbering lines.

Long output is cut in the middle rather than at the end because both ends carry signal: the
start of a command's output says what ran, the end says how it finished (tracebacks, summaries).
"""

from __future__ import annotations


def cap_output(text: str, head: int = 5000, tail: int = 5000) -> tuple[str, int]:
    """Keep the first `head` and last `tail` characters; return the text and how many were cut.

    The cut is marked in the text itself so the agent knows something is missing.
    """
    cut = len(text) - head - tail
    if cut <= 0:
        return text, 0
    ending = text[len(text) - tail :] if tail else ""
    return join_cut(text[:head], cut, ending), cut


def join_cut(head: str, cut: int, tail: str) -> str:
    """The kept start and end of a text with the mark of what is missing between them."""
    return f"{head}\n[… {cut} characters cut …]\n{tail}"


def numbered_line(number: int, line: str) -> str:
    """One line the way `cat -n` shows it, so line numbers in read_file and edit_file agree."""
    return f"{number:>6}\t{line}"


def printable(text: str) -> str:
    """Make text decoded with `surrogateescape` (odd file names, invalid UTF-8) safe to send."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """`1 line`, `2 lines`; pass `nouns` for irregular plurals."""
    return f"{count} {noun}" if count == 1 else f"{count} {nouns or noun + 's'}"
