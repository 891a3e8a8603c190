"""Named tensors ↔ a stream of `WeightChunk` messages. A tensor larger than one message is
split into consecutive byte ranges; the receiver checks that every tensor arrives whole.

The tensor bytes are nearly all of an update (43 MiB of the tiny preset's), so protobuf
objects never hold them. The sender writes each message's wire form itself: the small
fields serialised by protobuf, then `data` appended as one length-delimited field, each
tensor byte copied once. The receiver parses everything but `data` with protobuf and keeps
`data` where gRPC received it: a tensor that fits one message is a view of that message's
bytes, a larger one is copied once into a buffer of its own. Through protobuf messages each
side copied every byte three times (slice, message, serialisation; parse, field access,
reassembly), about half of an update's time. On the wire it is an ordinary `WeightChunk`:
any protobuf client can send one, and `chunks` yields them as messages.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass

import torch
from google.protobuf.message import DecodeError

from etude.api.v1 import common_pb2, inference_pb2

DEFAULT_CHUNK_BYTES = 2 << 20  # well inside the default 64 MiB message limit
_DTYPES = {
    name: getattr(torch, name)
    for name in ("float32", "bfloat16", "float16", "float8_e4m3fn", "uint8", "int8", "int32")
}
_DATA_FIELD = inference_pb2.WeightChunk.DESCRIPTOR.fields_by_name["data"].number
_DATA_TAG = bytes([_DATA_FIELD << 3 | 2])  # length-delimited; one byte while the number < 16


class WeightStreamError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class ReceivedUpdate:
    version: int
    tensors: list[tuple[str, torch.Tensor]]
    drain: bool
    """Let running generation finish under the old weights first (etude.inference.serving)."""
    run_id: str = ""
    """The run sending them (etude.inference.ownership); empty: none named."""


@dataclass(frozen=True, slots=True)
class ReceivedChunk:
    """One `WeightChunk` as received: `header` holds every field but `data`, which is a view
    of the bytes gRPC received (`decode_chunk`)."""

    header: inference_pb2.WeightChunk
    data: memoryview


def _pieces(
    version: int, tensors: Iterable[tuple[str, torch.Tensor]], chunk_bytes: int, drain: bool,
    run_id: str,
) -> Iterator[tuple[inference_pb2.WeightChunk, memoryview]]:  # fmt: skip
    """Each message of an update as (every field but `data`, the bytes `data` carries)."""
    version_message = common_pb2.PolicyVersion(version=version)
    first = inference_pb2.WeightChunk(version=version_message, drain=drain, run_id=run_id)
    yield first, memoryview(b"")
    for name, tensor in tensors:
        dtype = str(tensor.dtype).removeprefix("torch.")
        if dtype not in _DTYPES:
            raise WeightStreamError(f"{name}: dtype {dtype} cannot be sent")
        data = memoryview(tensor.detach().cpu().contiguous().view(torch.uint8).reshape(-1).numpy())
        for offset in range(0, max(len(data), 1), chunk_bytes):
            header = inference_pb2.WeightChunk(
                name=name, dtype=dtype, shape=list(tensor.shape), offset=offset
            )
            yield header, data[offset : offset + chunk_bytes]


def chunks(
    version: int,
    tensors: Iterable[tuple[str, torch.Tensor]],
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    *,
    drain: bool = False,
    run_id: str = "",
) -> Iterator[inference_pb2.WeightChunk]:
    """The messages of one UpdateWeights call; the first carries the version, mode and run."""
    for header, data in _pieces(version, tensors, chunk_bytes, drain, run_id):
        header.data = bytes(data)
        yield header


def encoded_chunks(
    version: int,
    tensors: Iterable[tuple[str, torch.Tensor]],
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    *,
    drain: bool = False,
    run_id: str = "",
) -> Iterator[bytes]:
    """The messages of `chunks`, serialised, each tensor byte copied once (module doc)."""
    for header, data in _pieces(version, tensors, chunk_bytes, drain, run_id):
        serialised = header.SerializeToString()
        if len(data):
            serialised = b"".join((serialised, _DATA_TAG, _varint(len(data)), data))
        yield serialised


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _read_varint(raw: bytes, pos: int) -> tuple[int, int]:
    value = 0
    for shift in range(0, 70, 7):
        if pos >= len(raw):
            raise DecodeError("truncated varint")
        byte = raw[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
    raise DecodeError("a varint longer than 10 bytes")


def decode_chunk(raw: bytes) -> ReceivedChunk:
    """A serialised `WeightChunk` → `ReceivedChunk`, without copying `data`: the fields are
    walked by their wire types, `data` (the last one wins, as protobuf has it) is cut out as
    a view, and protobuf parses — and checks — the rest. Raises DecodeError as protobuf's
    `FromString` would."""
    view = memoryview(raw)
    data = view[0:0]
    header: list[memoryview] = []  # the spans between `data` fields
    kept_from = pos = 0
    while pos < len(raw):
        field_start = pos
        tag, pos = _read_varint(raw, pos)
        wire_type = tag & 7
        if wire_type == 0:
            _, pos = _read_varint(raw, pos)
        elif wire_type == 1:
            pos += 8
        elif wire_type == 2:
            length, pos = _read_varint(raw, pos)
            value_start, pos = pos, pos + length
        elif wire_type == 5:
            pos += 4
        else:  # groups (3, 4) have no place in a proto3 message; 6 and 7 do not exist
            raise DecodeError(f"wire type {wire_type} in a WeightChunk")
        if pos > len(raw):
            raise DecodeError("truncated message")
        if wire_type == 2 and tag >> 3 == _DATA_FIELD:
            header.append(view[kept_from:field_start])
            data, kept_from = view[value_start:pos], pos
    header.append(view[kept_from:])
    return ReceivedChunk(inference_pb2.WeightChunk.FromString(b"".join(header)), data)


class _Filling:
    """A tensor being received: views of its chunks, kept until the last one arrives."""

    def __init__(self, name: str, dtype: str, shape: tuple[int, ...]) -> None:
        self.name, self.dtype, self.shape = name, dtype, shape
        self.nbytes = math.prod(shape) * _DTYPES[dtype].itemsize
        self.pieces: list[memoryview] = []
        self.filled = 0

    def write(self, offset: int, data: memoryview) -> None:
        if offset != self.filled:
            raise WeightStreamError(
                f"{self.name}: chunk at offset {offset}, expected {self.filled}"
            )
        if offset + len(data) > self.nbytes:
            raise WeightStreamError(
                f"{self.name}: got {offset + len(data)} bytes or more, shape needs {self.nbytes}"
            )
        if data:
            self.pieces.append(data)
            self.filled += len(data)

    def finish(self) -> tuple[str, torch.Tensor]:
        if self.filled != self.nbytes:
            raise WeightStreamError(
                f"{self.name}: got {self.filled} bytes, shape needs {self.nbytes}"
            )
        if len(self.pieces) == 1:  # the whole tensor in one message: no copy
            raw = _tensor_over(self.pieces[0])
        else:  # several messages (or no bytes): one buffer, each chunk copied in
            raw = torch.empty(self.nbytes, dtype=torch.uint8)
            start = 0
            for piece in self.pieces:
                raw[start : start + len(piece)] = _tensor_over(piece)
                start += len(piece)
        self.pieces.clear()
        return self.name, raw.view(_DTYPES[self.dtype]).reshape(self.shape)


def _tensor_over(data: memoryview) -> torch.Tensor:
    """A uint8 tensor over received bytes, sharing their memory. torch warns (once) that
    `bytes` is read-only; nothing writes to an update's tensors — the backend checks them and
    copies them into its model — so the warning says nothing here."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.frombuffer(data, dtype=torch.uint8)


async def assemble(messages: AsyncIterator[ReceivedChunk], max_bytes: int) -> ReceivedUpdate:
    """The update a chunk stream carries; raises WeightStreamError on a malformed one."""
    version: int | None = None
    drain, run_id = False, ""
    tensors: list[tuple[str, torch.Tensor]] = []
    current: _Filling | None = None
    declared = 0  # bytes of the tensors begun so far

    async for chunk in messages:
        message = chunk.header
        if version is None:
            if not message.HasField("version"):
                raise WeightStreamError("the first message must carry the policy version")
            version, drain, run_id = message.version.version, message.drain, message.run_id
            if not message.name:
                continue
        if not message.name:
            raise WeightStreamError("a chunk without a tensor name")
        if message.dtype not in _DTYPES:
            raise WeightStreamError(f"{message.name}: unknown dtype {message.dtype!r}")
        shape = tuple(message.shape)
        if current is None or message.name != current.name:
            if current is not None:
                tensors.append(current.finish())
            if message.offset != 0:
                raise WeightStreamError(f"{message.name}: first chunk at offset {message.offset}")
            if any(size < 0 for size in shape):
                raise WeightStreamError(f"{message.name}: negative shape {shape}")
            # Checked as the tensor begins: no tensor receives more bytes than it declares.
            declared += math.prod(shape) * _DTYPES[message.dtype].itemsize
            if declared > max_bytes:
                raise WeightStreamError(f"the update exceeds {max_bytes} bytes")
            current = _Filling(message.name, message.dtype, shape)
        elif (message.dtype, shape) != (current.dtype, current.shape):
            raise WeightStreamError(
                f"{message.name}: a chunk of dtype {message.dtype} and shape {shape}, "
                f"but the tensor began as {current.dtype} {current.shape}"
            )
        current.write(message.offset, chunk.data)
    if version is None:
        raise WeightStreamError("an empty update stream")
    if current is not None:
        tensors.append(current.finish())
    return ReceivedUpdate(version, tensors, drain, run_id)
