"""Parse and evaluate the expressions inside ``{{ }}`` and ``{% if %}`` tags.

Compiled expressions are tuples tagged by their first element, such as
``("compare", "==", ("name", ("user", "role")), ("literal", "admin"))``: cheap to build,
easy to inspect, and evaluated by a single ``match`` statement.
"""

import inspect
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .errors import TemplateRuntimeError, TemplateSyntaxError

Expr = tuple[Any, ...]

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<string>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
      | (?P<number>-?\d+(?:\.\d+)?)
      | (?P<name>[A-Za-z_]\w*(?:\.\w+)*)
      | (?P<op>==|!=|<=|>=|<|>|\(|\)|\||:|,)
    )""",
    re.VERBOSE,
)
_CONSTANTS: dict[str, Any] = {"true": True, "false": False, "none": None}
_KEYWORDS = frozenset({"and", "or", "not", "in"})
_COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    # Membership in a missing (None) collection is simply false rather than an error.
    "in": lambda left, right: right is not None and left in right,
    "not in": lambda left, right: right is None or left not in right,
}


def parse_expression(source: str, lineno: int, filters: Mapping[str, Callable[..., Any]]) -> Expr:
    """Compile ``source``; grammar, loosest first: or, and, not, comparison, filter, primary."""
    return _Parser(source, lineno, filters).parse()


class _Parser:
    def __init__(self, source: str, lineno: int, filters: Mapping[str, Callable[..., Any]]) -> None:
        self.lineno = lineno
        self.filters = filters
        self.tokens: list[tuple[str, str]] = []
        self.pos = 0
        index = 0
        while source[index:].strip():
            match = _TOKEN.match(source, index)
            if match is None or match.lastgroup is None:
                bad = source[index:].lstrip()[0]
                raise TemplateSyntaxError(f"unexpected character {bad!r} in expression", lineno)
            self.tokens.append((match.lastgroup, match.group(match.lastgroup)))
            index = match.end()

    def parse(self) -> Expr:
        if not self.tokens:
            raise TemplateSyntaxError("expected an expression", self.lineno)
        expr = self._or()
        if self.pos < len(self.tokens):
            raise self._unexpected()
        return expr

    def _peek(self, offset: int = 0) -> str | None:
        index = self.pos + offset
        if index < len(self.tokens) and self.tokens[index][0] in ("name", "op"):
            return self.tokens[index][1]
        return None

    def _accept(self, text: str) -> bool:
        if self._peek() == text:
            self.pos += 1
            return True
        return False

    def _unexpected(self) -> TemplateSyntaxError:
        if self.pos >= len(self.tokens):
            return TemplateSyntaxError("unexpected end of expression", self.lineno)
        return TemplateSyntaxError(f"unexpected {self.tokens[self.pos][1]!r}", self.lineno)

    def _or(self) -> Expr:
        return self._chain("or", self._and)

    def _and(self) -> Expr:
        return self._chain("and", self._not)

    def _chain(self, keyword: str, operand: Callable[[], Expr]) -> Expr:
        left = operand()
        while self._accept(keyword):
            left = (keyword, left, operand())
        return left

    def _not(self) -> Expr:
        if self._accept("not"):
            return ("not", self._not())
        left = self._filtered()
        op = self._peek()
        if op == "not" and self._peek(1) == "in":
            self.pos += 2
            op = "not in"
        elif op in _COMPARISONS:
            self.pos += 1
        else:
            return left
        return ("compare", op, left, self._filtered())

    def _filtered(self) -> Expr:
        expr = self._primary()
        while self._accept("|"):
            if self.pos >= len(self.tokens) or self.tokens[self.pos][0] != "name":
                raise TemplateSyntaxError("expected a filter name after '|'", self.lineno)
            name = self.tokens[self.pos][1]
            self.pos += 1
            if name not in self.filters:
                raise TemplateSyntaxError(f"unknown filter '{name}'", self.lineno)
            args: list[Expr] = []
            if self._accept(":"):
                args.append(self._primary())
                while self._accept(","):
                    args.append(self._primary())
            func = self.filters[name]
            try:  # Check arity now so a bad call fails at compile time, not mid-render.
                inspect.signature(func).bind(None, *args)
            except TypeError:
                message = f"filter '{name}' does not take {len(args)} argument(s)"
                raise TemplateSyntaxError(message, self.lineno) from None
            expr = ("filter", name, func, expr, tuple(args))
        return expr

    def _primary(self) -> Expr:
        if self.pos >= len(self.tokens):
            raise self._unexpected()
        kind, text = self.tokens[self.pos]
        if kind == "string":
            self.pos += 1
            return ("literal", re.sub(r"\\(.)", r"\1", text[1:-1]))
        if kind == "number":
            self.pos += 1
            return ("literal", float(text) if "." in text else int(text))
        if kind == "name" and text not in _KEYWORDS:
            self.pos += 1
            if text in _CONSTANTS:
                return ("literal", _CONSTANTS[text])
            return ("name", tuple(text.split(".")))
        if self._accept("("):
            expr = self._or()
            if not self._accept(")"):
                raise self._unexpected()
            return expr
        raise self._unexpected()


def lookup(scope: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    """Resolve a dotted name by mapping key, list index or attribute; missing parts give None."""
    value = scope.get(path[0])
    for part in path[1:]:
        if isinstance(value, Mapping):
            value = value.get(part)
        elif part.isdigit() and isinstance(value, Sequence) and not isinstance(value, str):
            value = value[int(part)] if int(part) < len(value) else None
        elif part.startswith("_"):
            # Template authors are often less trusted than the code rendering their
            # templates, so private attributes and dunders such as __class__ stay hidden.
            value = None
        else:
            value = getattr(value, part, None)
        if value is None:
            break
    return value


def evaluate(expr: Expr, scope: Mapping[str, Any], lineno: int) -> Any:
    """Evaluate ``expr``, reporting errors at ``lineno``; ``and``/``or`` yield an operand."""
    match expr:
        case ("literal", value):
            return value
        case ("name", path):
            return lookup(scope, path)
        case ("not", operand):
            return not evaluate(operand, scope, lineno)
        case ("and", left, right):
            value = evaluate(left, scope, lineno)
            return evaluate(right, scope, lineno) if value else value
        case ("or", left, right):
            value = evaluate(left, scope, lineno)
            return value if value else evaluate(right, scope, lineno)
        case ("compare", op, left, right):
            a, b = evaluate(left, scope, lineno), evaluate(right, scope, lineno)
            try:
                return _COMPARISONS[op](a, b)
            except TypeError:
                message = f"cannot apply '{op}' to {type(a).__name__} and {type(b).__name__}"
                raise TemplateRuntimeError(message, lineno) from None
        case ("filter", name, func, target, args):
            value = evaluate(target, scope, lineno)
            try:
                return func(value, *(evaluate(arg, scope, lineno) for arg in args))
            except TemplateRuntimeError as exc:  # Built-in filters cannot know the line.
                raise TemplateRuntimeError(exc.message, lineno) from None
            except (TypeError, ValueError) as exc:
                raise TemplateRuntimeError(f"filter '{name}' failed: {exc}", lineno) from exc
    raise AssertionError(f"malformed expression {expr!r}")
