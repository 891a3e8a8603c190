"""Tokenizer and error types shared by the parser and the evaluator."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

DIGITS = frozenset("0123456789")
KEYWORDS = frozenset({"and", "or", "not", "true", "false"})
# Longest first, so that "**" is never read as two "*" tokens.
SYMBOLS = ("**", "//", "<=", ">=", "==", "!=", "+", "-", "*", "/", "%", "<", ">", "(", ")", ",")


class CalcError(Exception):
    """Base class for every error raised by this package; carries a source position."""

    def __init__(self, message: str, position: int, source: str = "") -> None:
        super().__init__(f"{message} at position {position}")
        self.message = message
        self.position = position
        self.source = source

    def excerpt(self) -> str:
        """The source line with a caret under the offending position."""
        return f"{self.source}\n{' ' * self.position}^"


class CalcSyntaxError(CalcError):
    """The input is not a well-formed expression."""


class TokenKind(Enum):
    NUMBER = "number"
    NAME = "name"
    KEYWORD = "keyword"
    SYMBOL = "symbol"
    END = "end"


@dataclass(frozen=True)
class Token:
    kind: TokenKind
    text: str
    position: int
    value: int | float | None = None

    def describe(self) -> str:
        """How the token is named in error messages."""
        return "end of input" if self.kind is TokenKind.END else repr(self.text)


def tokenize(source: str) -> list[Token]:
    """Split ``source`` into tokens, always ending with a single END token."""
    tokens: list[Token] = []
    index = 0
    while index < len(source):
        char = source[index]
        if char.isspace():
            index += 1
        elif char in DIGITS or (char == "." and source[index + 1 : index + 2] in DIGITS):
            token = _read_number(source, index)
            tokens.append(token)
            index += len(token.text)
        elif char.isalpha() or char == "_":
            end = index + 1
            while end < len(source) and (source[end].isalnum() or source[end] == "_"):
                end += 1
            text = source[index:end]
            kind = TokenKind.KEYWORD if text in KEYWORDS else TokenKind.NAME
            tokens.append(Token(kind, text, index))
            index = end
        else:
            symbol = next((s for s in SYMBOLS if source.startswith(s, index)), None)
            if symbol is None:
                raise CalcSyntaxError(f"unexpected character {char!r}", index, source)
            tokens.append(Token(TokenKind.SYMBOL, symbol, index))
            index += len(symbol)
    tokens.append(Token(TokenKind.END, "", len(source)))
    return tokens


def _read_number(source: str, start: int) -> Token:
    """Read an int (``42``), a float (``4.2``, ``.5``, ``5.``) or scientific (``1e-3``)."""
    end = _skip_digits(source, start)
    is_float = False
    if source[end : end + 1] == ".":
        is_float = True
        end = _skip_digits(source, end + 1)
    if source[end : end + 1] in ("e", "E"):
        exponent = end + 1
        if source[exponent : exponent + 1] in ("+", "-"):
            exponent += 1
        digits_end = _skip_digits(source, exponent)
        if digits_end == exponent:
            raise CalcSyntaxError("malformed exponent", end, source)
        is_float = True
        end = digits_end
    following = source[end : end + 1]
    if following == "." or following == "_" or following.isalnum():
        raise CalcSyntaxError("malformed number", start, source)
    text = source[start:end]
    return Token(TokenKind.NUMBER, text, start, float(text) if is_float else int(text))


def _skip_digits(source: str, index: int) -> int:
    while index < len(source) and source[index] in DIGITS:
        index += 1
    return index
