"""The weight stream's own wire code: what `encoded_chunks` writes is an ordinary
`WeightChunk`, `decode_chunk` reads any `WeightChunk` as protobuf would (and refuses what
protobuf refuses), and `assemble` rebuilds every tensor exactly or refuses the stream."""

from __future__ import annotations

import pytest
import torch
from google.protobuf.message import DecodeError

from etude.api.v1 import inference_pb2
from etude.inference.weight_stream import (
    WeightStreamError,
    assemble,
    chunks,
    decode_chunk,
    encoded_chunks,
)

TENSORS = [
    ("a", torch.randn(3, 5)),
    ("big", torch.randn(40, 30)),  # 4,800 bytes: several chunks of 1 KiB
    ("half", torch.randn(7, 9).to(torch.bfloat16)),
    ("ints", torch.arange(10, dtype=torch.int32)),
    ("empty", torch.zeros(0, 4)),
]


async def _stream(raw_messages):
    for raw in raw_messages:
        yield decode_chunk(raw)


def _fields(message: inference_pb2.WeightChunk) -> dict:
    return {f.name: v for f, v in message.ListFields()}


def test_encoded_chunks_are_the_messages_chunks_yields():
    messages = list(chunks(3, TENSORS, chunk_bytes=1024, drain=True))
    encoded = list(encoded_chunks(3, TENSORS, chunk_bytes=1024, drain=True))
    assert len(encoded) == len(messages) > len(TENSORS) + 1
    for raw, message in zip(encoded, messages, strict=True):
        assert inference_pb2.WeightChunk.FromString(raw) == message


def test_decode_chunk_reads_what_protobuf_reads():
    message = inference_pb2.WeightChunk(
        name="w", dtype="float32", shape=[2, 3], offset=0, data=bytes(range(24))
    )
    later = inference_pb2.WeightChunk(offset=8, data=b"last wins")
    unknown_field_42 = bytes([0xD0, 0x02, 0x01])
    for raw in (
        message.SerializeToString(),
        # Fields in another order, `data` twice, an unknown field: protobuf merges them.
        later.SerializeToString() + message.SerializeToString() + unknown_field_42,
        message.SerializeToString() + later.SerializeToString(),
    ):
        expected = inference_pb2.WeightChunk.FromString(raw)
        received = decode_chunk(raw)
        assert bytes(received.data) == expected.data
        expected.ClearField("data")
        assert _fields(received.header) == _fields(expected)


@pytest.mark.parametrize(
    "raw",
    [
        b"\x0a\x05ab",  # a length past the end
        b"\x12\x02\xff\xfe",  # a name that is not UTF-8
        b"\x32\x80",  # a truncated length
        b"\x33",  # wire type 3 (a group)
        bytes.fromhex("ffffffffffffffffffff01"),  # a varint of 11 bytes
    ],
)
def test_decode_chunk_refuses_what_does_not_decode(raw):
    with pytest.raises(DecodeError):
        decode_chunk(raw)


async def test_assemble_rebuilds_every_tensor():
    update = await assemble(_stream(encoded_chunks(4, TENSORS, chunk_bytes=1024)), 1 << 20)
    assert update.version == 4 and not update.drain
    assert [name for name, _ in update.tensors] == [name for name, _ in TENSORS]
    for (_, got), (_, sent) in zip(update.tensors, TENSORS, strict=True):
        assert got.dtype == sent.dtype and torch.equal(got, sent)


def _raw(*messages: inference_pb2.WeightChunk) -> list[bytes]:
    return [inference_pb2.WeightChunk(version={"version": 1}).SerializeToString()] + [
        m.SerializeToString() for m in messages
    ]


def _chunk(offset: int, data: bytes, **fields) -> inference_pb2.WeightChunk:
    return inference_pb2.WeightChunk(
        **{"name": "w", "dtype": "float32", "shape": [2, 2], **fields}, offset=offset, data=data
    )


@pytest.mark.parametrize(
    ("messages", "error"),
    [
        ([_chunk(8, b"\0" * 8)], "first chunk at offset 8"),
        ([_chunk(0, b"\0" * 8), _chunk(12, b"\0" * 4)], "offset 12, expected 8"),
        ([_chunk(0, b"\0" * 20)], "got 20 bytes or more"),
        ([_chunk(0, b"\0" * 12)], "got 12 bytes, shape needs 16"),
        ([_chunk(0, b"\0" * 8), _chunk(8, b"\0" * 8, shape=[4])], "began as float32"),
        ([_chunk(0, b"\0" * 8), _chunk(8, b"\0" * 8, dtype="int32")], "began as float32"),
        ([_chunk(0, b"", shape=[-1, 4])], "negative shape"),
        ([_chunk(0, b"", shape=[1 << 20, 1 << 10])], "exceeds"),
        ([_chunk(0, b"\0" * 16, dtype="float64")], "unknown dtype"),
        ([_chunk(0, b"\0" * 16, name="")], "without a tensor name"),
    ],
)
async def test_assemble_refuses_a_malformed_stream(messages, error):
    with pytest.raises(WeightStreamError, match=error):
        await assemble(_stream(_raw(*messages)), 1 << 20)
