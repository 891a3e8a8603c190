"""A scripted solver: plays the policy's part from a task's known fix, for SFT demonstrations
that are honest — every argument follows from what the agent has been shown.

The agent sees the instruction at its hint tier (etude.tasks.hints) and the results of its
calls; the solver also knows the fix. It works like a careful engineer who happens to
choose well, turn by turn on the real results:

1. search, when no line near the fix has been shown yet: grep (or codebase_search) for
   words of the instruction or of earlier results, chosen so the hits land in the function
   the fix changes (etude.rollout.scripted_search);
2. read a window around a shown line that holds the lines the edit must quote;
3. `edit_file`, quoting text a listing showed;
4. optionally check that the changed module still imports (the hidden tests are not there);
5. `submit`.

At tier 3 the function's source is in the instruction, so the baseline is two turns: edit,
then submit. `variant` picks a style (etude.rollout.scripted_styles): parallel batches or one
call per turn, codebase_search or grep first, reading before a tier-3 edit or not, the
smoke check or not. Each turn is a line of prose and the calls; prose names only what was
shown. Before writing a call the solver checks it with the same rules the honesty check
applies afterwards (etude.rollout.scripted_sight), and raises ScriptError rather than
write one it cannot justify.
"""

from __future__ import annotations

import re
from pathlib import Path

from etude.common.tool_text import EDIT_CONTEXT_LINES, cut_to, edited, numbered_line
from etude.common.toolcalls import ToolCall, render_tool_calls
from etude.environment.types import ExecutedCall, ToolOutput
from etude.rollout.scripted_patch import (
    Edit,
    Repository,
    ScriptError,
    parse_patch,
    plan_edits,
    split_lines,
)
from etude.rollout.scripted_search import (
    COMPANION_CHARS,
    OUTLINE_PATTERN,
    SEARCH_K,
    Probe,
    Search,
    Window,
    best_window,
    line_text,
    merged,
    plan_search,
    semantic_query,
)
from etude.rollout.scripted_sight import Sight, words_of
from etude.rollout.scripted_styles import Style, style_for
from etude.tasks.hints import HintError, instruction_at_tier
from etude.tasks.task import Task

__all__ = ["SHOWN_CHARS", "ScriptError", "ScriptedSolver"]

SHOWN_CHARS = 2000
"""The agent loop's cut of each tool result (`rollout.max_tool_output_chars`)."""
MAX_SEARCHES = 4
_MODULE_PATH = re.compile(r"[A-Za-z_]\w*(?:/[A-Za-z_]\w*)*\.py")
_READ_SOURCES = frozenset({"read_file", "edit_file"})
# The synthesizer's mutation kinds, as someone reading the code would name the bug.
_DIAGNOSES = {
    "boolean_swap": "`and` and `or` are mixed up",
    "comparison_swap": "the comparison is inverted",
    "dropped_statement": "a statement is missing",
    "negated_condition": "the condition is negated",
    "off_by_one": "a value is off by one",
    "swapped_arguments": "two arguments are swapped",
    "wrong_variable": "the wrong variable is used",
}


def instruction_at(task: Task, tier: int) -> str:
    """The instruction an episode of `task` at `tier` shows."""
    if tier == 0:
        return task.instruction
    try:
        return instruction_at_tier(task, tier)
    except HintError as error:
        raise ScriptError(str(error)) from None


class ScriptedSolver:
    """Plays the policy's part for one task at one hint tier, in one style.

    `repository` is the task's materialized (buggy) repository; without one, a bundled
    etude-mini task's files come from its project with the gold patch taken back.
    `instruction` is what the agent sees (default: the task's at `tier`); `shown_chars` the
    agent loop's cut of each result, so the solver sees what the agent sees.
    """

    def __init__(
        self,
        task: Task,
        repository: Path | None = None,
        *,
        tier: int = 0,
        variant: int = 0,
        instruction: str | None = None,
        shown_chars: int = SHOWN_CHARS,
    ) -> None:
        if not task.gold_patch.strip():
            raise ScriptError(f"{task.id}: no gold patch")
        hunks = parse_patch(task.gold_patch)
        self.task = task
        self.tier = tier
        self.style: Style = style_for(task.id, tier, variant)
        self.repository = Repository.for_task(task, hunks, repository)
        self.edits: list[Edit] = plan_edits(task, self.repository, hunks)
        self.instruction = instruction if instruction is not None else instruction_at(task, tier)
        self.sight = Sight(self.instruction)
        self.shown_chars = shown_chars
        self._probe = Probe(self.repository)
        self._texts = {path: "".join(lines) for path, lines in self.repository.files.items()}
        self._pending: list[ToolCall] = []
        self._turns = 0
        self._applied = 0
        self._checked = False
        self._submitted = False
        self._searched: set[str] = set()
        self._searches = 0
        self._semantic_tried = False

    @property
    def label(self) -> str:
        """How it works (its style), as demonstrations record it."""
        return self.style.label

    @property
    def done(self) -> bool:
        """True once the turn that submits has been played."""
        return self._turns > 0 and any(c.name == "submit" for c in self._pending)

    def next_turn(self, results: list[ExecutedCall] | None) -> str:
        """The next assistant turn; `results` are those of the previous turn's calls (None
        before the first turn). An empty list for a turn that made calls means the script is
        played without an environment: the solver then reads the repository itself in their
        place. Raises ScriptError when a call failed or no honest move is left."""
        if (results is None) != (self._turns == 0):
            raise ValueError("every turn but the first needs the previous turn's results")
        if self.done:
            raise ScriptError("the script has already submitted")
        if results is not None:
            self._take(results or [self.simulate(call) for call in self._pending])
        prose, calls = self._decide()
        numbered = [ToolCall(c.name, c.arguments, f"call_{i}") for i, c in enumerate(calls)]
        for call in numbered:
            problem = self.sight.unjustified(call)
            if problem:
                raise ScriptError(f"{self.task.id}: no honest move: {problem}")
        problem = self.sight.unjustified_prose(prose)
        if problem:
            raise ScriptError(f"{self.task.id}: no honest prose: {problem}")
        self._pending = numbered
        self._turns += 1
        return f"{prose}\n{render_tool_calls(numbered)}"

    # -- results -------------------------------------------------------------------------

    def _take(self, results: list[ExecutedCall]) -> None:
        by_id = {r.call_id: r for r in results}
        for call in self._pending:
            executed = by_id.get(call.id)
            if executed is None:
                raise ScriptError(f"no result for {call.id} {call.name}")
            result = executed.result
            # A search index that is absent or failed says to use grep: the script does.
            if result.exit_code != 0 and call.name != "codebase_search":
                raise ScriptError(f"{call.id} {call.name} failed: {result.output[:300]}")
            self.sight.see(call, cut_to(result.output, self.shown_chars), result.exit_code)
            if call.name == "edit_file":
                self._applied += 1
            elif call.name == "run_terminal_command":
                self._checked = True

    def simulate(self, call: ToolCall) -> ExecutedCall:
        """What `call` returns, played in process on the repository the solver knows, for
        playing the script without an environment (edits change only the solver's copy; a
        command is taken to print what the smoke check prints when it works)."""
        args, code = call.arguments, 0
        if call.name == "grep":
            output = self._probe.grep(args)
        elif call.name == "read_file":
            output = self._probe.read(args)
        elif call.name == "edit_file":
            output = self._simulated_edit(args["path"], args["old_string"], args["new_string"])
        elif call.name == "run_terminal_command":
            output = "ok\n[exit code: 0]"
        elif call.name == "submit":
            output = f"Submitted: {args['message'].strip()}"
        else:  # codebase_search needs the search service
            output, code = "codebase_search is not available. Use grep or file_search.", 1
        return ExecutedCall(call.id, call.name, ToolOutput(output, exit_code=code), 0.0)

    def _simulated_edit(self, path: str, old: str, new: str) -> str:
        text = self._texts[path]
        at = text.index(old)
        self._texts[path] = text = text.replace(old, new, 1)
        first = text.count("\n", 0, at) + 1
        last = first + new.removesuffix("\n").count("\n")
        lines = split_lines(text)
        excerpt = "\n".join(
            numbered_line(n, line_text(lines[n - 1]))
            for n in range(
                max(1, first - EDIT_CONTEXT_LINES), min(len(lines), last + EDIT_CONTEXT_LINES) + 1
            )
        )
        return edited(1, path, excerpt)

    # -- the next move -------------------------------------------------------------------

    def _decide(self) -> tuple[str, list[ToolCall]]:
        style = self.style
        pending = self.edits[self._applied :]
        if not pending:
            smoke = self._smoke()
            if style.smoke and smoke and not self._checked:
                return ("The tests are not in the repository, so I check that the code "
                        "still imports.", [smoke])  # fmt: skip
            return "The fix is in place.", [self._submit()]
        sources = _READ_SOURCES if style.read_first else None
        unshown = [e for e in pending if not self.sight.shows(e.path, e.old, sources)]
        if not unshown:
            return self._edit_turn(pending)
        cap = self.shown_chars
        windows = [best_window(self._probe, self.sight, e, cap) for e in unshown]
        if windows[0] is not None:
            ready = [w for w in windows if w is not None]
            reads = merged(self._probe, ready, self.shown_chars)
            return self._read_turn(reads[: len(reads) if style.parallel else 1], unshown[0])
        return self._search_turn(unshown[0])

    def _edit_turn(self, pending: list[Edit]) -> tuple[str, list[ToolCall]]:
        edits = pending if self.style.parallel else pending[:1]
        calls = [
            ToolCall("edit_file", {"path": e.path, "old_string": e.old, "new_string": e.new})
            for e in edits
        ]
        prose = f"{self._where(edits[0])}, {self._diagnosis()}; fixing it"
        smoke = self._smoke()
        if self.style.parallel and self.style.smoke and smoke and len(edits) == len(pending):
            # Commands of a batch run after the edits before them: the check sees the fix.
            calls.append(smoke)
            prose += " and checking that the code still imports"
        return prose + ".", calls

    def _read_turn(self, reads: list[Window], edit: Edit) -> tuple[str, list[ToolCall]]:
        calls = [w.call() for w in reads]
        name = self._scope_name(edit)
        if self.sight.shows(edit.path, edit.old) and name:  # tier 3: the source was given
            prose = f"I'll read `{name}` in {edit.path} before changing it."
            usage = self._usage_search(edit)
            if self.style.parallel and usage is not None:
                calls.append(usage.call)
                prose = f"I'll read `{name}` in {edit.path} and look for where it is used."
        elif len(calls) > 1:
            prose = "Those lines look relevant; I'll read the code around them."
        elif name and reads[0].start <= edit.scope.first:
            prose = f"`{name}` in {edit.path} looks relevant; I'll read it."
        else:
            anchor = _anchor(self.sight, reads[0])
            prose = f"{edit.path} line {anchor} looks relevant; I'll read the code around it."
        return prose, calls

    def _search_turn(self, edit: Edit) -> tuple[str, list[ToolCall]]:
        self._searches += 1
        if self._searches > MAX_SEARCHES:
            raise ScriptError(f"{self.task.id}: not found in {MAX_SEARCHES} searches")
        style, calls, prose = self.style, [], []
        if style.first_search == "codebase_search" and not self._semantic_tried:
            self._semantic_tried = True
            query = semantic_query(self.sight)
            if query is not None:
                calls.append(ToolCall("codebase_search", {"query": query, "k": str(SEARCH_K)}))
                prose.append(f'I\'ll search the code by meaning for "{query}"')
                if not style.parallel:
                    return prose[0] + ".", calls
        plan, useful = plan_search(
            self._probe, self.sight, edit, self._folder(edit), self.shown_chars, self._searched
        )
        if plan is None:
            raise ScriptError(f"{self.task.id}: no search shown so far leads to {edit.path}")
        searches = [plan.first]
        if style.parallel and not calls:
            companion = _companion(useful, plan.first, edit.path)
            if companion is not None:
                searches.append(companion)
        for search in searches:
            calls.append(search.call)
            self._searched.add(search.call.arguments["pattern"])
        prose.append(self._search_prose(searches))
        return "; ".join(prose) + ".", calls

    # -- pieces --------------------------------------------------------------------------

    def _folder(self, edit: Edit) -> str:
        """Where to search: the package folder of the fix, once it has been shown."""
        top = edit.path.split("/")[0] if "/" in edit.path else "."
        return top if top != "." and self.sight.has_directory(top) else "."

    def _search_prose(self, searches: list[Search]) -> str:
        told = words_of(self.instruction)
        things, sources = [], set()
        for search in searches:
            pattern = search.call.arguments["pattern"]
            if pattern == OUTLINE_PATTERN:
                things.append(f"what {search.call.arguments['path']} defines")
                continue
            word = pattern.removeprefix("def ").removeprefix("class ")
            things.append(f"a definition of `{word}`" if word != pattern else f"`{word}`")
            sources.add("the task mentions" if words_of(word) <= told else "came up so far")
        named = ", which " + " or ".join(sorted(sources)) if sources else ""
        return f"I'll search for {' and for '.join(things)}{named}"

    def _scope_name(self, edit: Edit) -> str | None:
        """The function's name as far as the agent has seen it (`Class.method`, else
        `method`)."""
        name = edit.scope.name
        if all(self.sight.has_word(part) for part in name.split(".")):
            return name
        short = name.split(".")[-1]
        return short if self.sight.has_word(short) else None

    def _where(self, edit: Edit) -> str:
        name = self._scope_name(edit)
        return f"In `{name}`" if name else f"On line {edit.changed} of {edit.path}"

    def _diagnosis(self) -> str:
        return _DIAGNOSES.get(str(self.task.metadata.get("mutation", "")), "this is the bug")

    def _usage_search(self, edit: Edit) -> Search | None:
        short = edit.scope.name.split(".")[-1]
        call = ToolCall(
            "grep",
            {"pattern": rf"\b{short}\(", "path": self._folder(edit), "glob": "*.py",
             "max_results": "10"},
        )  # fmt: skip
        if self.sight.unjustified(call):
            return None
        output = cut_to(self._probe.grep(call.arguments), self.shown_chars)
        return Search(call, output, None, False, len(output))

    def _smoke(self) -> ToolCall | None:
        """Import the changed modules, byte-compile other changed Python; None if none."""
        paths = list(dict.fromkeys(e.path for e in self.edits))
        modules = [m for m in map(_module, paths) if m]
        scripts = [p for p in paths if p.endswith(".py") and not _module(p)]
        commands = [f"python -c \"import {', '.join(modules)}; print('ok')\""] if modules else []
        commands += [f"python -m py_compile {' '.join(scripts)}"] if scripts else []
        if not commands:
            return None
        return ToolCall("run_terminal_command", {"command": " && ".join(commands)})

    def _submit(self) -> ToolCall:
        edit = self.edits[0]
        name = self._scope_name(edit)
        where = f"`{name}` in {edit.path}" if name else f"line {edit.changed} of {edit.path}"
        return ToolCall("submit", {"message": f"Fixed {where}: {self._diagnosis()}."})


def _module(path: str) -> str | None:
    """The dotted name of a module inside a package; a top-level file may be a script
    (setup.py), which importing would run."""
    if "/" not in path or not _MODULE_PATH.fullmatch(path):
        return None
    return path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def _anchor(sight: Sight, window: Window) -> int:
    """The shown line a read is justified by (the first one inside it)."""
    seen = sorted(n for n in sight.lines_of(window.path) if window.start - 1 <= n <= window.end)
    return seen[0]


def _companion(useful: list[Search], first: Search, path: str) -> Search | None:
    """A second, cheap search for the same parallel turn: another clue, preferably one that
    also shows the file."""
    others = [
        s for s in useful
        if s.call.arguments["pattern"] != first.call.arguments["pattern"]
        and len(s.output) <= COMPANION_CHARS
    ]  # fmt: skip
    if not others:
        return None
    return min(others, key=lambda s: (f"{path}:" not in s.output, len(s.output)))
