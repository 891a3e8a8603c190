"""How the scripted solver finds the fix's location without knowing more than the agent.

The solver may use what it knows of the fix only to *choose* among moves the agent could
justify. It does so by playing the read-only tools in process on the repository it knows
(`Probe`, which renders output as the tools do) and keeping the honest search — words of
the instruction and of earlier results, in a grep pattern — whose hits land near the fix,
at the lowest cost in shown characters. A search whose hit is close enough to read the
fix's lines in one window *anchors* that edit: a read_file range around the hit is then
honest and shows the text the edit must quote.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from etude.common.gitignore import compile_glob
from etude.common.tool_text import (
    GREP_DEFAULT_MAX_RESULTS,
    GREP_HIT,
    GREP_LONG_LINE,
    GREP_MAX_COLUMNS,
    GREP_MAX_RESULTS,
    cut_to,
    grep_hit,
    grep_more,
    grep_no_matches,
    numbered_line,
)
from etude.common.toolcalls import ToolCall
from etude.rollout.scripted_patch import Edit, Repository
from etude.rollout.scripted_sight import LANGUAGE_WORDS, Sight, normal_path

HITS_PER_SEARCH = 10
"""Hits shown per search: enough to choose from, few enough to stay cheap in tokens."""
SEARCH_K = 3
CONTEXT = 3
"""Lines shown either side of what a read needs."""
SIGNATURE_REACH = 12
"""A read starting this close below the function's `def` starts at the `def` instead."""
WHOLE_FUNCTION_LINES = 30
"""A function this short is read whole."""
COMPANION_CHARS = 700
"""The most a second, parallel search may add to a turn."""
MAX_FIRST_HOPS = 12
OUTLINE_PATTERN = "(def|class) "
"""A grep that lists what a file defines."""

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PHRASE_WORD = re.compile(r"[A-Za-z]+")
# Words of every statement that say nothing about where the bug is.
_NOISE = frozenset({
    "some", "behaviour", "behavior", "broken", "these", "tests", "test", "fail", "fails",
    "failed", "failing", "right", "library", "wrong", "find", "cause", "fix", "pass",
    "passing", "keeps", "every", "other", "files", "file", "repository", "run", "against",
    "your", "changes", "when", "submit", "the", "and", "are", "not", "they", "this", "that",
    "with", "from", "into", "its", "for", "was", "were", "has", "have", "had", "been",
    "should", "would", "could", "will", "can", "does", "did", "got", "expected", "assert",
    "assertion", "assertionerror", "error", "raise", "raised", "raises", "true", "false",
    "none",
})  # fmt: skip


def line_text(line: str) -> str:
    return line.removesuffix("\n").removesuffix("\r")


class Probe:
    """The read-only tools played in process on the repository the solver knows."""

    def __init__(self, repository: Repository) -> None:
        self.repository = repository
        self._texts = {path: "".join(lines) for path, lines in repository.files.items()}
        # Characters of lines 1..n as read_file numbers them, for the cost of any window.
        self._shown_up_to: dict[str, list[int]] = {}

    def grep(self, args: dict[str, str]) -> str:
        pattern = args["pattern"]
        flags = re.IGNORECASE if args.get("case_insensitive") == "true" else 0
        regex = re.compile(pattern, flags)
        target = normal_path(args.get("path", "."))
        glob = compile_glob(args["glob"]) if args.get("glob") else None
        limit = min(int(args.get("max_results", GREP_DEFAULT_MAX_RESULTS)), GREP_MAX_RESULTS)
        whole = re.compile(pattern, flags | re.MULTILINE)
        hits, total = [], 0
        for path, lines in self.repository.files.items():
            if target != "." and path != target and not path.startswith(target + "/"):
                continue
            relative = path if target == "." else path[len(target) + 1 :]
            if glob is not None and path != target and not glob.matches(relative, is_dir=False):
                continue
            if not whole.search(self._texts[path]):
                continue  # no line can match: most files, for most patterns
            for number, line in enumerate(lines, 1):
                text = line_text(line)
                if regex.search(text):
                    total += 1
                    if len(hits) < limit:
                        long = len(line.encode("utf-8", "surrogateescape")) > GREP_MAX_COLUMNS
                        hits.append(grep_hit(path, number, GREP_LONG_LINE if long else text))
        if not total:
            where = target if target != "." else "the workspace"
            return grep_no_matches(pattern, where)
        if total > len(hits):
            hits.append(grep_more(total - len(hits), total))
        return "\n".join(hits)

    def read(self, args: dict[str, str]) -> str:
        lines = self.repository.files[normal_path(args["path"])]
        start = int(args.get("start_line", "1"))
        end = min(int(args.get("end_line", str(len(lines)))), len(lines))
        return "\n".join(numbered_line(n, line_text(lines[n - 1])) for n in range(start, end + 1))

    def window_chars(self, path: str, start: int, end: int) -> int:
        """Characters read_file shows for lines start..end (a newline after each)."""
        totals = self._shown_up_to.get(path)
        if totals is None:
            totals = [0]
            for n, line in enumerate(self.repository.files[path], 1):
                totals.append(totals[-1] + len(numbered_line(n, line_text(line))) + 1)
            self._shown_up_to[path] = totals
        return totals[end] - totals[start - 1]


@dataclass(frozen=True, slots=True)
class Window:
    path: str
    start: int
    end: int
    chars: int

    def call(self) -> ToolCall:
        arguments = {"path": self.path, "start_line": str(self.start), "end_line": str(self.end)}
        return ToolCall("read_file", arguments)


def window(probe: Probe, edit: Edit, anchor: int, cap: int) -> Window | None:
    """The read that shows `edit`'s quoted lines and the shown line `anchor`: the whole
    function when it is short, else from its `def` when that is near, else the lines needed
    with a little context; None when it does not fit in one shown result."""
    size = len(probe.repository.files[edit.path])
    low, high = min(anchor, edit.first), max(anchor, edit.last)
    scope = edit.scope
    choices = []
    if scope.first <= low and high <= scope.last:
        if scope.last - scope.first < WHOLE_FUNCTION_LINES:
            choices.append((scope.first, scope.last))
        if low - scope.first <= SIGNATURE_REACH:
            choices.append((scope.first, min(size, high + CONTEXT)))
    choices.append((max(1, low - CONTEXT), min(size, high + CONTEXT)))
    for start, end in choices:
        chars = probe.window_chars(edit.path, start, end)
        if chars <= cap:
            return Window(edit.path, start, end, chars)
    return None


def best_window(probe: Probe, sight: Sight, edit: Edit, cap: int) -> Window | None:
    """The cheapest honest read of `edit`'s lines: around a line of its file already shown,
    preferably one inside the function the fix changes."""
    scope = edit.scope
    found = [
        (not scope.first <= n <= scope.last, w.chars, w.start, w)
        for n in sorted(sight.lines_of(edit.path))
        if (w := window(probe, edit, n, cap)) is not None
    ]  # a line inside the function the fix changes first: it is what points there
    return min(found, key=lambda item: item[:3])[3] if found else None


def merged(probe: Probe, windows: list[Window], cap: int) -> list[Window]:
    """Windows of one file that overlap or touch read as one, when that still fits."""
    out: list[Window] = []
    for w in sorted(windows, key=lambda w: (w.path, w.start)):
        if out and out[-1].path == w.path and w.start <= out[-1].end + 1:
            start, end = out[-1].start, max(out[-1].end, w.end)
            chars = probe.window_chars(w.path, start, end)
            if chars <= cap:
                out[-1] = Window(w.path, start, end, chars)
                continue
        out.append(w)
    return out


@dataclass(frozen=True, slots=True)
class Search:
    """A search move, its simulated result as shown, and what it anchors."""

    call: ToolCall
    output: str
    anchor: int | None
    """A shown line of the edit's file from which one read shows the edit (None: none)."""
    in_scope: bool
    """The anchor lies in the function the fix changes: the hit itself points there."""
    cost: int
    """Characters shown by the search and the read it leads to."""


@dataclass(frozen=True, slots=True)
class Plan:
    first: Search
    second: Search | None = None
    """The hop after `first` when one search cannot get there."""

    @property
    def key(self) -> tuple:
        last = self.second or self.first
        return (self.second is not None, not last.in_scope, self.first.cost + (
            self.second.cost if self.second else 0
        ))  # fmt: skip


def clue_words(text: str) -> list[str]:
    """Words worth searching for, in order of appearance: identifiers and the pieces of
    test names, not the statement's boilerplate."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(text):
        for candidate in (word, *word.split("_")):
            low = candidate.lower()
            if len(candidate) >= 3 and low not in _NOISE and not low.isdigit():
                seen.setdefault(candidate, None)
    return list(seen)


def phrases(text: str) -> list[str]:
    """Runs of two to four plain words of one line (an error message's wording)."""
    found: dict[str, None] = {}
    for row in text.split("\n"):
        for sentence in re.split(r"[^A-Za-z ]+", row):
            words = sentence.split()
            for size in (4, 3, 2):
                for i in range(len(words) - size + 1):
                    run = words[i : i + size]
                    if sum(w.lower() not in _NOISE for w in run) >= 2:
                        found.setdefault(" ".join(run), None)
    return list(found)


def grep_calls(text: str, wording: str, folder: str, files: list[str]) -> list[ToolCall]:
    """Grep moves built from the words of `text` and the phrases of `wording`: in the
    package `folder` and in each of the shown `files`."""
    calls: list[ToolCall] = []

    def add(pattern: str, path: str, **extra: str) -> None:
        args = {"pattern": pattern, "path": path, "max_results": str(HITS_PER_SEARCH)}
        if not path.endswith(".py"):
            args["glob"] = "*.py"
        calls.append(ToolCall("grep", {**args, **extra}))

    for word in clue_words(text):
        low = word.lower()
        for path in (*files, folder):
            if word.isidentifier() and low not in LANGUAGE_WORDS:
                add(f"def {word}", path)
            add(word, path)
        if word.isalpha() and word.islower():
            add(f"class {word}", folder, case_insensitive="true")
    for phrase in phrases(wording):
        add(phrase, folder)
    for path in files:
        add(OUTLINE_PATTERN, path)
    return calls


def plan_search(
    probe: Probe, sight: Sight, edit: Edit, folder: str, cap: int, avoid: set[str]
) -> tuple[Plan | None, list[Search]]:
    """The cheapest honest way to anchor `edit` with one search, else with two; and every
    honest one-hop search that shows something, cheapest first (for a parallel companion).
    Searches whose pattern is in `avoid` (made already) are left out."""
    files = [p for p in probe.repository.python_files() if sight.has_path(p)]
    firsts = [s for s in _searches(probe, sight, edit, folder, files, cap, avoid)]
    useful = sorted((s for s in firsts if not s.output.startswith("No matches")),
                    key=lambda s: s.cost)  # fmt: skip
    anchored = [Plan(s) for s in firsts if s.anchor is not None]
    if anchored:
        return min(anchored, key=lambda p: p.key), useful
    plans = []
    for first in useful[:MAX_FIRST_HOPS]:
        after = sight.copy()
        after.see(first.call, first.output)
        new_text = "\n".join(
            w for w in clue_words(first.output) if not sight.has_word(w)
        )  # only what the first hop showed
        more = [p for p in probe.repository.python_files() if after.has_path(p)]
        taken = avoid | {first.call.arguments["pattern"]}
        for second in _searches(probe, after, edit, folder, more, cap, taken, new_text):
            if second.anchor is not None:
                plans.append(Plan(first, second))
    return (min(plans, key=lambda p: p.key) if plans else None), useful


def _searches(
    probe: Probe,
    sight: Sight,
    edit: Edit,
    folder: str,
    files: list[str],
    cap: int,
    avoid: set[str],
    text: str | None = None,
) -> list[Search]:
    """Every honest grep built from `text` (default: all the agent was shown), played."""
    found: dict[tuple, Search] = {}
    words = "\n".join(sight.texts) if text is None else text
    wording = sight.instruction if text is None else ""
    for call in grep_calls(words, wording, folder, files):
        key = tuple(sorted(call.arguments.items()))
        if key in found or call.arguments["pattern"] in avoid or sight.unjustified(call):
            continue
        try:
            output = cut_to(probe.grep(call.arguments), cap)
        except re.error:
            continue
        anchor, in_scope, read_chars = None, False, 0
        for path, number in grep_hits(output):
            if path != edit.path:
                continue
            w = window(probe, edit, number, cap)
            inside = edit.scope.first <= number <= edit.scope.last
            if w is not None and (anchor is None or (inside, -w.chars) > (in_scope, -read_chars)):
                anchor, in_scope, read_chars = number, inside, w.chars
        found[key] = Search(call, output, anchor, in_scope, len(output) + read_chars)
    return list(found.values())


def grep_hits(output: str) -> list[tuple[str, int]]:
    """The (path, line) of each `path:line:text` line of a grep result, paths normalised."""
    return [(normal_path(m[1]), int(m[2])) for m in GREP_HIT.finditer(output)]


def semantic_query(sight: Sight) -> str | None:
    """A codebase_search query in the words of the first failing test's name (the statement's
    clues when it names no test)."""
    named = re.search(r"::([A-Za-z_]\w*)", sight.instruction)
    if named:
        words = [w for w in named[1].split("_") if w and w.lower() != "test"]
    else:
        words = clue_words(sight.instruction)[:6]
    query = " ".join(words[:8])
    return query or None
