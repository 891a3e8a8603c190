"""The SFT warm start: demonstrations are real episodes (sandboxed sessions, the real grader)
at each hint tier, kept only when solved, honest and within budget; training sees only the
policy's tokens, keeps a share of the tasks out for a held-out loss, and trains only the last
layers when asked."""

from __future__ import annotations

import asyncio
import math
import tempfile
from pathlib import Path

import pytest
import torch

from etude.common.payloads import RolloutRequest, Trajectory
from etude.common.run_config import RolloutConfig, SftConfig
from etude.common.toolcalls import tools_by_name
from etude.environment.local import InProcessEnvironment
from etude.environment.tools import tool_specs
from etude.model.checkpoint import from_pretrained
from etude.model.tokenizer import load_tokenizer
from etude.reward.config import RewardConfig
from etude.reward.grader import Grader
from etude.rollout.agent import EpisodeRunner
from etude.rollout.demonstrations import collect_demonstrations
from etude.rollout.prompt import IM_END
from etude.rollout.samplers import ScriptedSampler
from etude.rollout.scripted import ScriptedSolver
from etude.rollout.scripted_honesty import derivable_violations, episode_from_text
from etude.rollout.service import repositories_only
from etude.rollout.types import Demonstrations
from etude.sandbox.bwrap import find_bwrap
from etude.tasks.materialize import LOCATE_STUBBED_TASKS_FILE, materialize
from etude.tasks.task import read_jsonl
from etude.trainer.batch import collate
from etude.trainer.sft import held_out_nll, nll_loss, sft_train, split_by_task
from tests.conftest import skip_without_sandboxes
from tests.environment.conftest import make_manager
from tests.rollout.demonstrations import SessionGrader, hinted_tasks, sample

TOOLS = tools_by_name(tool_specs())
"""The environment's tool specs, which the honesty check parses calls with."""

TOKENIZER = load_tokenizer()
TIERS = (0, 3)
VARIANTS = 2


class Stack:
    """An environment, the real grader and an episode runner, in process."""

    def __init__(self, root: Path, tasks) -> None:
        self.manager = make_manager(root)
        self.environment = InProcessEnvironment(self.manager)
        config = RewardConfig(cache_dir=root / "tasks", tasks_files=(), timeout_seconds=60)
        grader = Grader(config, find_bwrap(None))
        self.runner = EpisodeRunner(
            self.environment, SessionGrader(self.environment, grader, list(tasks)), TOKENIZER,
            RolloutConfig(), repositories_only(lambda task: materialize(task, root / "tasks")),
        )  # fmt: skip


def require_sandboxes() -> None:
    with skip_without_sandboxes():
        find_bwrap(None)


@pytest.fixture(scope="module")
def tasks():
    return sample(list(hinted_tasks()), extra=0)[:3]


@pytest.fixture(scope="module")
def demonstrations(tasks) -> Demonstrations:
    require_sandboxes()

    async def collect() -> Demonstrations:
        with tempfile.TemporaryDirectory(prefix="etude-sft-") as scratch:
            stack = Stack(Path(scratch), tasks)
            try:
                return await collect_demonstrations(
                    tasks, stack.runner, TOKENIZER, tiers=TIERS, variants=VARIANTS, concurrency=1
                )
            finally:
                await stack.manager.close_all()

    return asyncio.run(collect())


@pytest.mark.integration
def test_demonstrations_are_solved_honest_episodes_at_every_tier(tasks, demonstrations):
    assert len(demonstrations) == len(tasks) * len(TIERS) * VARIANTS
    for tier in TIERS:
        counts = demonstrations.counts[tier]
        assert (counts.written, counts.kept) == (len(tasks) * VARIANTS,) * 2
        assert len(counts.turns) == counts.kept and min(counts.tokens) > 0
    keys = {(e.task_id, e.tier, e.variant) for e in demonstrations.entries}
    assert len(keys) == len(demonstrations)
    for entry in demonstrations.entries:
        trajectory = entry.trajectory
        assert (trajectory.finish_reason, trajectory.correctness) == ("submitted", 1.0)
        assert len(trajectory.token_ids) <= RolloutConfig().max_episode_tokens
        shown = episode_from_text(TOKENIZER.decode(trajectory.token_ids))
        assert derivable_violations(shown, TOOLS) == []
        hinted = "fails like this" in shown.instruction
        assert hinted == (entry.tier > 0)
    # Tier 3's baseline is the short episode: edit, then submit.
    short = [e for e in demonstrations.entries if e.tier == 3 and e.variant == 0]
    assert all(e.trajectory.calls_per_turn == [1, 1] for e in short)
    summary = demonstrations.summary()
    assert summary["sft_tier0_kept"] == summary["sft_tier3_kept"] == len(tasks) * VARIANTS
    assert summary["sft_tier3_mean_tokens"] < summary["sft_tier0_mean_tokens"]


class Recording(ScriptedSampler):
    def __init__(self, solver, tokenizer) -> None:
        super().__init__(solver, tokenizer)
        self.turns: list[str] = []

    async def sample(self, context_ids, results, max_new_tokens):
        turn = await super().sample(context_ids, results, max_new_tokens)
        self.turns.append(turn.text)
        return turn


@pytest.mark.integration
async def test_the_loss_covers_exactly_the_assistant_turns(tasks, tmp_path):
    stack = Stack(tmp_path, tasks)
    task = tasks[0]
    try:
        solver = ScriptedSolver(task, (await stack.runner.prepare("r", task)).repository, tier=1)
        sampler = Recording(solver, TOKENIZER)
        request = RolloutRequest(
            run_id="r", task_id=task.id, group_id="g", sample_index=0, min_policy_version=0,
            hint_tier=1,
        )  # fmt: skip
        trajectory = await stack.runner.run(request, task, sampler)
    finally:
        await stack.manager.close_all()
    assert trajectory.correctness == 1.0
    runs, current = [], []
    for token, mask in zip(trajectory.token_ids, trajectory.loss_mask, strict=True):
        if mask:
            current.append(token)
        elif current:
            runs.append(current)
            current = []
    runs += [current] if current else []
    assert [TOKENIZER.decode(run) for run in runs] == [t + IM_END for t in sampler.turns]
    # Collated, the trained targets are those tokens and nothing else, in order.
    batch = collate([trajectory])
    trained = batch.targets_BT[batch.mask_BT.bool()].tolist()
    assert trained == [t for run in runs for t in run]
    # And the loss is their mean NLL: computed from the full logits, it agrees.
    model = from_pretrained("tiny", seed=0).eval()
    with torch.no_grad():
        loss, tokens = nll_loss(model, [trajectory])
        logprobs = model(batch.inputs_BT).logits.float().log_softmax(-1)
        chosen = logprobs.gather(-1, batch.targets_BT.unsqueeze(-1)).squeeze(-1)
        expected = -(chosen * batch.mask_BT).sum() / batch.mask_BT.sum()
    assert tokens == len(trained)
    assert float(loss) == pytest.approx(float(expected), rel=1e-4)


def trajectory(task_id: str, tokens: int = 8) -> Trajectory:
    return Trajectory(
        run_id="r", task_id=task_id, group_id=f"g-{task_id}", sample_index=0,
        token_ids=list(range(tokens)), logprobs=[0.0] * tokens, policy_versions=[0] * tokens,
        loss_mask=[0, 0, 0, 1, 1, 1, 0, 1][:tokens], reward=1.0,
    )  # fmt: skip


def test_the_held_out_split_keeps_every_demonstration_of_a_task_on_one_side():
    demos = [trajectory(f"task-{i % 10}") for i in range(40)]  # ten tasks, four demos each
    train, held = split_by_task(demos, 0.2, seed=3)
    held_tasks = {t.task_id for t in held}
    assert len(held_tasks) == 2 and len(held) == 8
    assert held_tasks.isdisjoint(t.task_id for t in train) and len(train) == 32
    assert split_by_task(demos, 0.2, seed=3) == (train, held)
    assert {t.task_id for t in split_by_task(demos, 0.2, seed=4)[1]} != held_tasks
    # A small share still holds one task out, and never all of them.
    assert len({t.task_id for t in split_by_task(demos, 0.01)[1]}) == 1
    assert split_by_task(demos[:1], 0.5) == (demos[:1], [])
    assert split_by_task(demos, 0.0)[1] == []
    with pytest.raises(ValueError, match="held_out_fraction"):
        split_by_task(demos, 1.0)


@pytest.mark.integration
def test_sft_trains_the_last_layers_and_reports_the_held_out_loss(demonstrations):
    model = from_pretrained("tiny", seed=0)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    config = SftConfig(steps=3, batch_size=1, lr=3e-3, held_out_fraction=0.34, trainable_layers=1)
    short = [e.trajectory for e in demonstrations.entries if e.tier == 3]  # cheaper to train
    seen = []
    history = sft_train(model, short, config, held_out_every=2, on_held_out=seen.append)

    assert [h.step for h in history.held_out] == [0, 2, 3] and seen == history.held_out
    assert len(history.held_out_tasks) == 1 and history.held_out_tasks[0] not in (
        history.train_tasks
    )
    assert history.held_out[-1].nll < history.held_out[0].nll  # the format carries over
    held = [t for t in short if t.task_id in history.held_out_tasks]
    assert held_out_nll(model, held)[0] == pytest.approx(history.held_out[-1].nll, rel=1e-4)
    assert [s.step for s in history] == [1, 2, 3]
    assert all(math.isfinite(s.loss) for s in history)

    top = (f"model.layers.{len(model.model.layers) - 1}.", "model.norm.", "lm_head.")
    assert set(history.trainable) == {n for n, _ in model.named_parameters() if n.startswith(top)}
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert changed and changed <= set(history.trainable)  # experts no token chose stay put
    # The flags are as they were: RL decides for itself what it trains.
    assert all(p.requires_grad for p in model.parameters())


@pytest.mark.integration
def test_locate_demonstrations_answer_from_the_listing_or_search_first(tmp_path):
    """etude-locate's two styles, as real episodes: variant 0 answers from the listing in one
    turn, variant 1 greps for the definition and answers with the hit's path; both honest and
    solved, on a project's own module and on a stub in a made-up package."""
    require_sandboxes()
    stubbed = list(read_jsonl(LOCATE_STUBBED_TASKS_FILE))
    own = stubbed[0]
    elsewhere = next(
        t for t in stubbed if t.metadata["answer"].split("/")[0] != t.metadata["project"]
    )
    tasks = [own, elsewhere]

    async def collect() -> Demonstrations:
        stack = Stack(tmp_path, tasks)
        try:
            return await collect_demonstrations(tasks, stack.runner, TOKENIZER, tiers=(3,),
                                                variants=2, concurrency=1)  # fmt: skip
        finally:
            await stack.manager.close_all()

    demonstrations = asyncio.run(collect())
    assert demonstrations.counts[3].kept == 4
    by_style = {(e.task_id, e.style): e.trajectory for e in demonstrations.entries}
    for task in tasks:
        answer = by_style[(task.id, "locate-answer")]
        search = by_style[(task.id, "locate-search")]
        assert answer.calls_per_turn == [2] and search.calls_per_turn == [1, 2]
        for trajectory in (answer, search):
            assert (trajectory.finish_reason, trajectory.correctness) == ("submitted", 1.0)
            shown = episode_from_text(TOKENIZER.decode(trajectory.token_ids))
            assert derivable_violations(shown, TOOLS) == []
        text = TOKENIZER.decode(search.token_ids)
        assert f"{task.metadata['answer']}:" in text.split("<function=grep>")[1]
