"""Named tensors ↔ a stream of `WeightChunk` messages. A tensor larger than one message is
split into consecutive byte ranges; the receiver checks that every tensor arrives whole."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass

import torch

from etude.api.v1 import common_pb2, inference_pb2

DEFAULT_CHUNK_BYTES = 2 << 20  # well inside the default 64 MiB message limit
_DTYPES = {
    name: getattr(torch, name)
    for name in ("float32", "bfloat16", "float16", "float8_e4m3fn", "uint8", "int8", "int32")
}


class WeightStreamError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class ReceivedUpdate:
    version: int
    tensors: list[tuple[str, torch.Tensor]]
    drain: bool
    """Let running generation finish under the old weights first (etude.inference.serving)."""


def chunks(
    version: int,
    tensors: Iterable[tuple[str, torch.Tensor]],
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    *,
    drain: bool = False,
) -> Iterator[inference_pb2.WeightChunk]:
    """The messages of one UpdateWeights call; the first carries the version and mode."""
    yield inference_pb2.WeightChunk(version=common_pb2.PolicyVersion(version=version), drain=drain)
    for name, tensor in tensors:
        dtype = str(tensor.dtype).removeprefix("torch.")
        if dtype not in _DTYPES:
            raise WeightStreamError(f"{name}: dtype {dtype} cannot be sent")
        data = tensor.detach().cpu().contiguous().view(torch.uint8).reshape(-1).numpy()
        for offset in range(0, max(len(data), 1), chunk_bytes):
            yield inference_pb2.WeightChunk(
                name=name,
                dtype=dtype,
                shape=list(tensor.shape),
                offset=offset,
                data=data[offset : offset + chunk_bytes].tobytes(),
            )


async def assemble(
    messages: AsyncIterator[inference_pb2.WeightChunk], max_bytes: int
) -> ReceivedUpdate:
    """The update a chunk stream carries; raises WeightStreamError on a malformed one."""
    version: int | None = None
    drain = False
    tensors: list[tuple[str, torch.Tensor]] = []
    current: tuple[str, str, tuple[int, ...], bytearray] | None = None
    received = 0

    def finish() -> None:
        name, dtype, shape, buffer = current
        expected = math.prod(shape) * _DTYPES[dtype].itemsize
        if len(buffer) != expected:
            raise WeightStreamError(f"{name}: got {len(buffer)} bytes, shape needs {expected}")
        # frombuffer refuses an empty buffer (a tensor with a zero-sized dimension).
        raw = torch.zeros(0, dtype=torch.uint8)
        if buffer:
            raw = torch.frombuffer(buffer, dtype=torch.uint8)
        tensors.append((name, raw.view(_DTYPES[dtype]).reshape(shape)))

    async for message in messages:
        if version is None:
            if not message.HasField("version"):
                raise WeightStreamError("the first message must carry the policy version")
            version, drain = message.version.version, message.drain
            if not message.name:
                continue
        if not message.name:
            raise WeightStreamError("a chunk without a tensor name")
        if message.dtype not in _DTYPES:
            raise WeightStreamError(f"{message.name}: unknown dtype {message.dtype!r}")
        received += len(message.data)
        if received > max_bytes:
            raise WeightStreamError(f"the update exceeds {max_bytes} bytes")
        if current is None or message.name != current[0]:
            if current is not None:
                finish()
            if message.offset != 0:
                raise WeightStreamError(f"{message.name}: first chunk at offset {message.offset}")
            current = (message.name, message.dtype, tuple(message.shape), bytearray())
        elif message.offset != len(current[3]):
            raise WeightStreamError(
                f"{message.name}: chunk at offset {message.offset}, expected {len(current[3])}"
            )
        current[3].extend(message.data)
    if version is None:
        raise WeightStreamError("an empty update stream")
    if current is not None:
        finish()
    return ReceivedUpdate(version, tensors, drain)
