"""The gRPC client of the inference service: rollout workers generate through it, the
trainer publishes weights through it. In-process callers use a backend directly: its
`generate` and `update_weights` have the same shape."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass

import grpc
import torch
from grpc import aio

from etude.api.v1 import inference_pb2, inference_pb2_grpc
from etude.common.grpc_client import open_channel
from etude.common.settings import ClientSettings
from etude.inference.types import (
    CompletionDelta,
    EngineDeadError,
    EngineLoad,
    GenerationRequest,
    InferenceError,
    PolicyOwnedError,
)
from etude.inference.weight_stream import DEFAULT_CHUNK_BYTES, encoded_chunks
from etude.inference.wire import delta_from_proto, load_from_proto, request_to_proto


@dataclass(frozen=True, slots=True)
class Policy:
    version: int
    model_name: str
    backend: str
    num_parameters: int
    run_id: str = ""
    """The run whose weights are served (etude.inference.ownership)."""


@dataclass(frozen=True, slots=True)
class WeightUpdate:
    version: int
    tensors_updated: int
    seconds: float


# A generation streams for as long as it samples, and a weight update for as long as the
# model takes to send: neither fits an ordinary call's deadline.
LONG_METHODS = (
    "etude.api.v1.InferenceService/Generate",
    "etude.api.v1.InferenceService/UpdateWeights",
)


class GrpcInference:
    def __init__(
        self, target: str, settings: ClientSettings | None = None, max_message_bytes: int = 64 << 20
    ) -> None:
        self.channel: aio.Channel = open_channel(
            target, settings or ClientSettings(), max_message_bytes, long_methods=LONG_METHODS
        )
        self.stub = inference_pb2_grpc.InferenceServiceStub(self.channel)
        # The stub's UpdateWeights, but taking messages already serialised by
        # `encoded_chunks`, which copies each tensor byte once (etude.inference.weight_stream).
        self._update_weights = self.channel.stream_unary(
            "/etude.api.v1.InferenceService/UpdateWeights",
            response_deserializer=inference_pb2.UpdateWeightsResponse.FromString,
        )

    async def generate(self, request: GenerationRequest) -> AsyncIterator[CompletionDelta]:
        call = self.stub.Generate(request_to_proto(request))
        try:
            async for chunk in call:
                yield delta_from_proto(chunk)
        except aio.AioRpcError as error:
            _raise_inference_error(error)
            raise
        finally:
            call.cancel()  # no-op once finished; frees the server's cache otherwise

    async def update_weights(
        self,
        version: int,
        tensors: Iterable[tuple[str, torch.Tensor]],
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        *,
        drain: bool = False,
        run_id: str = "",
    ) -> WeightUpdate:
        """`drain`: running completions finish under the old weights first (no completion
        spans two versions); otherwise the update lands between two decode steps. `run_id`:
        the run sending them; PolicyOwnedError when another live run owns the engine."""
        messages = encoded_chunks(version, tensors, chunk_bytes, drain=drain, run_id=run_id)
        try:
            reply = await self._update_weights(messages)
        except aio.AioRpcError as error:
            if error.code() == grpc.StatusCode.FAILED_PRECONDITION:
                raise PolicyOwnedError(error.details()) from error
            _raise_inference_error(error)
            raise
        return WeightUpdate(reply.version.version, reply.tensors_updated, reply.seconds)

    async def get_policy(self) -> Policy:
        reply = await self.stub.GetPolicy(inference_pb2.GetPolicyRequest())
        return Policy(
            reply.version.version, reply.model_name, reply.backend, reply.num_parameters,
            reply.run_id,
        )  # fmt: skip

    async def get_load(self) -> EngineLoad:
        return load_from_proto(await self.stub.GetLoad(inference_pb2.GetLoadRequest()))

    async def close(self) -> None:
        await self.channel.close()


def _raise_inference_error(error: aio.AioRpcError) -> None:
    """A refused request as InferenceError; an engine that died (or a service that cannot
    be reached) as EngineDeadError, with the server's reason."""
    if error.code() == grpc.StatusCode.INVALID_ARGUMENT:
        raise InferenceError(error.details()) from error
    if error.code() == grpc.StatusCode.UNAVAILABLE:
        raise EngineDeadError(error.details()) from error
