"""AST-located mutations that rewrite only the mutated expression's source span.

Every operator finds nodes with `ast`, then edits the original text between the node's
start and end offsets, so the rest of the file — comments, formatting — is untouched and
the diff stays one or two lines. Kinds: comparison swap, off-by-one (integer constants
and slice bounds), and/or swap, negated condition, wrong variable of the same kind,
dropped statement, swapped arguments.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

from etude.common import python_ast

COMPARE_SWAPS = {
    ast.Lt: "<=", ast.LtE: "<", ast.Gt: ">=", ast.GtE: ">",
    ast.Eq: "!=", ast.NotEq: "==", ast.In: "not in", ast.NotIn: "in",
    ast.Is: "is not", ast.IsNot: "is",
}  # fmt: skip
DROPPABLE = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr)


@dataclass(frozen=True, slots=True)
class Mutation:
    kind: str
    path: str
    start: int
    """Character offsets of the replaced span in the file's text."""
    end: int
    replacement: str
    line: int

    def apply(self, source: str) -> str:
        return source[: self.start] + self.replacement + source[self.end :]


class _Text:
    """Turns ast positions (line, UTF-8 byte column) into offsets in the text."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.lines = source.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def offset(self, line: int, byte_col: int) -> int:
        text = self.lines[line - 1]
        return self.starts[line - 1] + len(text.encode()[:byte_col].decode(errors="ignore"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        start = self.offset(node.lineno, node.col_offset)
        return start, self.offset(node.end_lineno, node.end_col_offset)

    def segment(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.source[start:end]


def _single_line(node: ast.AST) -> bool:
    return getattr(node, "lineno", None) is not None and node.lineno == node.end_lineno


def _is_string(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _skipped_nodes(tree: ast.Module) -> set[int]:
    """Ids of nodes never mutated: docstrings, annotations, and what lies inside them."""
    skipped: set[int] = set()

    def skip(node: ast.AST | None) -> None:
        if node is not None:
            skipped.update(id(n) for n in ast.walk(node))

    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and _is_string(first.value):
            skip(first)
        if isinstance(node, ast.arg):
            skip(node.annotation)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            skip(node.returns)
        if isinstance(node, ast.AnnAssign):
            skip(node.annotation)
    return skipped


def find_mutations(path: str, source: str) -> list[Mutation]:
    """Every candidate mutation of one file, in source order."""
    tree = python_ast.parse(source)
    text = _Text(source)
    skipped = _skipped_nodes(tree)
    in_functions = {
        id(inner)
        for function in ast.walk(tree)
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef)
        for inner in ast.walk(function)
    }
    found = [
        mutation
        for node in ast.walk(tree)
        if id(node) not in skipped
        for mutation in _mutations_of(node, text, path, id(node) in in_functions)
    ]
    for function in ast.walk(tree):
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            found += _wrong_variables(function, text, path, skipped)
    return sorted(found, key=lambda m: (m.start, m.kind, m.replacement))


def _mutations_of(node: ast.AST, text: _Text, path: str, in_function: bool) -> Iterator[Mutation]:
    def make(kind: str, target: ast.AST, replacement: str) -> Mutation:
        start, end = text.span(target)
        return Mutation(kind, path, start, end, replacement, target.lineno)

    if isinstance(node, ast.Compare) and len(node.ops) == 1 and _single_line(node):
        swapped = COMPARE_SWAPS.get(type(node.ops[0]))
        if swapped:
            left, right = text.segment(node.left), text.segment(node.comparators[0])
            yield make("comparison_swap", node, f"{left} {swapped} {right}")
    elif isinstance(node, ast.Constant) and type(node.value) is int and _single_line(node):
        if 0 <= node.value <= 1000:
            yield make("off_by_one", node, str(node.value + 1))
        if 1 <= node.value <= 1000:
            yield make("off_by_one", node, str(node.value - 1))
    elif isinstance(node, ast.Slice):
        for bound in (node.lower, node.upper):
            if bound is not None and not isinstance(bound, ast.Constant) and _single_line(bound):
                source = text.segment(bound)
                yield make("off_by_one", bound, f"{source} + 1")
                yield make("off_by_one", bound, f"{source} - 1")
    elif isinstance(node, ast.BoolOp) and len(node.values) == 2 and _single_line(node):
        other = " or " if isinstance(node.op, ast.And) else " and "
        yield make("boolean_swap", node, other.join(text.segment(v) for v in node.values))
    elif isinstance(node, ast.If | ast.While | ast.IfExp) and _single_line(node.test):
        yield make("negated_condition", node.test, f"not ({text.segment(node.test)})")
    elif isinstance(node, ast.Call) and _single_line(node):
        positional = [a for a in node.args if not isinstance(a, ast.Starred)]
        if len(positional) == len(node.args) >= 2:
            first, second = node.args[0], node.args[1]
            a, b = text.span(first), text.span(second)
            between = text.source[a[1] : b[0]]
            replacement = text.segment(second) + between + text.segment(first)
            if text.segment(first) != text.segment(second):
                yield Mutation("swapped_arguments", path, a[0], b[1], replacement, node.lineno)
    if in_function:  # class bodies hold declarations; dropping one is no bug
        yield from _dropped_statements(node, text, path)


def _dropped_statements(node: ast.AST, text: _Text, path: str) -> Iterator[Mutation]:
    for body in (getattr(node, "body", None), getattr(node, "orelse", None)):
        if not isinstance(body, list) or len(body) < 2:
            continue  # dropping a block's only statement would not parse
        for statement in body:
            if not isinstance(statement, DROPPABLE) or not _single_line(statement):
                continue
            if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
                continue  # a docstring or a bare literal: dropping changes nothing
            if isinstance(statement, ast.AnnAssign) and statement.value is None:
                continue
            line = statement.lineno
            start, end = text.starts[line - 1], text.starts[line]
            yield Mutation("dropped_statement", path, start, end, "", line)


def _wrong_variables(
    function: ast.FunctionDef | ast.AsyncFunctionDef, text: _Text, path: str, skipped: set[int]
) -> list[Mutation]:
    """A variable read replaced by another local of the same function: the kind of slip
    that passes a glance (`low` for `high`)."""
    params = [a.arg for a in (*function.args.posonlyargs, *function.args.args) if a.arg != "self"]
    stored = {
        n.id for n in ast.walk(function) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }
    names = sorted(set(params) | stored)
    mutations = []
    for node in ast.walk(function):
        if id(node) in skipped or not isinstance(node, ast.Name):
            continue
        if not isinstance(node.ctx, ast.Load) or node.id not in names:
            continue
        for other in names:
            if other != node.id:
                start, end = text.span(node)
                mutations.append(Mutation("wrong_variable", path, start, end, other, node.lineno))
                break  # one substitute per read keeps the candidate count proportional
    return mutations
