"""Bounded capture of command output: the first and last part, and a count of the rest.

A command may print gigabytes; only a bounded head and tail are ever held in memory.
Bytes are kept with room for multi-byte characters, then cut to characters at the end.

Long output is cut in the middle rather than at the end because both ends carry signal: the
start of a command's output says what ran, the end says how it finished (tracebacks, summaries).
"""

from __future__ import annotations

_BYTES_PER_CHAR = 4  # the most UTF-8 needs
# Every byte value except UTF-8 continuation bytes (0b10xxxxxx), for counting characters.
_NOT_CONTINUATION = bytes(b for b in range(256) if b & 0xC0 != 0x80)


def _characters(data: bytes | bytearray) -> int:
    """Characters in UTF-8 `data`: its bytes minus continuation bytes (C speed)."""
    return len(data) - len(data.translate(None, _NOT_CONTINUATION))


class CappedOutput:
    def __init__(self, head_chars: int, tail_chars: int) -> None:
        self.head_chars = head_chars
        self.tail_chars = tail_chars
        self._head = bytearray()
        self._tail = bytearray()
        self._head_limit = head_chars * _BYTES_PER_CHAR
        self._tail_limit = tail_chars * _BYTES_PER_CHAR
        self.dropped_chars = 0
        """Characters between head and tail that were never kept."""

    def add(self, data: bytes) -> None:
        room = self._head_limit - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if not data:
            return
        self._tail += data
        excess = len(self._tail) - self._tail_limit
        if excess > 0:
            self.dropped_chars += _characters(self._tail[:excess])
            del self._tail[:excess]

    def text(self) -> tuple[str, int]:
        """The output, at most head + tail characters, and how many characters were cut."""
        head = self._head.decode("utf-8", errors="replace")
        tail = self._tail.decode("utf-8", errors="replace")
        if not self.dropped_chars:
            return cap_output(head + tail, self.head_chars, self.tail_chars)
        kept_head = head[: self.head_chars]
        kept_tail = tail[len(tail) - self.tail_chars :] if self.tail_chars else ""
        cut = self.dropped_chars + len(head) - len(kept_head) + len(tail) - len(kept_tail)
        return join_cut(kept_head, cut, kept_tail), cut


def cap_output(text: str, head: int = 5000, tail: int = 5000) -> tuple[str, int]:
    """Keep the first `head` and last `tail` characters; return the text and how many were cut.

    The cut is marked in the text itself so the agent knows something is missing.
    """
    cut = len(text) - head - tail
    if cut <= 0:
        return text, 0
    ending = text[len(text) - tail :] if tail else ""
    return join_cut(text[:head], cut, ending), cut


def join_cut(head: str, cut: int, tail: str) -> str:
    """The kept start and end of a text with the mark of what is missing between them."""
    return f"{head}\n[… {cut} characters cut …]\n{tail}"


def file_tail(output, chars: int) -> str:
    """The last `chars` characters of a binary file of output, read from its end only."""
    size = output.seek(0, 2)
    output.seek(max(0, size - _BYTES_PER_CHAR * chars))
    return output.read().decode(errors="replace")[-chars:]
