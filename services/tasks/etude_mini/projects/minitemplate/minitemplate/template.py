"""Split template source into tokens, build a node tree and render it."""

import re
from collections import ChainMap
from collections.abc import Callable, Mapping
from typing import Any

from .errors import TemplateRuntimeError, TemplateSyntaxError
from .expressions import Expr, evaluate, parse_expression
from .filters import BUILTIN_FILTERS, escape

# Nodes are tagged tuples, like expressions: ("text", text), ("output", expr, lineno),
# ("if", [(condition, lineno, body), ...]) and ("for", name, iterable, lineno, body, else_body).
Node = tuple[Any, ...]
Token = tuple[str, str, int]

_TAG_START = re.compile(r"\{[{%#]")
_TAG = re.compile(r"\{\{(.*?)\}\}|\{%(.*?)%\}|\{#.*?#\}", re.DOTALL)
_FOR = re.compile(r"([A-Za-z_]\w*)\s+in\s+(.+)", re.DOTALL)
_CLOSERS = {"if": "endif", "for": "endfor"}


def tokenize(source: str) -> list[Token]:
    """Split ``source`` into ``(kind, content, lineno)`` with kind "text", "var" or "block".

    Comments are dropped and tag contents stripped; text keeps its whitespace exactly.
    """
    tokens: list[Token] = []
    pos, lineno = 0, 1
    while (start := _TAG_START.search(source, pos)) is not None:
        if start.start() > pos:
            tokens.append(("text", source[pos : start.start()], lineno))
            lineno += source.count("\n", pos, start.start())
        tag = _TAG.match(source, start.start())
        if tag is None:
            raise TemplateSyntaxError(f"unclosed '{start.group()}' tag", lineno)
        if tag.group(1) is not None:
            tokens.append(("var", tag.group(1).strip(), lineno))
        elif tag.group(2) is not None:
            tokens.append(("block", tag.group(2).strip(), lineno))
        lineno += tag.group().count("\n")
        pos = tag.end()
    if pos < len(source):
        tokens.append(("text", source[pos:], lineno))
    return tokens


class _Parser:
    def __init__(self, tokens: list[Token], filters: Mapping[str, Callable[..., Any]]) -> None:
        self.tokens = tokens
        self.filters = filters
        self.pos = 0

    def _expr(self, source: str, lineno: int) -> Expr:
        return parse_expression(source, lineno, self.filters)

    def body(
        self, opener: tuple[str, int] | None, stops: tuple[str, ...]
    ) -> tuple[list[Node], str, str, int]:
        """Parse nodes up to one of the ``stops`` tags; return them and that tag's parts."""
        nodes: list[Node] = []
        while self.pos < len(self.tokens):
            kind, content, lineno = self.tokens[self.pos]
            self.pos += 1
            if kind == "text":
                nodes.append(("text", content))
                continue
            if kind == "var":
                nodes.append(("output", self._expr(content, lineno), lineno))
                continue
            keyword, args, *_ = [*content.split(None, 1), "", ""]
            if keyword in stops:
                return nodes, keyword, args, lineno
            if keyword == "if":
                nodes.append(self._if(args, lineno))
            elif keyword == "for":
                nodes.append(self._for(args, lineno))
            elif keyword in ("elif", "else", "endif", "endfor"):
                where = f" in '{opener[0]}' block opened on line {opener[1]}" if opener else ""
                raise TemplateSyntaxError(f"unexpected '{keyword}' tag{where}", lineno)
            else:
                raise TemplateSyntaxError(f"unknown tag '{keyword}'", lineno)
        if opener is not None:
            block, lineno = opener
            message = f"unclosed '{block}' block; expected '{{% {_CLOSERS[block]} %}}'"
            raise TemplateSyntaxError(message, lineno)
        return nodes, "", "", 0

    def _sections(self, block: str, args: str, opener: int) -> list[tuple[str, str, int, list]]:
        """Collect a block's ``(keyword, args, lineno, body)`` sections up to its closing tag."""
        stops = ("elif", "else", "endif") if block == "if" else ("else", "endfor")
        sections: list[tuple[str, str, int, list[Node]]] = []
        keyword, lineno = block, opener
        while keyword != _CLOSERS[block]:
            if sections and sections[-1][0] == "else":
                raise TemplateSyntaxError(f"'{keyword}' cannot follow 'else'", lineno)
            if keyword == "else" and args:
                raise TemplateSyntaxError("'else' takes no arguments", lineno)
            body, next_keyword, next_args, next_lineno = self.body((block, opener), stops)
            sections.append((keyword, args, lineno, body))
            keyword, args, lineno = next_keyword, next_args, next_lineno
        if args:
            raise TemplateSyntaxError(f"'{keyword}' takes no arguments", lineno)
        return sections

    def _if(self, args: str, opener: int) -> Node:
        branches = []
        for keyword, condition, lineno, body in self._sections("if", args, opener):
            # An ``else`` branch gets condition None, meaning "always true".
            expr = None if keyword == "else" else self._expr(condition, lineno)
            branches.append((expr, lineno, body))
        return ("if", branches)

    def _for(self, args: str, opener: int) -> Node:
        match = _FOR.fullmatch(args)
        if match is None:
            raise TemplateSyntaxError("expected 'for <name> in <expression>'", opener)
        name = match.group(1)
        if name == "loop":
            raise TemplateSyntaxError("'loop' is reserved and cannot be a loop variable", opener)
        iterable = self._expr(match.group(2), opener)
        sections = self._sections("for", args, opener)
        else_body = sections[1][3] if len(sections) > 1 else None
        return ("for", name, iterable, opener, sections[0][3], else_body)


def _items(iterable: Any, lineno: int) -> list[Any]:
    if iterable is None:
        return []
    try:
        return list(iterable)
    except TypeError:
        message = f"cannot iterate over {type(iterable).__name__}"
        raise TemplateRuntimeError(message, lineno) from None


class Template:
    """A compiled template: compile once, render many times with different contexts.

    ``autoescape`` HTML-escapes every ``{{ }}`` output except values marked ``safe``.
    """

    def __init__(self, source: str, *, autoescape: bool = True) -> None:
        self.autoescape = autoescape
        self._nodes, *_ = _Parser(tokenize(source), BUILTIN_FILTERS).body(None, ())

    def render(self, context: Mapping[str, Any] | None = None, /, **variables: Any) -> str:
        """Render with ``context`` plus keyword ``variables`` (keywords win on conflicts)."""
        out: list[str] = []
        self._render(self._nodes, ChainMap(variables, dict(context or {})), out)
        return "".join(out)

    def _render(self, nodes: list[Node], scope: ChainMap[str, Any], out: list[str]) -> None:
        for node in nodes:
            match node:
                case ("text", text):
                    out.append(text)
                case ("output", expr, lineno):
                    out.append(self._output(expr, scope, lineno))
                case ("if", branches):
                    for condition, lineno, body in branches:
                        if condition is None or evaluate(condition, scope, lineno):
                            self._render(body, scope, out)
                            break
                case ("for", name, iterable, lineno, body, else_body):
                    items = _items(evaluate(iterable, scope, lineno), lineno)
                    if not items and else_body is not None:
                        self._render(else_body, scope, out)
                    for index, item in enumerate(items):
                        loop = {
                            "index": index + 1,
                            "index0": index,
                            "length": len(items),
                            "first": index == 0,
                            "last": index == len(items) - 1,
                        }
                        # A child scope per iteration keeps loop variables from leaking out.
                        self._render(body, scope.new_child({name: item, "loop": loop}), out)

    def _output(self, expr: Expr, scope: Mapping[str, Any], lineno: int) -> str:
        value = evaluate(expr, scope, lineno)
        if value is None:
            return ""
        return escape(value) if self.autoescape else str(value)
