"""A completion's sampling seed: reproducible from the run config, whatever the run id."""

from __future__ import annotations

from etude.common.payloads import RolloutRequest
from etude.rollout.samplers import sampling_seed
from etude.rollout.streams import rollout_key


def _request(run_id: str, group_id: str = "g000000-t", index: int = 0) -> RolloutRequest:
    return RolloutRequest(run_id=run_id, task_id="t", group_id=group_id, sample_index=index,
                          min_policy_version=0)  # fmt: skip


def test_two_runs_of_one_config_sample_with_the_same_seeds():
    """A learning run and its control (`trainer.lr: 0`) differ in run id only: the same
    completion must draw the same random numbers, so their rewards differ by what the
    policy learned, not by chance; the idempotency key still tells the runs apart."""
    learning, control = _request("guard-1a2b3c4d"), _request("guard-9f8e7d6c")
    assert sampling_seed(0, learning) == sampling_seed(0, control)
    assert rollout_key(learning) != rollout_key(control)


def test_every_completion_of_a_run_draws_its_own_numbers():
    seeds = {
        sampling_seed(seed, _request("r", f"g{group:06d}-t", index))
        for seed in (0, 1)
        for group in range(8)
        for index in range(8)
    }
    assert len(seeds) == 2 * 8 * 8
