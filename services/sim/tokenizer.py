"""The simulated policy's tokenizer: one token per whitespace-separated word. The agent loop
tokenizes every tool result it shows the policy; with a real tokenizer that costs a
millisecond a result, which a thousand simulated episodes on two cores cannot afford, and
the simulation needs only the counts (how long each context is)."""

from __future__ import annotations

_WORD = 3


class WordTokenizer:
    eos_token_id = 2

    def __init__(self) -> None:
        self._special: dict[str, int] = {}

    def encode(self, text: str) -> list[int]:
        return [_WORD] * len(text.split())

    def decode(self, token_ids: list[int]) -> str:
        return " ".join("w" for _ in token_ids)

    def convert_tokens_to_ids(self, token: str) -> int:
        """A chat template's special token (`<|im_end|>`): an id of its own, from 4 up."""
        return self._special.setdefault(token, 4 + len(self._special))
