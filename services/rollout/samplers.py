"""Who writes an episode's turns: the policy through inference, or the scripted solver."""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator
from typing import Protocol

from etude.common.payloads import RolloutRequest
from etude.environment.types import ExecutedCall
from etude.inference.types import CompletionDelta, GenerationRequest, SamplingParams
from etude.rollout.agent import SampledTurn, Tokenizer
from etude.rollout.prompt import IM_END
from etude.rollout.scripted import ScriptedSolver, ScriptError

# Versions and logprobs of demonstration tokens: no policy sampled them.
DEMONSTRATION_VERSION = 0


class Generator(Protocol):
    """The inference client (GrpcInference) or an in-process backend."""

    def generate(self, request: GenerationRequest) -> AsyncIterator[CompletionDelta]: ...


def sampling_seed(seed: int, request: RolloutRequest) -> int:
    """The random seed of one completion: the run config's `rollout.seed`, its group and its
    index (the group ids of a run follow from its config, so the same config samples alike)."""
    return zlib.crc32(f"{seed}:{request.group_id}:{request.sample_index}".encode())


class PolicySampler:
    """Streams one completion per turn; the turn ends at the chat template's end-of-turn
    token (kept: the policy learns to end its turns) or at the turn's token budget."""

    def __init__(
        self,
        inference: Generator,
        tokenizer: Tokenizer,
        request_id: str,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | None = None,
    ) -> None:
        self.inference = inference
        self.tokenizer = tokenizer
        self.request_id = request_id
        self.temperature, self.top_p, self.seed = temperature, top_p, seed
        self.end_of_turn_id = tokenizer.convert_tokens_to_ids(IM_END)
        self._turn = 0

    async def sample(
        self, context_ids: list[int], results: list[ExecutedCall] | None, max_new_tokens: int
    ) -> SampledTurn:
        self._turn += 1
        params = SamplingParams(
            temperature=self.temperature, top_p=self.top_p, max_tokens=max_new_tokens,
            stop_token_ids=(self.end_of_turn_id,),
            seed=None if self.seed is None else self.seed + self._turn,
        )  # fmt: skip
        request = GenerationRequest(
            request_id=f"{self.request_id}-t{self._turn}",
            prompt_token_ids=tuple(context_ids),
            sampling=params,
        )
        tokens, logprobs, versions, text = [], [], [], []
        async for delta in self.inference.generate(request):
            tokens += delta.token_ids
            logprobs += delta.logprobs
            versions += delta.policy_versions
            text.append(delta.text)
        return SampledTurn(tokens, logprobs, versions, "".join(text))


class ScriptedSampler:
    """Turns from the scripted solver, tokenized, each closed with the end-of-turn token.

    A script that has no honest move left (or whose call failed) ends the episode with a turn
    that makes no call, so the loop still closes and grades the session; the solver's error
    is kept in `error` for the caller to see why."""

    def __init__(self, solver: ScriptedSolver, tokenizer: Tokenizer) -> None:
        self.solver = solver
        self.tokenizer = tokenizer
        self.end_of_turn_id = tokenizer.convert_tokens_to_ids(IM_END)
        self.error: ScriptError | None = None

    async def sample(
        self, context_ids: list[int], results: list[ExecutedCall] | None, max_new_tokens: int
    ) -> SampledTurn:
        try:
            text = self.solver.next_turn(results)
        except ScriptError as error:
            self.error = error
            text = "I cannot go on from here."
        tokens = [*self.tokenizer.encode(text), self.end_of_turn_id]
        n = len(tokens)
        return SampledTurn(tokens, [0.0] * n, [DEMONSTRATION_VERSION] * n, text)
