"""How much a patch writes when applied, known before anything is written.

A patch's text is bounded where it arrives, but not what it expands to: a `GIT binary
patch` carries deflated data (`literal <size>`, a few KB of it can declare a GiB), a
binary `delta` can rebuild a result far larger than itself from copies of its base, and a
`copy from` header duplicates a whole file of the tree. git allocates and writes what the
patch declares (it refuses data whose inflated size differs from the declared one), so the
declarations, and the header inside each delta, are what is counted; the text lines count
at most the patch's own length.
"""

from __future__ import annotations

import base64
import codecs
import os
import re
import zlib
from pathlib import Path

_BINARY_HUNK = re.compile(r"^(literal|delta) (\d+)$")
_COPY_FROM = re.compile(r"^copy from (.+)$")


class PatchTooLarge(ValueError):
    """The patch would write more than its limit; the message says how much."""


def check_expansion(patch: str, tree: Path, limit: int) -> int:
    """The bytes `patch` writes when applied to `tree` (an upper bound); PatchTooLarge past
    `limit`, found before any data is inflated beyond `limit`."""
    total = len(patch.encode())
    lines = patch.splitlines()
    for number, line in enumerate(lines):
        if match := _BINARY_HUNK.match(line):
            declared = int(match[2])
            total += declared
            if total <= limit and match[1] == "delta":
                total += _delta_result_size(lines, number + 1, declared)
        elif match := _COPY_FROM.match(line):
            total += _size_in(tree, match[1])
        if total > limit:
            raise PatchTooLarge(
                f"the patch would write more than {limit} bytes when applied "
                f"(binary data and copies included)"
            )
    return total


def _delta_result_size(lines: list[str], start: int, declared: int) -> int:
    """The size a binary delta rebuilds (its header's second number), read from at most
    `declared` inflated bytes; 0 for data git would refuse anyway."""
    data = bytearray()
    for line in lines[start:]:
        if not line:
            break
        length = _line_length(line[0])
        try:
            data += base64.b85decode(line[1:])[:length]
        except ValueError:
            return 0
    inflater = zlib.decompressobj()
    try:
        header = inflater.decompress(bytes(data), min(declared, 32))
    except zlib.error:
        return 0
    _source, offset = _varint(header, 0)
    result, _ = _varint(header, offset)
    return result


def _line_length(marker: str) -> int:
    """Bytes on a line of git's base85 data: `A`–`Z` 1–26, `a`–`z` 27–52."""
    if "A" <= marker <= "Z":
        return ord(marker) - ord("A") + 1
    if "a" <= marker <= "z":
        return ord(marker) - ord("a") + 27
    return 0


def _varint(data: bytes, offset: int) -> tuple[int, int]:
    """git's delta header number: 7 bits a byte, low first, high bit set while more."""
    value = shift = 0
    while offset < len(data):
        byte = data[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    return value, offset


def _size_in(tree: Path, name: str) -> int:
    """The size of the file of `tree` a header names (git quotes a name with unusual
    characters C-style); 0 for one that is not there, which git refuses to copy."""
    if len(name) >= 2 and name[0] == name[-1] == '"':
        raw, _ = codecs.escape_decode(name[1:-1].encode())
        name = raw.decode(errors="surrogateescape")
    path = Path(os.path.normpath(tree / name))
    if not path.is_relative_to(tree):
        return 0
    try:
        return os.lstat(path).st_size
    except OSError:
        return 0
