"""Grouping rollouts for GRPO: stragglers feed the next step, nothing is used twice."""

from __future__ import annotations

import pytest

from etude.common.payloads import Trajectory
from etude.rollout.groups import GroupCollector, may_start, oldest_version


def _trajectory(group: str, index: int, versions=(3, 3)) -> Trajectory:
    return Trajectory(
        run_id="r", task_id="t", group_id=group, sample_index=index,
        token_ids=[1, 2, 3], logprobs=[0.0, -1.0, -1.0], policy_versions=[-1, *versions],
        loss_mask=[0, 1, 1], reward=1.0,
    )  # fmt: skip


def test_the_trainer_steps_on_complete_groups_without_waiting_for_stragglers():
    collector = GroupCollector(groups_per_step=2)
    for group in ("a", "b", "c"):  # one group more than a step needs
        collector.expect(group, size=2)
    collector.add(_trajectory("a", 0))
    collector.add(_trajectory("c", 0))
    collector.add(_trajectory("c", 1))
    assert collector.take(trainer_version=4) is None  # only one group complete
    collector.add(_trajectory("a", 1, versions=(2, 3)))
    batch = collector.take(trainer_version=4)
    assert [g.group_id for g in batch.groups] == ["a", "c"]
    assert batch.staleness == [1, 2, 1, 1]
    # The straggler group b completes later and is the next step's, never this one's.
    collector.expect("d", size=2)
    for group in ("b", "d"):
        collector.add(_trajectory(group, 0))
        collector.add(_trajectory(group, 1))
    assert [g.group_id for g in collector.take(trainer_version=5).groups] == ["b", "d"]


def test_late_and_extra_rollouts_are_counted_not_used_twice():
    collector = GroupCollector(groups_per_step=1)
    collector.expect("a", size=2)
    for index in range(3):  # over-provisioned: three scheduled, two needed
        collector.add(_trajectory("a", index))
    assert collector.late == 1
    assert len(collector.take(trainer_version=3).groups[0].trajectories) == 2
    collector.add(_trajectory("a", 3))  # arrives after the group went to the trainer
    assert collector.late == 2 and collector.take(trainer_version=3) is None
    with pytest.raises(ValueError, match="already scheduled"):
        collector.expect("a", size=2)
    with pytest.raises(KeyError, match="unknown group"):
        collector.add(_trajectory("zzz", 0))


def test_staleness_bound_at_start():
    assert may_start(policy_version=5, trainer_version=6, max_staleness=1)
    assert not may_start(policy_version=4, trainer_version=6, max_staleness=1)
    assert oldest_version(_trajectory("a", 0, versions=(7, 5))) == 5


def test_a_redelivered_rollout_is_counted_once_and_a_restored_collector_never_reuses_a_group():
    collector = GroupCollector(groups_per_step=1)
    collector.expect("a", size=2)
    collector.expect("b", size=2)
    assert collector.add(_trajectory("a", 0))
    assert not collector.add(_trajectory("a", 0))  # the same rollout delivered again
    assert collector.duplicates == 1
    collector.add(_trajectory("a", 1))
    assert [g.group_id for g in collector.take(trainer_version=3).groups] == ["a"]
    resumed = GroupCollector(groups_per_step=1)
    resumed.restore(collector.snapshot())
    assert resumed.open_groups == 1
    assert not resumed.add(_trajectory("a", 1))  # trained on before the restart
    resumed.add(_trajectory("b", 0))
    resumed.add(_trajectory("b", 1))
    assert [g.group_id for g in resumed.take(trainer_version=3).groups] == ["b"]


def test_tokens_older_than_the_bound_are_left_out_of_the_loss_and_the_rest_is_trained():
    collector = GroupCollector(groups_per_step=1)
    collector.expect("long", size=2)
    collector.add(_trajectory("long", 0, versions=(1, 6)))  # a partial rollout begun on 1
    collector.add(_trajectory("long", 1, versions=(5, 6)))
    assert collector.drop_stale(trainer_version=6, max_staleness=2) == []  # 6 is trainable
    batch = collector.take(trainer_version=6, max_staleness=2)
    first, second = batch.groups[0].trajectories
    assert first.loss_mask == [0, 0, 1]  # version 1's token is out, version 6's is trained
    assert second.loss_mask == [0, 1, 1]  # 5 is within 2 of 6
    assert batch.stale_tokens == 1
    assert batch.staleness == [0, 1] and batch.in_flight == [0, 1] and batch.in_queue == [0, 0]
    assert first.token_ids == [1, 2, 3] and first.policy_versions == [-1, 1, 6]


def test_a_complete_group_with_nothing_recent_enough_is_dropped_and_never_handed_out():
    collector = GroupCollector(groups_per_step=1)
    for group in ("old", "fresh"):
        collector.expect(group, size=2)
    collector.add(_trajectory("old", 0, versions=(1, 3)))
    collector.add(_trajectory("old", 1, versions=(2, 3)))
    collector.add(_trajectory("fresh", 0, versions=(5, 6)))
    assert collector.drop_stale(trainer_version=6, max_staleness=2) == ["old"]
    assert collector.stale == 1 and collector.open_groups == 1
    assert not collector.add(_trajectory("old", 1))  # a redelivery: late, not trained
    collector.add(_trajectory("fresh", 1, versions=(3, 6)))  # one trainable token: kept
    assert collector.drop_stale(trainer_version=6, max_staleness=2) == []
    batch = collector.take(trainer_version=6, max_staleness=2)
    assert [g.group_id for g in batch.groups] == ["fresh"]
    assert batch.staleness == [1, 0] and batch.stale_tokens == 1


def test_a_trajectory_with_every_token_too_stale_trains_nothing_and_is_not_counted_stale():
    """Its group trains (a sibling is recent); it adds its reward to the group's baseline,
    no token to the loss, and no figure above the bound to the staleness measured."""
    collector = GroupCollector(groups_per_step=1)
    collector.expect("mixed", size=2)
    collector.add(_trajectory("mixed", 0, versions=(1, 2)))  # both tokens older than 4
    collector.add(_trajectory("mixed", 1, versions=(5, 6)))
    batch = collector.take(trainer_version=6, max_staleness=2)
    stale, fresh = batch.groups[0].trajectories
    assert stale.loss_mask == [0, 0, 0] and fresh.loss_mask == [0, 1, 1]
    assert batch.stale_tokens == 2
    assert batch.staleness == [1] and batch.in_flight == [1] and batch.in_queue == [0]


def test_without_a_bound_nothing_is_left_out():
    collector = GroupCollector(groups_per_step=1)
    collector.expect("a", size=1)
    collector.add(_trajectory("a", 0, versions=(1, 6)))
    batch = collector.take(trainer_version=9)
    assert batch.groups[0].trajectories[0].loss_mask == [0, 1, 1] and batch.stale_tokens == 0
    assert batch.staleness == [8]
