"""A Pratt parser producing a small expression tree."""

from __future__ import annotations

from dataclasses import dataclass

from .tokens import CalcSyntaxError, Token, TokenKind, tokenize

COMPARISONS = frozenset({"<", "<=", ">", ">=", "==", "!="})

# Left and right binding powers of the infix operators. A right power above the left one makes
# an operator left-associative; "**" has it the other way round and so groups to the right.
INFIX_POWER: dict[str, tuple[int, int]] = {
    "or": (10, 11),
    "and": (20, 21),
    **{op: (40, 41) for op in COMPARISONS},
    "+": (50, 51),
    "-": (50, 51),
    "*": (60, 61),
    "/": (60, 61),
    "//": (60, 61),
    "%": (60, 61),
    "**": (80, 79),
}
# Unary minus binds looser than "**", so -2 ** 2 is -(2 ** 2) as in Python.
PREFIX_POWER = {"not": 30, "-": 70, "+": 70}


@dataclass(frozen=True)
class Number:
    value: int | float
    text: str
    position: int


@dataclass(frozen=True)
class Boolean:
    value: bool
    position: int


@dataclass(frozen=True)
class Name:
    name: str
    position: int


@dataclass(frozen=True)
class Unary:
    op: str
    operand: Node
    position: int


@dataclass(frozen=True)
class Binary:
    op: str
    left: Node
    right: Node
    position: int
    """Position of the operator, which is where evaluation errors point."""


@dataclass(frozen=True)
class Call:
    name: str
    args: tuple[Node, ...]
    position: int


Node = Number | Boolean | Name | Unary | Binary | Call


def parse(source: str) -> Node:
    """Parse ``source`` into an expression tree, raising :class:`CalcSyntaxError`."""
    return _Parser(source).parse()


class _Parser:
    def __init__(self, source: str) -> None:
        self.source = source
        self.tokens = tokenize(source)
        self.index = 0

    def parse(self) -> Node:
        if self.peek().kind is TokenKind.END:
            raise self.error("empty expression", self.peek())
        node = self.expression(0)
        token = self.peek()
        if token.kind is not TokenKind.END:
            raise self.error(f"unexpected {token.describe()}", token)
        return node

    def peek(self) -> Token:
        return self.tokens[self.index]

    def advance(self) -> Token:
        token = self.tokens[self.index]
        if token.kind is not TokenKind.END:
            self.index += 1
        return token

    def error(self, message: str, token: Token) -> CalcSyntaxError:
        return CalcSyntaxError(message, token.position, self.source)

    def expression(self, min_power: int) -> Node:
        left = self.prefix(self.advance())
        chained_comparison = False
        while True:
            token = self.peek()
            # Names and numbers never spell an operator, and END has empty text.
            powers = INFIX_POWER.get(token.text)
            if powers is None or powers[0] <= min_power:
                break
            if token.text in COMPARISONS and chained_comparison:
                raise self.error("comparison operators cannot be chained", token)
            self.advance()
            right = self.expression(powers[1])
            left = Binary(token.text, left, right, token.position)
            chained_comparison = token.text in COMPARISONS
        return left

    def prefix(self, token: Token) -> Node:
        if token.kind is TokenKind.NUMBER:
            assert token.value is not None
            return Number(token.value, token.text, token.position)
        if token.kind is TokenKind.NAME:
            if self.peek().text == "(":
                return self.call(token)
            return Name(token.text, token.position)
        if token.text in ("true", "false"):
            return Boolean(token.text == "true", token.position)
        if token.text in PREFIX_POWER:
            return Unary(token.text, self.expression(PREFIX_POWER[token.text]), token.position)
        if token.text == "(":
            inner = self.expression(0)
            self.expect_closing(token)
            return inner
        raise self.error(f"expected an expression but found {token.describe()}", token)

    def call(self, name: Token) -> Call:
        opening = self.advance()
        args: list[Node] = []
        if self.peek().text != ")":
            while True:
                args.append(self.expression(0))
                if self.peek().text != ",":
                    break
                self.advance()
        self.expect_closing(opening)
        return Call(name.text, tuple(args), name.position)

    def expect_closing(self, opening: Token) -> None:
        token = self.peek()
        if token.text != ")":
            message = f"expected ')' to close '(' at position {opening.position}"
            raise self.error(f"{message} but found {token.describe()}", token)
        self.advance()
