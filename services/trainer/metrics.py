"""Prometheus instruments of the trainer (the trainer dashboard reads these)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from etude.common.metrics import LATENCY_BUCKETS_SECONDS

STEP_SECONDS = Histogram(
    "etude_trainer_step_seconds",
    "One optimizer step: forward, backward and update over the step's batch.",
    buckets=LATENCY_BUCKETS_SECONDS,
)
WEIGHT_SYNC_SECONDS = Histogram(
    "etude_trainer_weight_sync_seconds",
    "Publishing a new policy version to every inference endpoint.",
    buckets=LATENCY_BUCKETS_SECONDS,
)
WAIT_SECONDS = Histogram(
    "etude_trainer_wait_seconds",
    "Time the trainer waited for enough complete groups (idle).",
    buckets=LATENCY_BUCKETS_SECONDS,
)
STALENESS = Histogram(
    "etude_trainer_staleness",
    "Versions between the trainer and the oldest token of each trajectory it trains on.",
    buckets=(0, 1, 2, 3, 4, 6, 8, 16),
)
STALENESS_IN_FLIGHT = Histogram(
    "etude_trainer_staleness_in_flight",
    "Versions published while each trained trajectory was sampled (partial rollouts: > 0).",
    buckets=(0, 1, 2, 3, 4, 6, 8, 16),
)
STALENESS_IN_QUEUE = Histogram(
    "etude_trainer_staleness_in_queue",
    "Versions published between each trained trajectory's last token and its step.",
    buckets=(0, 1, 2, 3, 4, 6, 8, 16),
)
STALE_TOKENS = Counter(
    "etude_trainer_stale_tokens",
    "Sampled tokens left out of the loss: more than max_staleness versions behind the trainer.",
)
TRAINER_IDLE = Gauge(
    "etude_trainer_idle_fraction",
    "Share of the RL loop's time the trainer waited for rollouts, since the run started.",
)
POLICY_VERSION = Gauge("etude_trainer_policy_version", "The newest published policy version.")
STEP = Gauge("etude_trainer_step", "RL steps done.")
LOSS = Gauge("etude_trainer_loss", "Loss of the last step.")
REWARD_MEAN = Gauge("etude_trainer_reward_mean", "Mean reward of the last step's batch.")
PASS_RATE = Gauge(
    "etude_trainer_pass_rate", "Share of the last step's rollouts whose correctness is 1."
)
MISMATCH_KL = Gauge(
    "etude_trainer_mismatch_kl",
    "k3 estimate of KL(behaviour ‖ trainer) over the last step's sampled tokens.",
)
GRAD_NORM = Gauge("etude_trainer_grad_norm", "Gradient norm of the last step, before clipping.")
TOKENS_PER_SECOND = Gauge(
    "etude_trainer_tokens_per_second", "Trained-on tokens per second of the last step."
)

# How the policy works, per step (etude.rollout.types.behaviour_summary); NaN when the
# step's batch had none to measure (no edit, no call).
BEHAVIOUR = {
    "tool_calls_per_turn": Gauge(
        "etude_trainer_tool_calls_per_turn", "Tool calls per turn in the last step's batch."
    ),
    "parallel_share": Gauge(
        "etude_trainer_parallel_share",
        "Share of the last step's turns that issued a parallel batch (2 or more calls).",
    ),
    "reads_before_first_edit": Gauge(
        "etude_trainer_reads_before_first_edit",
        "Read/search calls before the first edit_file, mean over the last step's episodes "
        "that edited.",
    ),
    "blind_edit_rate": Gauge(
        "etude_trainer_blind_edit_rate",
        "Share of the last step's edits to a file not read with read_file in an earlier turn.",
    ),
    "turns_per_episode": Gauge(
        "etude_trainer_turns_per_episode", "Assistant turns per episode in the last step."
    ),
    "generated_tokens_per_episode": Gauge(
        "etude_trainer_generated_tokens_per_episode",
        "Tokens the policy sampled per episode in the last step.",
    ),
    "malformed_rate": Gauge(
        "etude_trainer_malformed_rate",
        "Share of the last step's tool calls that were malformed (parser or bad arguments).",
    ),
}
FINISH_SHARE = Gauge(
    "etude_trainer_finish_share",
    "Share of the last step's episodes by finish reason.",
    ["reason"],
)
