"""Where a hidden test can be turned into a canary: the one statement of a test function
whose expected value (or expected exception) can be changed so that a correct program
fails the copy, and the copies made by changing it.

A site is a statement that always runs when the test does — one of the function's own
top-level statements, with nothing before it that may return — so a copy fails exactly
where the real test checks, and for that check's reason:
- `column`: `assert <expr> == <name>` where <name> is a `parametrize` column written out in
  the decorator. Each copy rotates the column (row i expects what row i+k expects, for a k
  that changes every row): every value a copy expects is one a real test expects, and
  across the group each row holds each value once. (A `match=` column is not rotated: a
  pattern is part of a message, and another row's part may be in this row's message too.)
- `value`: `assert <expr> == <literal>` (either side; also a name bound to a literal by an
  earlier statement) and unittest's `self.assertEqual(<expr>, <literal>)` and kin. The
  copies expect other values of the same type, the real one at a random place among them.
- `raises`: `with pytest.raises(X):` (or `self.assertRaises(X)`) expecting another
  exception class instead, one the module names (a sibling of X, say) or a common builtin,
  unrelated to X either way (`class_index`): a correct program fails the copy with X
  itself. Where no such class is known, the copy runs the body bare (fewer copies, one
  that a forger knowing this scheme can tell).
- `identity`: an assertion turned into its opposite (`==` into `!=`, `<` into `>=`, `is`
  into `is not`, `in` into `not in`, `x` into `not x` and back): for suites with nothing
  better; it catches a blanket forgery, not an object that pretends.
`column` and `value` copies fail with an AssertionError for a correct program, and pass for
an object equal to everything: that is how semantic forgery is caught.

A literal or column a site changes is read nowhere in the function before the site, so the
change cannot make the test fail earlier, or for another reason, than at the site.
"""

from __future__ import annotations

import ast
import builtins
import copy
import math
import random
import string
from dataclasses import dataclass
from typing import Literal

from etude.common import python_ast
from etude.reward.class_index import ClassIndex

SiteKind = Literal["column", "value", "raises", "identity"]
_RANK: dict[SiteKind, int] = {"column": 0, "value": 0, "raises": 1, "identity": 2}
MAX_CAPACITY = 32
# Exceptions whose escape from a test does not make pytest report a failure.
_NOT_FAILURES = {"KeyboardInterrupt", "SystemExit", "GeneratorExit", "BaseException"}
_EQUAL_ASSERTIONS = {
    "assertEqual", "assertEquals", "assertListEqual", "assertTupleEqual", "assertDictEqual",
    "assertSetEqual", "assertMultiLineEqual", "assertSequenceEqual",
}  # fmt: skip
_RAISES = {"raises", "assertRaises", "assertRaisesRegex"}
_ASSERTION = ("AssertionError",)

Path = tuple[tuple[str, int | None], ...]
"""Fields (and list indices) from a function definition down to one of its nodes."""


@dataclass(frozen=True, slots=True)
class Site:
    kind: SiteKind
    reasons: tuple[str, ...]
    """Exception class names, any of which in the raised exception's MRO is a failure for
    the right reason."""
    statement: int
    """Index of the site's statement in the function's body."""
    literals: tuple[Path, ...] = ()
    """`value`: the literal to change; `column`: the column's value in each row; `raises`:
    the expected class (when `alternatives` has others to put there)."""
    alternatives: tuple[str, ...] = ()
    """`raises`: names of the module (or builtins) of classes to expect instead."""
    shifts: tuple[int, ...] = ()
    """`column`: the rotations that change what every row expects."""
    capacity: int = 1
    """How many distinct copies the site gives."""


def sites(
    function: ast.FunctionDef, aliases: dict[str, str], classes: ClassIndex | None = None
) -> list[Site]:
    """The sites of one test function, best first: those that catch semantic forgery, then
    those that give the most copies. `aliases`: a module's top-level names (`module_aliases`);
    `classes`: the repository's classes, for exceptions to expect instead (None: none)."""
    if _is_generator(function):
        return []
    found: list[Site] = []
    columns = _parametrize_columns(function)
    for index, statement in enumerate(function.body):
        if index and _may_return(function.body[index - 1]):
            break
        site = _site(function, index, statement, columns, aliases, classes)
        if site is not None:
            found.append(site)
    return sorted(found, key=lambda s: (_RANK[s.kind], -s.capacity))


def copies(
    function: ast.FunctionDef, site: Site, count: int, rng: random.Random
) -> list[ast.FunctionDef]:
    """Up to `count` copies of `function`, each changed at `site` differently. All copies of
    a group change the same place, so no majority across the group tells the original."""
    if site.kind == "column":
        shifts = rng.sample(site.shifts, min(count, len(site.shifts)))
        rows = [_node_at(function, path) for path in site.literals]
        return [
            _changed(function, site, [rows[(i + k) % len(rows)] for i in range(len(rows))])
            for k in shifts
        ]
    if site.kind == "value":
        (path,) = site.literals
        values = _alternatives(_value(_node_at(function, path)), count, rng)
        return [_changed(function, site, [_literal(v)]) for v in values]
    if site.alternatives:
        chosen = rng.sample(site.alternatives, min(count, len(site.alternatives)))
        return [_changed(function, site, [ast.Name(name, ast.Load())]) for name in chosen]
    return [_changed(function, site, None)][:count]


def _changed(
    function: ast.FunctionDef, site: Site, replacements: list[ast.expr] | None
) -> ast.FunctionDef:
    copied = copy.deepcopy(function)
    statement = copied.body[site.statement]
    if site.kind == "raises" and replacements is None:
        assert isinstance(statement, ast.With)
        copied.body[site.statement : site.statement + 1] = statement.body
    elif site.kind == "identity":
        copied.body[site.statement] = _negated(statement)
    else:
        assert replacements is not None
        for path, replacement in zip(site.literals, replacements, strict=True):
            _replace_at(copied, path, copy.deepcopy(replacement))
    return copied


# -- finding sites -----------------------------------------------------------------------


def _site(
    function: ast.FunctionDef,
    index: int,
    statement: ast.stmt,
    columns: dict[str, list[Path]],
    aliases: dict[str, str],
    classes: ClassIndex | None,
) -> Site | None:
    if isinstance(statement, ast.With) and len(statement.items) == 1:
        context = statement.items[0].context_expr
        reasons = _expected_exceptions(context, aliases)
        if reasons:
            return _raises_site(index, context, reasons, aliases, classes)
    compared = _compared(statement)
    if compared is not None:
        operands, where = compared
        for side, operand in enumerate(operands):
            if capacity := _capacity(operand):
                path = (("body", index), *where(side))
                return Site("value", _ASSERTION, index, (path,), capacity=capacity)
            if isinstance(operand, ast.Name) and _only_read_at(function, index, operand.id):
                found = _bound_literal(function, index, operand.id)
                if found is not None:
                    return found
                column = _column_site(function, index, columns.get(operand.id))
                if column is not None:
                    return column
    if isinstance(statement, ast.Assert):
        return Site("identity", _ASSERTION, index)
    return None


def _only_read_at(function: ast.FunctionDef, index: int, name: str) -> bool:
    """Whether `name` is read once up to the site, at the site: changing it cannot make
    anything before the check fail (after a failed check nothing of the copy runs)."""
    return _reads(function.body[:index], name) == 0 and _reads([function.body[index]], name) == 1


def _bound_literal(function: ast.FunctionDef, index: int, name: str) -> Site | None:
    """A value site at the literal of the last `name = <literal>` before the site."""
    for earlier in range(index - 1, -1, -1):
        statement = function.body[earlier]
        if _assigns(statement, name):
            simple = (
                isinstance(statement, ast.Assign) and len(statement.targets) == 1
                and isinstance(statement.targets[0], ast.Name)
            )  # fmt: skip
            if simple and (capacity := _capacity(statement.value)):
                path: Path = (("body", earlier), ("value", None))
                return Site("value", _ASSERTION, index, (path,), capacity=capacity)
            return None
    return None


def _column_site(function: ast.FunctionDef, index: int, paths: list[Path] | None) -> Site | None:
    """A column site over the rows at `paths`, with every rotation under which each row
    expects something else."""
    if not paths or len(paths) < 2:
        return None
    values = [_value(_node_at(function, p)) for p in paths]
    if any(v is _NOTHING for v in values):
        return None
    rows = len(values)
    shifts = tuple(
        k for k in range(1, rows)
        if all(_differs(values[i], values[(i + k) % rows]) for i in range(rows))
    )  # fmt: skip
    if not shifts:
        return None
    return Site("column", _ASSERTION, index, tuple(paths), shifts=shifts, capacity=len(shifts))


def _differs(own, other) -> bool:
    try:
        return bool(own != other)
    except Exception:  # a comparison that raises tells nothing
        return False


def _compared(statement: ast.stmt):
    """The two operands of an equality the statement asserts, and a function giving the
    path (from the statement) of operand 0 or 1; None for another statement."""
    if isinstance(statement, ast.Assert):
        test = statement.test
        if isinstance(test, ast.Compare) and [type(o) for o in test.ops] == [ast.Eq]:
            operands = (test.left, test.comparators[0])
            return operands, lambda side: (
                (("test", None), ("left", None)) if side == 0
                else (("test", None), ("comparators", 0))
            )  # fmt: skip
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        call = statement.value
        func = call.func
        if (
            isinstance(func, ast.Attribute) and func.attr in _EQUAL_ASSERTIONS
            and _is_self(func.value) and len(call.args) >= 2
        ):  # fmt: skip
            return (call.args[0], call.args[1]), lambda side: (
                ("value", None), ("args", side),
            )  # fmt: skip
    return None


def _parametrize_columns(function: ast.FunctionDef) -> dict[str, list[Path]]:
    """Argument name → the paths of its value in every row of a `parametrize` decorator
    whose rows are all written out as literals."""
    columns: dict[str, list[Path]] = {}
    for number, decorator in enumerate(function.decorator_list):
        rows = written_rows(decorator)
        names = _argnames(decorator.args[0]) if rows is not None else []
        if not names or not rows.elts:
            continue
        base: Path = (("decorator_list", number), ("args", 1))
        for column, name in enumerate(names):
            paths = []
            for row_number, row in enumerate(rows.elts):
                path = _row_value(row, column, len(names), (*base, ("elts", row_number)))
                if path is None:
                    break
                paths.append(path)
            else:
                columns[name] = paths
    return columns


def written_rows(decorator: ast.expr) -> ast.List | ast.Tuple | None:
    """The rows of a `parametrize(names, [rows…])` decorator written out in it, else None
    (another decorator, or rows read from elsewhere)."""
    if (
        isinstance(decorator, ast.Call) and getattr(decorator.func, "attr", "") == "parametrize"
        and len(decorator.args) >= 2 and isinstance(decorator.args[1], ast.List | ast.Tuple)
    ):  # fmt: skip
        return decorator.args[1]
    return None


def _argnames(node: ast.expr) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [n.strip() for n in node.value.split(",") if n.strip()]
    if isinstance(node, ast.List | ast.Tuple):
        names = [e.value for e in node.elts if isinstance(e, ast.Constant)]
        written = all(isinstance(n, str) for n in names) and len(names) == len(node.elts)
        return names if written else []
    return []


def _row_value(row: ast.expr, column: int, width: int, path: Path) -> Path | None:
    if isinstance(row, ast.Call) and getattr(row.func, "attr", None) == "param":
        return (*path, ("args", column)) if len(row.args) == width else None
    if width == 1:
        return path
    if isinstance(row, ast.Tuple | ast.List) and len(row.elts) == width:
        return (*path, ("elts", column))
    return None


# Builtin exceptions code commonly raises: what a copy may expect instead, where unrelated.
_COMMON = ("ValueError", "TypeError", "KeyError", "IndexError", "RuntimeError",
           "AttributeError", "LookupError", "ZeroDivisionError", "NotImplementedError")  # fmt: skip


def _raises_site(
    index: int,
    context: ast.expr,
    reasons: tuple[str, ...],
    aliases: dict[str, str],
    classes: ClassIndex | None,
) -> Site:
    """A raises site: with the module's (and common builtin) exception classes unrelated to
    the one expected, when it is a single name; else the body run bare."""
    assert isinstance(context, ast.Call)
    if classes is None or len(reasons) != 1 or not isinstance(context.args[0], ast.Name):
        return Site("raises", reasons, index)
    (expected,) = reasons
    local = {name: real for name, real in aliases.items() if classes.is_exception(real)}
    local |= {name: name for name in _COMMON if name not in aliases}
    alternatives = tuple(
        sorted(name for name, real in local.items() if classes.unrelated(real, expected))
    )
    if not alternatives:
        return Site("raises", reasons, index)
    path: Path = (("body", index), ("items", 0), ("context_expr", None), ("args", 0))
    return Site("raises", reasons, index, (path,), alternatives=alternatives,
                capacity=len(alternatives))  # fmt: skip


def _expected_exceptions(context: ast.expr, aliases: dict[str, str]) -> tuple[str, ...]:
    """The class names `pytest.raises(...)` / `self.assertRaises(...)` expects, resolved
    through the module's aliases; empty when it is something else or unresolvable."""
    if not (isinstance(context, ast.Call) and context.args):
        return ()
    func = context.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name not in _RAISES:
        return ()
    if name != "raises" and not (isinstance(func, ast.Attribute) and _is_self(func.value)):
        return ()
    expected = context.args[0]
    elements = expected.elts if isinstance(expected, ast.Tuple) else [expected]
    names = []
    for element in elements:
        if isinstance(element, ast.Name):
            # A module's name or a builtin exception; a parameter or a local (a class
            # chosen per case) names nothing that can be checked.
            if element.id in aliases:
                names.append(aliases[element.id])
            elif isinstance(getattr(builtins, element.id, None), type):
                names.append(element.id)
            else:
                return ()
        elif isinstance(element, ast.Attribute):
            names.append(element.attr)
        else:
            return ()
    if not names or any(n in _NOT_FAILURES for n in names):
        return ()
    return tuple(names)


def module_aliases(tree: ast.Module) -> dict[str, str]:
    """The names a test module binds at its top level → the class names they stand for:
    itself for an imported name or a class, the original for `from m import E as F` and
    for `F = E` / `F = m.E`."""
    aliases: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            aliases[node.name] = node.name
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                aliases[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
            if isinstance(target, ast.Name):
                if isinstance(value, ast.Name):
                    aliases[target.id] = aliases.get(value.id, value.id)
                elif isinstance(value, ast.Attribute):
                    aliases[target.id] = value.attr
    return aliases


# -- what may not come before a site -----------------------------------------------------


_SCOPES = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef


def _own_nodes(node: ast.AST):
    """`node` and its descendants, not entering nested functions, lambdas or classes
    (their statements run when called, not where they are defined)."""
    yield node
    if isinstance(node, _SCOPES):
        return
    for child in ast.iter_child_nodes(node):
        yield from _own_nodes(child)


def _may_return(statement: ast.stmt) -> bool:
    return any(isinstance(n, ast.Return) for n in _own_nodes(statement))


def _is_generator(function: ast.FunctionDef) -> bool:
    return any(
        isinstance(n, ast.Yield | ast.YieldFrom)
        for statement in function.body
        for n in _own_nodes(statement)
    )


def _reads(statements: list[ast.stmt], name: str) -> int:
    """How many times `statements` read `name` (nested functions included)."""
    return sum(
        isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
        for statement in statements
        for n in ast.walk(statement)
    )


def _assigns(statement: ast.stmt, name: str) -> bool:
    return any(
        isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store | ast.Del)
        for n in _own_nodes(statement)
    )


def _is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


_OPPOSITES = {
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Lt: ast.GtE, ast.GtE: ast.Lt, ast.Gt: ast.LtE,
    ast.LtE: ast.Gt, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
}  # fmt: skip


def _negated(statement: ast.stmt) -> ast.stmt:
    """The assertion of the opposite, written as a test would write it."""
    assert isinstance(statement, ast.Assert)
    test = statement.test
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        test = ast.Compare(test.left, [_OPPOSITES[type(test.ops[0])]()], test.comparators)
    elif isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test = test.operand
    else:
        test = ast.UnaryOp(ast.Not(), test)
    return ast.copy_location(ast.Assert(test, statement.msg), statement)


# -- literals ----------------------------------------------------------------------------


def _value(node: ast.expr):
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NOTHING


_NOTHING = object()


def _capacity(node: ast.expr) -> int:
    """How many other values of its kind a literal can take (at most MAX_CAPACITY); 0 for
    no literal, or one with none."""
    value = _value(node)
    return 0 if value is _NOTHING else len(_alternatives(value, MAX_CAPACITY, random.Random(0)))


def _literal(value) -> ast.expr:
    return python_ast.parse(repr(value), mode="eval").body


def _alternatives(value, count: int, rng: random.Random) -> list:
    """Up to `count` distinct values like `value` and unlike it (same type and shape)."""
    if isinstance(value, bool):
        return [not value][:count]
    if isinstance(value, int):
        return _window(value, 1, count, rng, None)
    if isinstance(value, float):
        if not math.isfinite(value) or abs(value) >= 2**50:
            return []
        decimals = _decimals(value)
        step = 10.0**-decimals if decimals else 1.0
        return _window(value, step, count, rng, decimals)
    if isinstance(value, str):
        return _other_texts(value, count, rng)
    if isinstance(value, bytes):
        return [t.encode("latin-1") for t in _other_texts(value.decode("latin-1"), count, rng)]
    if isinstance(value, tuple | list | dict) and value:
        keys = list(range(len(value))) if not isinstance(value, dict) else list(value)
        rng.shuffle(keys)
        for key in keys:  # one element, the same in every copy
            items = list(value) if not isinstance(value, dict) else None
            others = _alternatives(value[key], count, rng)
            if not others:
                continue
            if items is None:
                return [{**value, key: other} for other in others]
            return [type(value)([*items[:key], other, *items[key + 1 :]]) for other in others]
    return []


def _window(value, step, count: int, rng: random.Random, decimals: int | None) -> list:
    """`count` values on a grid of `step` around `value`, `value` at a random place."""
    below = rng.randint(0, count)
    grid = [value + (k - below) * step for k in range(count + 1)]
    if decimals is not None:
        grid = [round(v, decimals) for v in grid]
    return [v for v in grid if v != value]


def _decimals(value: float) -> int:
    """Digits after the point that `repr` shows (0 for an integral float), at most 12."""
    text = repr(value)
    if "e" in text or "E" in text:
        return 0 if value.is_integer() else 12
    fraction = text.partition(".")[2].rstrip("0")
    return min(len(fraction), 12)


def _other_texts(text: str, count: int, rng: random.Random) -> list[str]:
    """One letter or digit, at one position for all, changed for others of its kind. Texts
    without one are left alone (a text that grows reads as the copy)."""
    positions = [i for i, c in enumerate(text) if c.isascii() and c.isalnum()]
    if not positions:
        return []
    position = rng.choice(positions)
    old = text[position]
    pool = (
        string.digits if old.isdigit()
        else string.ascii_uppercase if old.isupper() else string.ascii_lowercase
    )  # fmt: skip
    chosen = rng.sample(pool.replace(old, ""), min(count, len(pool) - 1))
    return [text[:position] + new + text[position + 1 :] for new in chosen]


# -- paths -------------------------------------------------------------------------------


def _node_at(root: ast.AST, path: Path) -> ast.AST:
    node = root
    for field, index in path:
        node = getattr(node, field)
        if index is not None:
            node = node[index]
    return node


def _replace_at(root: ast.AST, path: Path, replacement: ast.expr) -> None:
    parent = _node_at(root, path[:-1])
    field, index = path[-1]
    if index is None:
        setattr(parent, field, replacement)
    else:
        getattr(parent, field)[index] = replacement
