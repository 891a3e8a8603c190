"""Versioned payloads: the typed messages that travel through the work queue.

Every payload is a msgspec struct tagged `<name>.v<N>`, encoded as msgpack. The tag is
written twice: inside the msgpack map (so a payload is self-describing wherever it is
stored) and as the queue entry's `schema` field (so a consumer can route or reject an
entry without decoding it).

Why versions in the tag: producers and consumers are deployed separately, so for a while
a queue may hold entries written by a newer producer than the consumer reading them. A
consumer knows a fixed set of schemas; an entry with any other schema is not guessed at
but dead-lettered with a reason that names both sides, so nothing is half-understood and
nothing is lost. A change a reader of the old version could misread (a renamed, removed
or re-typed field) gets a new version and a new struct; the old struct stays until no
queue holds it. Adding an optional field with a default is compatible: unknown fields are
ignored on decode.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import msgspec

_SCHEMA_PATTERN = re.compile(r"^[a-z][a-z0-9_.]*\.v[1-9][0-9]*$")


class Payload(msgspec.Struct, tag_field="schema", kw_only=True, frozen=True):
    """Base of every queue payload. Subclasses declare `tag="<name>.v<N>"`."""


class RolloutRequest(Payload, tag="rollout.v1"):
    """One rollout of one task, queued by the orchestrator for a rollout worker."""

    run_id: str
    """The training run the rollout belongs to."""
    task_id: str
    """The task to attempt (repository + instruction + hidden tests)."""
    group_id: str
    """Rollouts of the same task compared against each other (the GRPO group)."""
    sample_index: int
    """Position of this rollout in its group, 0-based."""
    min_policy_version: int
    """Oldest policy version allowed to start this rollout (bounds staleness)."""
    hint_tier: int = 0
    """How much of the fix the instruction gives away (etude.tasks.hints): 0 none … 3 the
    function's source."""


MAX_DIFF_CHARS = 65_536
"""A trajectory's diff is cut here: a policy that rewrote a large file should not make every
queue entry of its group megabytes long."""


class Trajectory(Payload, tag="trajectory.v1"):
    """One finished rollout, scored, as the trainer reads it. The token arrays are aligned:
    entry i describes token i of the whole episode (prompt, the policy's turns, tool results)."""

    run_id: str
    task_id: str
    group_id: str
    sample_index: int
    token_ids: list[int]
    logprobs: list[float]
    """Behaviour logprob of each token the policy sampled; 0.0 where it did not sample."""
    policy_versions: list[int]
    """Version that sampled each token; -1 where the policy did not sample it."""
    loss_mask: list[int]
    """1 for tokens the policy sampled (trained on), 0 for the prompt and tool results."""
    reward: float
    reward_components: dict[str, float] = {}
    turns: int = 0
    calls_per_turn: list[int] = []
    tool_counts: dict[str, int] = {}
    turn_seconds: list[float] = []
    finish_reason: str = ""
    """submitted, no_tool_call, max_turns, max_tokens or timeout."""
    valid_calls: int = 0
    """Calls that parsed and that the environment accepted (whatever their outcome)."""
    malformed_calls: int = 0
    """Calls the parser rejected plus calls the environment refused as bad arguments."""
    edits: int = 0
    """Valid `edit_file` calls."""
    blind_edits: int = 0
    """Edits to a file not read with `read_file` in an earlier turn (etude.rollout.behaviour)."""
    reads_before_first_edit: int | None = None
    """Read/search calls before the first edit; None when the episode made no edit."""
    diff: str = ""
    """The workspace's unified diff against the base commit when the episode ended (what was
    graded), cut at `MAX_DIFF_CHARS`; kept for reading the trajectory, not for training."""
    fail_to_pass: dict[str, bool] = {}
    """Each FAIL_TO_PASS test and whether it passed."""
    pass_to_pass_broken: list[str] = []
    """The PASS_TO_PASS tests that failed (the rest passed: `pass_to_pass_count` in all)."""
    pass_to_pass_count: int = 0
    grading_error: str = ""
    """Why the patch could not be graded (it did not apply, the suite did not run)."""

    @property
    def correctness(self) -> float:
        """The reward service's reward, before any efficiency deduction: what pass rates
        count (trajectories written before the component existed had no deduction)."""
        return self.reward_components.get("correctness", self.reward)


class UnknownSchemaError(ValueError):
    """An entry's schema is not one this consumer was built to read."""


class PayloadDecodeError(ValueError):
    """An entry claims a known schema but its bytes do not decode as that struct."""


def schema_of(payload_type: type[Payload]) -> str:
    """The `<name>.v<N>` tag of a payload class, checked for the versioned form."""
    tag = payload_type.__struct_config__.tag
    if not isinstance(tag, str) or not _SCHEMA_PATTERN.match(tag):
        raise TypeError(
            f"{payload_type.__name__} needs tag='<name>.v<N>' (e.g. 'rollout.v1'), has {tag!r}"
        )
    return tag


def encode(payload: Payload) -> bytes:
    return msgspec.msgpack.encode(payload)


class PayloadCodec:
    """Decodes the payloads of a fixed set of schemas and rejects everything else."""

    def __init__(self, payload_types: Iterable[type[Payload]]) -> None:
        # One decoder per type: the entry's `schema` field picks it, so an unknown schema
        # is reported as such instead of as a confusing union-decoding error.
        self._decoders: dict[str, msgspec.msgpack.Decoder] = {}
        for payload_type in payload_types:
            schema = schema_of(payload_type)
            if schema in self._decoders:
                raise ValueError(f"two payload types share the schema {schema!r}")
            self._decoders[schema] = msgspec.msgpack.Decoder(payload_type)
        if not self._decoders:
            raise ValueError("a codec needs at least one payload type")

    @property
    def schemas(self) -> tuple[str, ...]:
        return tuple(sorted(self._decoders))

    def knows(self, schema: str) -> bool:
        return schema in self._decoders

    def decode(self, schema: str, data: bytes) -> Payload:
        decoder = self._decoders.get(schema)
        if decoder is None:
            raise UnknownSchemaError(
                f"unknown payload schema {schema!r}; this consumer knows {', '.join(self.schemas)}"
            )
        try:
            return decoder.decode(data)
        except msgspec.DecodeError as error:
            raise PayloadDecodeError(
                f"payload of schema {schema!r} does not decode: {error}"
            ) from error
