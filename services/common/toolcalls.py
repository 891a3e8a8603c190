r"""Codec for tool calls in the Qwen3-Coder / OpenHands XML format.

An assistant turn is free text (the agent's reasoning) with zero or more tool-call blocks::

    <tool_call>
    <function=NAME>
    <parameter=KEY>
    raw text value
    </parameter>
    </function>
    </tool_call>

All blocks of one turn form one parallel batch. The parser numbers the blocks ``call_0``,
``call_1``, ... in order of appearance. A block that fails to parse still uses up its number, so
errors and results can be matched to the blocks the agent wrote. Names of functions and
parameters are ``[A-Za-z_][A-Za-z0-9_.-]*``, at most 128 characters.

Values are raw text: code passes through verbatim, with no XML entities. Two rules make
``parse(render(call))`` an exact round trip for every string:

* Newlines. The renderer always writes ``<parameter=KEY>`` + newline + value + newline +
  ``</parameter>``. The parser strips one newline right after the opening tag and one right
  before the closing tag, where present, so ``<parameter=KEY>ls</parameter>`` also reads ``ls``.
* Escaping. Six fragments are structural: ``<tool_call>``, ``</tool_call>``, ``<function=``,
  ``</function>``, ``<parameter=``, ``</parameter>``. In a value, ``<`` + N backslashes + one
  of the fragments (any N >= 0) is written with N + 1 backslashes, so ``</parameter>`` becomes
  ``<\/parameter>`` and ``<\/parameter>`` becomes ``<\\/parameter>``. The parser removes one
  backslash from every ``<`` + N >= 1 backslashes + fragment in a value. Nothing else is
  escaped, and a rendered value never contains a structural fragment. Opening fragments are
  escaped too so that a forgotten ``</parameter>`` is reported instead of silently swallowing
  the next parameter or call into the value.

Outside blocks only ``<tool_call>`` (opens a block), a stray ``</tool_call>`` and a stray
``<function=`` (both errors) are significant; the rest is prose. Results go back to the agent as
``<tool_result id="call_0" name="NAME" exit_code="0" truncated="false">`` blocks, parse errors as
``<tool_error code="CODE" id="call_1">`` blocks; inside them only the block's own closing tag is
escaped, by the same backslash rule.

Model output never makes the parser raise: each problem becomes a ``ParseError`` with a stable
code (``ErrorCode``) and a message that tells the agent how to fix the call. A block with any
error yields no ``ToolCall``; the well-formed blocks of the same turn are still returned, and the
caller decides whether to run them. Scanning is linear in the length of the turn.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

DEFAULT_MAX_VALUE_CHARS = 100_000
DEFAULT_MAX_CALLS = 32
# Bounds the error list (and the feedback shown to the agent) on adversarial turns.
MAX_REPORTED_ERRORS = 32
MAX_NAME_CHARS = 128
_SNIPPET_CHARS = 120

_NAME_RE = re.compile(rf"[A-Za-z_][A-Za-z0-9_.\-]{{0,{MAX_NAME_CHARS - 1}}}")
# The name runs up to the next '>'. Stopping at '<' and newline keeps a missing '>' from
# swallowing the following tags; the bound keeps a pathological header cheap.
_HEADER_RE = re.compile(rf"([^<>\n]{{0,{MAX_NAME_CHARS + 32}}}+)>")

_CALL_OPEN = "tool_call>"
_CALL_CLOSE = "/tool_call>"
_FUNCTION_OPEN = "function="
_FUNCTION_CLOSE = "/function>"
_PARAMETER_OPEN = "parameter="
_PARAMETER_CLOSE = "/parameter>"
_STRUCTURAL = (_CALL_OPEN, _CALL_CLOSE, _FUNCTION_OPEN, _FUNCTION_CLOSE)
_STRUCTURAL += (_PARAMETER_OPEN, _PARAMETER_CLOSE)
# Finds every structural tag in one linear pass; group 1 is the fragment after '<'.
_TAG_RE = re.compile("<(" + "|".join(map(re.escape, _STRUCTURAL)) + ")")


class ErrorCode(StrEnum):
    """Stable machine codes of ``ParseError``; the values are part of the agent-facing format."""

    UNCLOSED_TOOL_CALL = "unclosed_tool_call"
    NESTED_TOOL_CALL = "nested_tool_call"
    UNOPENED_TOOL_CALL = "unopened_tool_call"
    FUNCTION_OUTSIDE_TOOL_CALL = "function_outside_tool_call"
    MISSING_FUNCTION = "missing_function"
    MULTIPLE_FUNCTIONS = "multiple_functions"
    UNCLOSED_FUNCTION = "unclosed_function"
    UNCLOSED_PARAMETER = "unclosed_parameter"
    NESTED_TAG = "nested_tag"
    UNEXPECTED_TAG = "unexpected_tag"
    STRAY_TEXT = "stray_text"
    INVALID_FUNCTION_NAME = "invalid_function_name"
    INVALID_PARAMETER_NAME = "invalid_parameter_name"
    UNKNOWN_FUNCTION = "unknown_function"
    UNKNOWN_PARAMETER = "unknown_parameter"
    MISSING_PARAMETER = "missing_parameter"
    DUPLICATE_PARAMETER = "duplicate_parameter"
    VALUE_TOO_LONG = "value_too_long"
    TOO_MANY_CALLS = "too_many_calls"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call; ``id`` is assigned by the parser (``call_N``, N = the block's position)."""

    name: str
    arguments: dict[str, str]
    id: str = ""


@dataclass(frozen=True, slots=True)
class ParseError:
    """A problem in model output: ``code`` is an ``ErrorCode``, ``snippet`` the offending text."""

    code: str
    message: str
    snippet: str
    # The id the block would have had; None for problems outside any block.
    call_id: str | None = None


@dataclass(frozen=True, slots=True)
class ParsedTurn:
    """A parsed turn: prose, the well-formed calls in order, and every problem found."""

    text: str
    calls: list[ToolCall]
    errors: list[ParseError]

    @property
    def ok(self) -> bool:
        return not self.errors


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool's name and parameter names, so the parser can check calls against it."""

    name: str
    required: frozenset[str] = frozenset()
    optional: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        # Accept any iterable of names (lists, tuples) while storing an immutable set.
        object.__setattr__(self, "required", frozenset(self.required))
        object.__setattr__(self, "optional", frozenset(self.optional))

    @property
    def parameters(self) -> frozenset[str]:
        return self.required | self.optional


def tools_by_name(specs: Iterable[ToolSpec]) -> dict[str, ToolSpec]:
    return {spec.name: spec for spec in specs}


def _escaper(fragments: Iterable[str], backslashes: str = "") -> re.Pattern[str]:
    """Match '<' + ``backslashes`` + a backslash run (group 1) + one of ``fragments``.

    The run is possessive and no fragment starts with a backslash, so the match is exact and a
    '<' costs time linear in its run of backslashes.
    """
    lookahead = "|".join(map(re.escape, fragments))
    return re.compile("<" + backslashes + r"(\\*+)(?=" + lookahead + ")")


_VALUE_ESCAPER = _escaper(_STRUCTURAL)
_VALUE_UNESCAPER = _escaper(_STRUCTURAL, backslashes=r"\\")
# Tool output and error text only need their own closing tag escaped to keep the block intact.
_RESULT_ESCAPER = _escaper(["/tool_result>"])
_ERROR_ESCAPER = _escaper(["/tool_error>"])


def _add_backslash(match: re.Match[str]) -> str:
    return "<\\" + match.group(1)


def _drop_backslash(match: re.Match[str]) -> str:
    return "<" + match.group(1)


def escape_value(value: str) -> str:
    """Write ``value`` so that no structural fragment appears in it (see the module docstring)."""
    return _VALUE_ESCAPER.sub(_add_backslash, value)


def unescape_value(written: str) -> str:
    """Invert ``escape_value``: remove one backslash from every escaped fragment."""
    return _VALUE_UNESCAPER.sub(_drop_backslash, written)


def _strip_wrapping_newlines(raw: str) -> str:
    if raw.startswith("\n"):
        raw = raw[1:]
    if raw.endswith("\n"):
        raw = raw[:-1]
    return raw


def _snippet(text: str, start: int, stop: int) -> str:
    """The offending text from ``start``, cut at ``stop`` (the end of its block) and at a bound."""
    excerpt = text[start : min(stop, start + _SNIPPET_CHARS)].strip()
    return excerpt + "…" if start + _SNIPPET_CHARS < stop else excerpt


def _read_name(text: str, position: int) -> tuple[str | None, int]:
    """Read ``NAME>`` after ``<function=`` or ``<parameter=``: (name or None if invalid, end)."""
    header = _HEADER_RE.match(text, position)
    if header is None:
        return None, position
    name = header.group(1).strip(" \t")
    return (name if _NAME_RE.fullmatch(name) else None), header.end()


def _require_name(name: str, what: str) -> None:
    if not _NAME_RE.fullmatch(name):
        raise ValueError(f"invalid {what} name {name!r}: must match {_NAME_RE.pattern}")


_NAME_RULE = f"up to {MAX_NAME_CHARS} letters, digits, '_', '.', '-', starting with a letter or '_'"
_ESCAPE_HINT = "if the text is part of the value, write it with a backslash after '<':"
# What the agent reads: what is wrong and how to fix it. Fields are filled in per error.
_MESSAGES = {
    ErrorCode.UNCLOSED_TOOL_CALL: "`<tool_call>` is not closed; end every call with "
    "`</tool_call>`.",
    ErrorCode.NESTED_TOOL_CALL: "A new `<tool_call>` starts before this one is closed with "
    "`</tool_call>`; calls cannot be nested. If the text is part of a parameter value, write it "
    "with a backslash after '<': `<\\tool_call>`.",
    ErrorCode.UNOPENED_TOOL_CALL: "`</tool_call>` has no matching `<tool_call>` before it.",
    ErrorCode.FUNCTION_OUTSIDE_TOOL_CALL: "`<function=NAME>` must be inside a `<tool_call>` ... "
    "`</tool_call>` block.",
    ErrorCode.MISSING_FUNCTION: "A `<tool_call>` must start with `<function=NAME>`.",
    ErrorCode.MULTIPLE_FUNCTIONS: "A `<tool_call>` holds exactly one `<function=NAME>`; write one "
    "`<tool_call>` block per call.",
    ErrorCode.UNCLOSED_FUNCTION: "`<function={name}>` is not closed with `</function>`.",
    ErrorCode.UNCLOSED_PARAMETER: "Parameter {name!r} is not closed: `<{tag}` comes before "
    f"`</parameter>`. End every value with `</parameter>`; {_ESCAPE_HINT} `<\\{{tag}}`.",
    ErrorCode.NESTED_TAG: "The value of parameter {name!r} contains `<{tag}`. Close the parameter "
    f"with `</parameter>` before the next tag; {_ESCAPE_HINT} `<\\{{tag}}`.",
    ErrorCode.UNEXPECTED_TAG: "`<{tag}` is out of place here: a `</parameter>` or `</function>` "
    "must close an open tag, and parameters go between `<function=NAME>` and `</function>`.",
    ErrorCode.STRAY_TEXT: "Only whitespace may appear between the tags of a tool call; put text "
    "outside `<tool_call>` ... `</tool_call>` or inside a `<parameter=KEY>` value.",
    ErrorCode.INVALID_FUNCTION_NAME: f"Write `<function=NAME>`; a name uses {_NAME_RULE}.",
    ErrorCode.INVALID_PARAMETER_NAME: f"Write `<parameter=KEY>`; a key uses {_NAME_RULE}.",
    ErrorCode.UNKNOWN_FUNCTION: "Unknown function {name!r}. Available functions: {known}.",
    ErrorCode.UNKNOWN_PARAMETER: "Function {function!r} has no parameter {name!r}. "
    "Its parameters: {known}.",
    ErrorCode.MISSING_PARAMETER: "Function {function!r} requires parameter {name!r}: add "
    "`<parameter={name}>`.",
    ErrorCode.DUPLICATE_PARAMETER: "Parameter {name!r} is given more than once; give it once.",
    ErrorCode.VALUE_TOO_LONG: "The value of parameter {name!r} has {length} characters; the "
    "limit is {limit}. Split the work into smaller steps.",
    ErrorCode.TOO_MANY_CALLS: "At most {limit} tool calls per turn; {name} and later ones were "
    "ignored.",
}


def _error(code: ErrorCode, snippet: str, call_id: str | None, **fields: object) -> ParseError:
    return ParseError(code, _MESSAGES[code].format(**fields), snippet, call_id)


@dataclass(slots=True)
class _RawParameter:
    name: str
    raw_value: str
    header: str  # '<parameter=NAME>' as written: the snippet for errors about this parameter


def _parse_block(
    text: str, tags: list[re.Match[str]], lo: int, hi: int, body: tuple[int, int], call_id: str
) -> tuple[str, list[_RawParameter]] | ParseError:
    """Check the structure of one block body; return its function and parameters, or the first
    structural error (later problems in a broken block would only be consequences of it)."""

    cursor, body_end = body

    def fail(code: ErrorCode, at: int, **fields: object) -> ParseError:
        return _error(code, _snippet(text, at, body_end), call_id, **fields)

    function_name: str | None = None
    function_open = False
    function_start = cursor
    parameters: list[_RawParameter] = []
    index = lo
    while index < hi:
        tag = tags[index]
        kind = tag.group(1)
        if text[cursor : tag.start()].strip():
            return fail(ErrorCode.STRAY_TEXT, cursor)
        if kind == _FUNCTION_OPEN:
            if function_name is not None:
                return fail(ErrorCode.MULTIPLE_FUNCTIONS, tag.start())
            function_name, cursor = _read_name(text, tag.end())
            function_start = tag.start()
            if function_name is None:
                return fail(ErrorCode.INVALID_FUNCTION_NAME, tag.start())
            function_open = True
            index += 1
        elif kind == _PARAMETER_OPEN:
            if function_name is None:
                return fail(ErrorCode.MISSING_FUNCTION, tag.start())
            if not function_open:
                return fail(ErrorCode.UNEXPECTED_TAG, tag.start(), tag=kind)
            name, value_start = _read_name(text, tag.end())
            if name is None:
                return fail(ErrorCode.INVALID_PARAMETER_NAME, tag.start())
            # Values hold no raw structural tag (they are escaped), so the next tag must close it.
            closing = tags[index + 1] if index + 1 < hi else None
            if closing is None or closing.group(1) == _FUNCTION_CLOSE:
                # Only closed blocks are parsed, so without a next tag '</tool_call>' ended it.
                found = closing.group(1) if closing else _CALL_CLOSE
                return fail(ErrorCode.UNCLOSED_PARAMETER, tag.start(), name=name, tag=found)
            if closing.group(1) != _PARAMETER_CLOSE:
                return fail(ErrorCode.NESTED_TAG, tag.start(), name=name, tag=closing.group(1))
            value = text[value_start : closing.start()]
            parameters.append(_RawParameter(name, value, text[tag.start() : value_start]))
            cursor = closing.end()
            index += 2
        elif kind == _FUNCTION_CLOSE and function_open:
            function_open = False
            cursor = tag.end()
            index += 1
        else:  # '</function>' with no open function, or '</parameter>' with no open parameter
            return fail(ErrorCode.UNEXPECTED_TAG, tag.start(), tag=kind)
    if function_name is None:
        return fail(ErrorCode.MISSING_FUNCTION, cursor)
    if text[cursor:body_end].strip():
        return fail(ErrorCode.STRAY_TEXT, cursor)
    if function_open:
        return fail(ErrorCode.UNCLOSED_FUNCTION, function_start, name=function_name)
    return function_name, parameters


def _check_call(
    function: str,
    parameters: list[_RawParameter],
    tools: Mapping[str, ToolSpec] | None,
    max_value_chars: int,
    call_id: str,
) -> tuple[ToolCall | None, list[ParseError]]:
    """Decode values and check the call against its spec; report every problem, not the first."""
    header = f"<function={function}>"
    spec = tools.get(function) if tools is not None else None
    if tools is not None and spec is None:
        known = ", ".join(sorted(tools)) or "(none)"
        return None, [
            _error(ErrorCode.UNKNOWN_FUNCTION, header, call_id, name=function, known=known)
        ]
    errors: list[ParseError] = []
    arguments: dict[str, str] = {}
    for parameter in parameters:
        name = parameter.name
        value = unescape_value(_strip_wrapping_newlines(parameter.raw_value))
        fields: dict[str, object] = {"name": name, "function": function}
        if name in arguments:
            code: ErrorCode | None = ErrorCode.DUPLICATE_PARAMETER
        elif spec is not None and name not in spec.parameters:
            code = ErrorCode.UNKNOWN_PARAMETER
            fields["known"] = ", ".join(sorted(spec.parameters)) or "(none)"
        elif len(value) > max_value_chars:
            # The message gives the length only: echoing a huge value would defeat the limit.
            code = ErrorCode.VALUE_TOO_LONG
            fields.update(length=len(value), limit=max_value_chars)
        else:
            code = None
        if code is not None:
            errors.append(_error(code, parameter.header, call_id, **fields))
        arguments.setdefault(name, value)
    for missing in sorted(spec.required - arguments.keys()) if spec is not None else ():
        errors.append(
            _error(ErrorCode.MISSING_PARAMETER, header, call_id, name=missing, function=function)
        )
    return (None if errors else ToolCall(function, arguments, call_id)), errors


# Outside a block only these tags are errors; the other structural fragments can be prose.
_STRAY_TAG_CODES = {
    _CALL_CLOSE: ErrorCode.UNOPENED_TOOL_CALL,
    _FUNCTION_OPEN: ErrorCode.FUNCTION_OUTSIDE_TOOL_CALL,
}


def parse_tool_calls(
    text: str,
    *,
    tools: Mapping[str, ToolSpec] | None = None,
    max_value_chars: int = DEFAULT_MAX_VALUE_CHARS,
    max_calls: int = DEFAULT_MAX_CALLS,
) -> ParsedTurn:
    """Split an assistant turn into prose, well-formed calls and errors; never raises on input.

    ``ParsedTurn.text`` is the prose around the blocks: each piece stripped of surrounding
    whitespace, the non-empty ones joined by newlines. Only the first ``max_calls`` blocks are
    parsed. With ``tools``, calls are checked against the specs (unknown function, unknown or
    missing parameter). A block with an error yields no call, but the valid calls of the turn are
    returned alongside the errors.
    """
    if max_calls < 0 or max_value_chars < 0:
        raise ValueError("max_calls and max_value_chars must not be negative")
    tags = list(_TAG_RE.finditer(text))
    calls: list[ToolCall] = []
    errors: list[ParseError] = []

    def report(
        code: ErrorCode, at: int, stop: int, call_id: str | None = None, **fields: object
    ) -> None:
        if len(errors) < MAX_REPORTED_ERRORS:
            errors.append(_error(code, _snippet(text, at, stop), call_id, **fields))

    prose: list[str] = []
    prose_start = 0
    block_number = 0
    index = 0
    while index < len(tags):
        tag = tags[index]
        kind = tag.group(1)
        if kind != _CALL_OPEN:
            code = _STRAY_TAG_CODES.get(kind)
            if code is not None:  # the snippet is the rest of the line, found in bounded time
                limit = tag.start() + _SNIPPET_CHARS
                line_end = text.find("\n", tag.start(), limit)
                report(code, tag.start(), limit if line_end < 0 else line_end)
            index += 1
            continue
        # The block ends at the next '</tool_call>'. A '<tool_call>' before it means this block
        # is broken; the new one starts a block of its own so that it can still be parsed.
        end = index + 1
        while end < len(tags) and tags[end].group(1) not in (_CALL_OPEN, _CALL_CLOSE):
            end += 1
        closed = end < len(tags) and tags[end].group(1) == _CALL_CLOSE
        body_end = tags[end].start() if end < len(tags) else len(text)
        call_id = f"call_{block_number}"
        prose.append(text[prose_start : tag.start()])
        if block_number >= max_calls:
            if block_number == max_calls:
                code, fields = ErrorCode.TOO_MANY_CALLS, {"limit": max_calls, "name": call_id}
                report(code, tag.start(), body_end, call_id, **fields)
        elif closed:
            structure = _parse_block(text, tags, index + 1, end, (tag.end(), body_end), call_id)
            if isinstance(structure, ParseError):
                call_errors = [structure]
            else:
                call, call_errors = _check_call(*structure, tools, max_value_chars, call_id)
                calls.extend([call] if call is not None else [])
            errors.extend(call_errors[: MAX_REPORTED_ERRORS - len(errors)])
        else:
            # A '<tool_call>' follows (nested or unclosed), or the turn ends.
            code = ErrorCode.NESTED_TOOL_CALL if end < len(tags) else ErrorCode.UNCLOSED_TOOL_CALL
            report(code, tag.start(), body_end, call_id)
        block_number += 1
        prose_start = tags[end].end() if closed else body_end
        index = end + 1 if closed else end
    prose.append(text[prose_start:])
    pieces = (piece.strip() for piece in prose)
    return ParsedTurn("\n".join(piece for piece in pieces if piece), calls, errors)


def render_tool_call(call: ToolCall) -> str:
    """Render one call; ``parse_tool_calls`` reads back the same name and arguments.

    Raises ValueError for a name the format cannot carry (this is our data, not model output).
    """
    _require_name(call.name, "function")
    parts = ["<tool_call>\n<function=", call.name, ">\n"]
    for key, value in call.arguments.items():
        _require_name(key, "parameter")
        parts += ["<parameter=", key, ">\n", escape_value(value), "\n</parameter>\n"]
    parts.append("</function>\n</tool_call>")
    return "".join(parts)


def render_tool_calls(calls: Iterable[ToolCall]) -> str:
    """Render a parallel batch: the blocks one per line, in order."""
    return "\n".join(render_tool_call(call) for call in calls)


def render_tool_result(
    call_id: str, name: str, output: str, exit_code: int = 0, truncated: bool = False
) -> str:
    """Render ``<tool_result id="…" name="…" exit_code="…" truncated="true|false">``;
    ``truncated`` says the output was cut before being sent back.

    Attribute values are double-quoted and never contain quotes: the id and name must be valid
    names. The output follows the newline rule of parameter values, and a ``</tool_result>``
    inside it is escaped like a value's closing tags.
    """
    _require_name(call_id, "call id")
    _require_name(name, "function")
    header = (
        f'<tool_result id="{call_id}" name="{name}" '
        f'exit_code="{int(exit_code)}" truncated="{"true" if truncated else "false"}">'
    )
    return f"{header}\n{_RESULT_ESCAPER.sub(_add_backslash, output)}\n</tool_result>"


def render_parse_errors(errors: Iterable[ParseError]) -> str:
    """Render errors for the agent, one ``<tool_error code="…" id="…">`` block each ("" if none).

    The block holds the message (what is wrong and how to fix it) and, after ``At:``, the start
    of the offending text as the agent wrote it.
    """
    blocks = []
    for error in errors:
        id_attribute = f' id="{error.call_id}"' if error.call_id else ""
        body = error.message + (f"\nAt:\n{error.snippet}" if error.snippet else "")
        body = _ERROR_ESCAPER.sub(_add_backslash, body)
        blocks.append(f'<tool_error code="{error.code}"{id_attribute}>\n{body}\n</tool_error>')
    return "\n".join(blocks)
