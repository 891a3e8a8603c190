"""How many bundled tasks the scripted solver turns into correct demonstrations.

Every task (`--quick`: 24, spread over the suite) is played in process: the solver's turns go
through the real codec into a real environment session (bubblewrap), the session's diff is
graded by the real Grader with the hidden tests. A task is solved when every call exits 0,
the episode ends with submit and the reward is 1.0. Episode length in tokens is counted with
the policy's tokenizer on the text the policy would see: system prompt, task, turns, and the
tool results rendered back (each output cut to `RESULT_CHARS` characters, as the loop does)
up to the turn that submits.

    python loadtests/scripted_coverage.py --quick --json out.json
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from benchlib import argument_parser, metric, print_metrics, write_json
from rich.console import Console
from rich.table import Table

from etude.common.toolcalls import ToolResult, parse_tool_calls, render_tool_results, tools_by_name
from etude.environment.client import InProcessEnvironment
from etude.environment.config import EnvironmentConfig
from etude.environment.sandbox.bwrap import find_bwrap
from etude.environment.sessions import SessionManager
from etude.environment.tools import tool_specs
from etude.model.tokenizer import load_tokenizer
from etude.reward.config import RewardConfig
from etude.reward.grader import Grader
from etude.rollout.prompt import IM_END, episode_start, observation
from etude.rollout.scripted import ScriptedSolver, ScriptError
from etude.tasks.materialize import TASKS_FILE, materialize
from etude.tasks.task import Task, read_jsonl

RESULT_CHARS = 2000
MAX_TURNS = 8


@dataclass
class Outcome:
    task: Task
    scriptable: bool
    solved: bool = False
    turns: int = 0
    assistant_text: str = ""
    episode_text: str = ""
    problem: str = ""


async def play(task: Task, environment: InProcessEnvironment, grader: Grader, cache: Path):
    try:
        solver = ScriptedSolver(task)
    except ScriptError as error:
        return Outcome(task, scriptable=False, problem=str(error))
    outcome = Outcome(task, scriptable=True, episode_text=episode_start(task.instruction))
    repository = materialize(task, cache)
    session = (await environment.create_session(task.id, str(repository))).session_id
    specs = tools_by_name(tool_specs())
    try:
        results, ended = None, False
        while not ended and outcome.turns < MAX_TURNS:
            turn = solver.next_turn(results)
            outcome.turns += 1
            outcome.assistant_text += turn
            parsed = parse_tool_calls(turn, tools=specs)
            if not parsed.ok:
                outcome.problem = f"turn {outcome.turns}: {parsed.errors[0].message}"
                return outcome
            results = await environment.execute(session, parsed.calls)
            ended = any(r.ends_episode for r in results)
            shown = render_tool_results(
                ToolResult(
                    r.call_id,
                    r.name,
                    r.output[:RESULT_CHARS],
                    r.exit_code,
                    r.truncated or len(r.output) > RESULT_CHARS,
                )
                for r in results
            )
            # After submit the episode ends: the policy reads no further results.
            outcome.episode_text += turn + (IM_END if ended else observation(shown))
        failed = [r for r in results or () if r.exit_code != 0]
        if failed or not ended:
            outcome.problem = failed[0].output[:200] if failed else "no submit"
            return outcome
        score = await grader.score(task, (await environment.diff(session)).unified_diff)
        outcome.solved = score.reward == 1.0
        outcome.problem = "" if outcome.solved else f"reward {score.reward} {score.error}"
    except ScriptError as error:  # a call of an earlier turn failed
        outcome.problem = str(error)
    finally:
        await environment.close_session(session)
    return outcome


async def play_all(tasks: list[Task], scratch: Path) -> list[Outcome]:
    bwrap = find_bwrap(None)
    manager = SessionManager(EnvironmentConfig(root_dir=scratch / "environment"))
    environment = InProcessEnvironment(manager)
    cache = scratch / "tasks"
    grader = Grader(RewardConfig(cache_dir=cache, tasks_files=(), timeout_seconds=60), bwrap)
    try:
        return [await play(task, environment, grader, cache) for task in tasks]
    finally:
        await manager.close_all()


def print_projects(outcomes: list[Outcome]) -> None:
    table = Table(title="scripted demonstrations per project")
    for column in ("project", "tasks", "scriptable", "solved", "mean turns"):
        table.add_column(column, justify="left" if column == "project" else "right")
    groups: dict[str, list[Outcome]] = defaultdict(list)
    for outcome in outcomes:
        groups[outcome.task.id.split(".")[1]].append(outcome)
    for project, group in sorted(groups.items()):
        played = [o.turns for o in group if o.scriptable] or [0]
        table.add_row(
            project, str(len(group)), str(sum(o.scriptable for o in group)),
            str(sum(o.solved for o in group)), f"{statistics.mean(played):.2f}",
        )  # fmt: skip
    Console().print(table)
    for outcome in outcomes:
        if not outcome.solved:
            print(f"NOT SOLVED {outcome.task.id}: {outcome.problem}")


def main() -> None:
    args = argument_parser(__doc__).parse_args()
    tasks = list(read_jsonl(TASKS_FILE))
    if args.quick:
        tasks = tasks[:: max(1, len(tasks) // 24)][:24]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="etude-scripted-") as scratch:
        outcomes = asyncio.run(play_all(tasks, Path(scratch)))
    seconds = time.perf_counter() - started
    played = [o for o in outcomes if o.scriptable] or outcomes
    tokenizer = load_tokenizer()
    tokens = [len(tokenizer.encode(o.episode_text)) for o in played if o.episode_text] or [0]
    assistant_tokens = [len(tokenizer.encode(o.assistant_text)) for o in played] or [0]
    metrics = {
        "solved_fraction": metric(sum(o.solved for o in outcomes) / len(outcomes), "fraction"),
        "scriptable_fraction": metric(
            sum(o.scriptable for o in outcomes) / len(outcomes), "fraction"
        ),
        "mean_turns": metric(statistics.mean(o.turns for o in played), "turns"),
        "mean_assistant_chars": metric(
            statistics.mean(len(o.assistant_text) for o in played), "characters"
        ),
        "mean_assistant_tokens": metric(statistics.mean(assistant_tokens), "tokens"),
        "mean_episode_tokens": metric(statistics.mean(tokens), "tokens"),
        "max_episode_tokens": metric(max(tokens), "tokens"),
    }
    print_projects(outcomes)
    print_metrics(f"scripted coverage: {len(outcomes)} tasks in {seconds:.0f} s", metrics)
    write_json(args.json, "scripted_coverage", metrics, quick=args.quick, tasks=len(outcomes))


if __name__ == "__main__":
    main()
