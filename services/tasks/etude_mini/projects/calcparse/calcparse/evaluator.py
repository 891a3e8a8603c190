"""Evaluation of expression trees and conversion to reverse Polish notation."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .parser import Binary, Boolean, Call, Name, Node, Number, Unary, parse
from .tokens import CalcError

Value = int | float | bool

_UNARY_NAMES = {"-": "neg", "+": "pos"}
# Integer powers grow without bound; refuse exponents that would stall the interpreter.
MAX_INT_EXPONENT = 10_000


class CalcEvalError(CalcError):
    """The expression is well formed but cannot be evaluated (bad types, division by zero)."""


class CalcNameError(CalcEvalError):
    """A variable or function is not defined."""


@dataclass(frozen=True)
class _Builtin:
    min_args: int
    max_args: int | None
    function: Callable[..., Value]
    arity: str


def _sqrt(x: int | float) -> float:
    if x < 0:
        raise ValueError("sqrt of a negative number")
    return math.sqrt(x)


def _round(x: int | float, digits: int = 0) -> int | float:
    # Rounding to a whole number yields an int, as Python's one-argument round() does.
    return round(x) if digits == 0 else round(x, digits)


BUILTINS: Mapping[str, _Builtin] = {
    "min": _Builtin(1, None, min, "at least 1 argument"),
    "max": _Builtin(1, None, max, "at least 1 argument"),
    "abs": _Builtin(1, 1, abs, "exactly 1 argument"),
    "round": _Builtin(1, 2, _round, "1 or 2 arguments"),
    "sqrt": _Builtin(1, 1, _sqrt, "exactly 1 argument"),
}


def evaluate(
    expression: str | Node,
    env: Mapping[str, Value] | None = None,
    functions: Mapping[str, Callable[..., Value]] | None = None,
) -> Value:
    """Evaluate ``expression`` with variables from ``env`` and extra or overriding ``functions``.

    ``and``/``or`` short-circuit, so the right operand is only evaluated when needed.
    """
    source = expression if isinstance(expression, str) else ""
    node = parse(expression) if isinstance(expression, str) else expression
    return _Evaluator(source, env or {}, functions or {}).eval(node)


@dataclass(frozen=True)
class _Evaluator:
    source: str
    env: Mapping[str, Value]
    functions: Mapping[str, Callable[..., Value]]

    def fail(self, message: str, position: int) -> CalcEvalError:
        return CalcEvalError(message, position, self.source)

    def eval(self, node: Node) -> Value:
        if isinstance(node, Number | Boolean):
            return node.value
        if isinstance(node, Name):
            if node.name not in self.env:
                raise CalcNameError(f"unknown variable {node.name!r}", node.position, self.source)
            return self.env[node.name]
        if isinstance(node, Unary):
            operand = self.eval(node.operand)
            if node.op == "not":
                return not self.boolean(operand, node)
            number = self.number(operand, node)
            return -number if node.op == "-" else number
        if isinstance(node, Call):
            return self.call(node)
        if node.op in ("and", "or"):
            left = self.boolean(self.eval(node.left), node)
            if left == (node.op == "or"):
                return left
            return self.boolean(self.eval(node.right), node)
        return self.binary(node, self.eval(node.left), self.eval(node.right))

    def number(self, value: Value, node: Unary | Binary) -> int | float:
        if isinstance(value, bool):
            raise self.fail(f"operator {node.op!r} expects numbers, got a boolean", node.position)
        return value

    def boolean(self, value: Value, node: Unary | Binary) -> bool:
        if not isinstance(value, bool):
            raise self.fail(f"operator {node.op!r} expects booleans, got a number", node.position)
        return value

    def binary(self, node: Binary, left: Value, right: Value) -> Value:
        op = node.op
        if op in ("==", "!="):
            if isinstance(left, bool) != isinstance(right, bool):
                raise self.fail(
                    f"cannot compare a boolean with a number using {op!r}", node.position
                )
            return (left == right) == (op == "==")
        a, b = self.number(left, node), self.number(right, node)
        if op == "<":
            return a < b
        if op == "<=":
            return a <= b
        if op == ">":
            return a > b
        if op == ">=":
            return a >= b
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if op == "**":
            return self.power(a, b, node)
        if b == 0:
            raise self.fail("division by zero", node.position)
        if op == "/":
            return a / b
        if op == "//":
            return a // b
        return a % b

    def power(self, base: int | float, exponent: int | float, node: Binary) -> int | float:
        if base == 0 and exponent < 0:
            raise self.fail("division by zero", node.position)
        if isinstance(base, int) and isinstance(exponent, int):
            if exponent > MAX_INT_EXPONENT:
                raise self.fail("exponent too large", node.position)
            return base**exponent if exponent >= 0 else float(base) ** exponent
        try:
            result = base**exponent
        except OverflowError:
            raise self.fail("numeric overflow", node.position) from None
        if isinstance(result, complex):
            raise self.fail("result is not a real number", node.position)
        return result

    def call(self, node: Call) -> Value:
        args = [self.eval(arg) for arg in node.args]
        custom = self.functions.get(node.name)
        if custom is not None:
            return custom(*args)
        builtin = BUILTINS.get(node.name)
        if builtin is None:
            raise CalcNameError(f"unknown function {node.name!r}", node.position, self.source)
        count = len(args)
        if count < builtin.min_args or (builtin.max_args is not None and count > builtin.max_args):
            raise self.fail(f"{node.name}() takes {builtin.arity}, got {count}", node.position)
        if any(isinstance(arg, bool) for arg in args):
            raise self.fail(f"{node.name}() expects numbers, got a boolean", node.position)
        try:
            return builtin.function(*args)
        except (ValueError, TypeError) as error:
            raise self.fail(str(error), node.position) from None


def to_rpn(expression: str | Node) -> str:
    """Reverse Polish notation: ``"1 + 2 * 3"`` becomes ``"1 2 3 * +"``.

    Unary minus and plus are written ``neg`` and ``pos`` to keep them apart from the binary
    operators, and calls carry their arity, e.g. ``max/2``.
    """
    node = parse(expression) if isinstance(expression, str) else expression
    return " ".join(_rpn(node))


def _leaf(node: Node) -> str | None:
    if isinstance(node, Number):
        return node.text
    if isinstance(node, Boolean):
        return "true" if node.value else "false"
    return node.name if isinstance(node, Name) else None


def _rpn(node: Node) -> list[str]:
    leaf = _leaf(node)
    if leaf is not None:
        return [leaf]
    if isinstance(node, Unary):
        return [*_rpn(node.operand), _UNARY_NAMES.get(node.op, node.op)]
    if isinstance(node, Call):
        args = [item for arg in node.args for item in _rpn(arg)]
        return [*args, f"{node.name}/{len(node.args)}"]
    return [*_rpn(node.left), *_rpn(node.right), node.op]


def dump(expression: str | Node) -> str:
    """A fully parenthesised prefix form, handy for checking how an expression grouped."""
    node = parse(expression) if isinstance(expression, str) else expression
    leaf = _leaf(node)
    if leaf is not None:
        return leaf
    if isinstance(node, Unary):
        return f"({_UNARY_NAMES.get(node.op, node.op)} {dump(node.operand)})"
    if isinstance(node, Call):
        return "(" + " ".join([node.name, *(dump(arg) for arg in node.args)]) + ")"
    return f"({node.op} {dump(node.left)} {dump(node.right)})"
