"""The text of the agent's tool results, written down once.

The environment's tools render their results with these definitions, and whatever must
reproduce or read back what the agent was shown uses the same ones instead of importing the
tools: the task hints quote source the way read_file numbers it (etude.tasks.hints,
etude.tasks.locate), and the scripted solver predicts what its searches, reads and edits
show (etude.rollout.scripted_search, etude.rollout.scripted). Capping long output is the
sandbox's `etude.sandbox.output.cap_output`; the glob syntax of grep and file_search is
etude.common.gitignore.
"""

from __future__ import annotations

import re


def numbered_line(number: int, line: str) -> str:
    """One line the way `cat -n` shows it, so line numbers in read_file and edit_file agree."""
    return f"{number:>6}\t{line}"


NUMBERED_LINE = re.compile(r"^ *([0-9]+)\t(.*)$")
"""A `numbered_line` read back: its number is group 1, its text group 2."""


def cut_to(output: str, cap: int) -> str:
    """A result's output as the agent loop shows the policy: at most `cap` characters, the cut
    marked with how much was left out."""
    if len(output) <= cap:
        return output
    return output[:cap] + f"\n[… {len(output) - cap} more characters cut]"


CUT_MARK = re.compile(r"\n\[… [0-9]+ more characters cut\]$")
"""The mark `cut_to` ends a cut output with."""


def printable(text: str) -> str:
    """Make text decoded with `surrogateescape` (odd file names, invalid UTF-8) safe to send."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """`1 line`, `2 lines`; pass `nouns` for irregular plurals."""
    return f"{count} {noun}" if count == 1 else f"{count} {nouns or noun + 's'}"


# -- read_file -------------------------------------------------------------------------------

READ_FILE_MAX_LINES = 400
"""Lines one read_file call shows at most (a run may lower it: `read_file_max_lines`)."""
READ_FILE_MAX_BYTES = 32 * 1024
"""Bytes one read_file call shows at most (`read_file_max_bytes`)."""
READ_ON = re.compile(r"start_line=([0-9]+)")
"""The line a cut read_file page says to read on from (`read_on`), as group 1."""


def read_on(start: int, last: int, total: int, next_line: int) -> str:
    """The line after a read_file page that the page limits cut: lines `start`-`last` of
    `total` were shown, `next_line` is the first one not shown."""
    return (
        f"… showing lines {start}-{last} of {total}; "
        f"call read_file with start_line={next_line} to read on."
    )


# -- grep ------------------------------------------------------------------------------------

GREP_DEFAULT_MAX_RESULTS = 200
GREP_MAX_RESULTS = 1000
"""The most hit lines one grep call may ask for (its `max_results`)."""
GREP_MAX_COLUMNS = 300
"""A matching line longer than this, in bytes with its newline, is shown as `GREP_LONG_LINE`."""
GREP_LONG_LINE = f"[line over {GREP_MAX_COLUMNS} bytes omitted]"
GREP_HIT = re.compile(r"^([^\s:][^:\n]*):([0-9]+):", re.M)
"""A hit line of a grep result (`grep_hit`): its path is group 1, its line number group 2."""


def grep_hit(path: str, number: int, text: str) -> str:
    """One matching line as grep shows it: `path:line:text`."""
    return f"{path}:{number}:{text}"


def grep_no_matches(pattern: str, where: str) -> str:
    """grep's whole answer when nothing matched; `where` is the searched path, or "the
    workspace"."""
    return f"No matches for {pattern!r} in {where}."


def grep_more(hidden: int, total: int) -> str:
    """The line after the hits shown when `hidden` more of `total` were not shown."""
    more = plural(hidden, "more match", "more matches")
    return (
        f"… {more} not shown ({total} in total); narrow the search with path or "
        f"glob, or raise max_results (at most {GREP_MAX_RESULTS})."
    )


# -- edit_file -------------------------------------------------------------------------------

EDIT_CONTEXT_LINES = 3
"""Lines shown either side of the first change, after an edit."""


def edited(count: int, path: str, excerpt: str) -> str:
    """edit_file's answer: how many occurrences were replaced, then `excerpt`, the numbered
    lines around the first change as they now read."""
    summary = f"Replaced {plural(count, 'occurrence')} in {path}."
    return f"{summary} Lines around the first change now read:\n{excerpt}"
