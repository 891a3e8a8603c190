"""Tests of the XML tool-call codec: malformed turns, real code values, round trips, big inputs."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from etude.common.toolcalls import (
    MAX_REPORTED_ERRORS,
    ErrorCode,
    ParsedTurn,
    ParseError,
    ToolCall,
    ToolSpec,
    escape_value,
    parse_tool_calls,
    render_parse_errors,
    render_tool_call,
    render_tool_calls,
    render_tool_result,
    tools_by_name,
    unescape_value,
)

TOOLS = tools_by_name(
    [
        ToolSpec("execute_bash", required={"command"}, optional={"timeout"}),
        ToolSpec(
            "str_replace_editor",
            required=["command", "path"],
            optional=["old_str", "new_str", "file_text"],
        ),
    ]
)
# A well-formed sibling for the malformed cases: it must survive next to them.
GOOD = (
    "<tool_call>\n<function=execute_bash>\n<parameter=command>\nls\n</parameter>\n"
    "</function>\n</tool_call>"
)
STRUCTURAL_TAGS = (
    "<tool_call>",
    "</tool_call>",
    "<function=",
    "</function>",
    "<parameter=",
    "</parameter>",
)


def good_call(call_id: str) -> ToolCall:
    return ToolCall("execute_bash", {"command": "ls"}, call_id)


def codes(turn: ParsedTurn) -> list[str]:
    return [error.code for error in turn.errors]


def only_error(turn: ParsedTurn) -> ParseError:
    assert len(turn.errors) == 1, turn.errors
    return turn.errors[0]


# --- well-formed turns ----------------------------------------------------------------------


def test_render_writes_the_documented_layout() -> None:
    call = ToolCall("str_replace_editor", {"command": "view", "path": "/repo/a.py"})
    assert render_tool_call(call) == (
        "<tool_call>\n<function=str_replace_editor>\n"
        "<parameter=command>\nview\n</parameter>\n"
        "<parameter=path>\n/repo/a.py\n</parameter>\n"
        "</function>\n</tool_call>"
    )


def test_call_without_parameters_round_trips() -> None:
    rendered = render_tool_call(ToolCall("finish", {}))
    assert rendered == "<tool_call>\n<function=finish>\n</function>\n</tool_call>"
    assert parse_tool_calls(rendered) == ParsedTurn("", [ToolCall("finish", {}, "call_0")], [])


def test_several_calls_keep_order_ids_and_prose() -> None:
    text = (
        "I will look at the tree first.\n"
        + GOOD
        + "\n"
        + render_tool_call(ToolCall("str_replace_editor", {"command": "view", "path": "/a.py"}))
        + "\nThen I wait.\n"
        + GOOD.replace("ls", "pwd")
    )
    turn = parse_tool_calls(text, tools=TOOLS)
    assert turn.ok
    assert turn.text == "I will look at the tree first.\nThen I wait."
    assert turn.calls == [
        good_call("call_0"),
        ToolCall("str_replace_editor", {"command": "view", "path": "/a.py"}, "call_1"),
        ToolCall("execute_bash", {"command": "pwd"}, "call_2"),
    ]


def test_inline_values_and_model_style_whitespace() -> None:
    text = (
        "<tool_call><function= execute_bash ><parameter=command>git status</parameter>"
        "<parameter=timeout>30</parameter></function></tool_call>"
    )
    turn = parse_tool_calls(text, tools=TOOLS)
    assert turn.errors == []
    assert turn.calls == [
        ToolCall("execute_bash", {"command": "git status", "timeout": "30"}, "call_0")
    ]


PYTHON_SOURCE = """\
def render(items: list[str]) -> str:
    if len(items) < 3 and items[0] > "a":
        return "<div>" + "&&".join(items) + "</div>"
    return f"{items!r} </parameter> <\\/parameter> </function> </tool_call>"
"""


@pytest.mark.parametrize(
    "value",
    [
        PYTHON_SOURCE,
        "make build && ./run --flag='<x>' 2>&1 | tee log",
        '<html><body><div class="a">&amp; &lt;</div></body></html>',
        "x = '</parameter>'",
        "already escaped: <\\/parameter> and <\\\\/function> and <\\tool_call>",
        "\n\nleading and trailing blank lines\n\n",
        "\n",
        "",
        "   indented\n\ttabbed\n",
        "unicode: héllo ✓ 日本語 🚀 \u2028 \x00",
        "trailing backslash \\",
        "<parameter=path>/etc/passwd</parameter>",
    ],
)
def test_code_values_round_trip_exactly(value: str) -> None:
    call = ToolCall("str_replace_editor", {"command": "create", "path": "/a", "file_text": value})
    turn = parse_tool_calls(render_tool_call(call), tools=TOOLS)
    assert turn.errors == []
    assert turn.calls == [ToolCall(call.name, call.arguments, "call_0")]


def test_closing_tag_in_value_is_written_with_the_escape_rule() -> None:
    rendered = render_tool_call(ToolCall("execute_bash", {"command": "echo '</parameter>'"}))
    assert "<parameter=command>\necho '<\\/parameter>'\n</parameter>" in rendered


def test_hand_written_escapes_are_decoded() -> None:
    text = (
        "<tool_call>\n<function=execute_bash>\n<parameter=command>\n"
        "printf '<\\/parameter> <\\\\/parameter> <\\/div> <\\function=x>'\n"
        "</parameter>\n</function>\n</tool_call>"
    )
    turn = parse_tool_calls(text)
    assert turn.calls[0].arguments == {
        "command": "printf '</parameter> <\\/parameter> <\\/div> <function=x>'"
    }


def test_code_that_is_not_a_structural_tag_passes_verbatim() -> None:
    value = "if a<b && c>d: print('</div>', '<parameter', '<function', '</ function>')"
    text = GOOD.replace("\nls\n", f"\n{value}\n")
    assert parse_tool_calls(text).calls == [ToolCall("execute_bash", {"command": value}, "call_0")]


def test_exactly_one_newline_is_stripped_on_each_side() -> None:
    text = GOOD.replace("\nls\n", "\n\n\nbody\n\n")
    assert parse_tool_calls(text).calls[0].arguments == {"command": "\n\nbody\n"}


@pytest.mark.parametrize(
    ("value", "escaped"),
    [
        ("</parameter>", "<\\/parameter>"),
        ("<\\/parameter>", "<\\\\/parameter>"),
        ("<\\\\\\/function>", "<\\\\\\\\/function>"),
        ("<tool_call></tool_call>", "<\\tool_call><\\/tool_call>"),
        ("<function=f><parameter=p>", "<\\function=f><\\parameter=p>"),
        ("</div> <\\/script> < /parameter>", "</div> <\\/script> < /parameter>"),
        ("<<</parameter>>", "<<<\\/parameter>>"),
    ],
)
def test_escape_examples(value: str, escaped: str) -> None:
    assert escape_value(value) == escaped
    assert unescape_value(escaped) == value


# --- malformed turns: one code each, valid siblings survive ---------------------------------


def test_unclosed_tool_call_at_end_of_turn() -> None:
    turn = parse_tool_calls(
        GOOD + "\n<tool_call>\n<function=execute_bash>\n<parameter=command>\nls"
    )
    error = only_error(turn)
    assert (error.code, error.call_id) == (ErrorCode.UNCLOSED_TOOL_CALL, "call_1")
    assert error.snippet == "<tool_call>\n<function=execute_bash>\n<parameter=command>\nls"
    assert turn.calls == [good_call("call_0")]
    assert turn.text == ""


def test_tool_call_opened_inside_a_tool_call() -> None:
    turn = parse_tool_calls("<tool_call>\n<function=execute_bash>\n" + GOOD)
    assert [(e.code, e.call_id) for e in turn.errors] == [(ErrorCode.NESTED_TOOL_CALL, "call_0")]
    assert turn.calls == [good_call("call_1")]


def test_truly_nested_tool_call_reports_the_outer_block_and_the_stray_close() -> None:
    turn = parse_tool_calls("<tool_call><function=execute_bash>" + GOOD + "</function></tool_call>")
    assert codes(turn) == [ErrorCode.NESTED_TOOL_CALL, ErrorCode.UNOPENED_TOOL_CALL]
    assert turn.calls == [good_call("call_1")]


def test_closing_tool_call_without_opening() -> None:
    turn = parse_tool_calls("done </tool_call>\n" + GOOD)
    error = only_error(turn)
    assert (error.code, error.call_id, error.snippet) == (
        ErrorCode.UNOPENED_TOOL_CALL,
        None,
        "</tool_call>",
    )
    assert turn.calls == [good_call("call_0")]
    assert turn.text == "done </tool_call>"


def test_function_outside_tool_call() -> None:
    bare = "<function=execute_bash>\n<parameter=command>\npwd\n</parameter>\n</function>\n"
    turn = parse_tool_calls(bare + GOOD)
    assert codes(turn) == [ErrorCode.FUNCTION_OUTSIDE_TOOL_CALL]
    assert turn.errors[0].snippet == "<function=execute_bash>"
    assert turn.calls == [good_call("call_0")]


@pytest.mark.parametrize(
    "block",
    [
        "<tool_call>\n</tool_call>",
        "<tool_call>\n<parameter=command>ls</parameter>\n</tool_call>",
        "<tool_call>\n</function>\n</tool_call>",
    ],
)
def test_missing_function(block: str) -> None:
    turn = parse_tool_calls(block + "\n" + GOOD)
    expected = ErrorCode.UNEXPECTED_TAG if "</function>" in block else ErrorCode.MISSING_FUNCTION
    assert [(e.code, e.call_id) for e in turn.errors] == [(expected, "call_0")]
    assert turn.calls == [good_call("call_1")]


@pytest.mark.parametrize(
    "body",
    [
        "<function=a>\n</function>\n<function=b>\n</function>",
        "<function=a>\n<function=b>\n</function>",
    ],
)
def test_multiple_functions_in_one_tool_call(body: str) -> None:
    turn = parse_tool_calls(f"{GOOD}\n<tool_call>\n{body}\n</tool_call>")
    assert [(e.code, e.call_id) for e in turn.errors] == [(ErrorCode.MULTIPLE_FUNCTIONS, "call_1")]
    assert turn.calls == [good_call("call_0")]


def test_unclosed_function() -> None:
    turn = parse_tool_calls(
        "<tool_call>\n<function=execute_bash>\n<parameter=command>ls</parameter>\n</tool_call>\n"
        + GOOD
    )
    error = only_error(turn)
    assert error.code == ErrorCode.UNCLOSED_FUNCTION
    assert error.message == "`<function=execute_bash>` is not closed with `</function>`."
    assert turn.calls == [good_call("call_1")]


@pytest.mark.parametrize(
    "body",
    [
        "<function=execute_bash>\n<parameter=command>\nls\n</function>",
        "<function=execute_bash>\n<parameter=command>\nls\n",
    ],
)
def test_unclosed_parameter(body: str) -> None:
    turn = parse_tool_calls(f"<tool_call>\n{body}\n</tool_call>\n{GOOD}")
    error = only_error(turn)
    assert (error.code, error.call_id) == (ErrorCode.UNCLOSED_PARAMETER, "call_0")
    assert error.snippet == body.split("\n", 1)[1].rstrip()
    found = "/function>" if body.endswith("</function>") else "/tool_call>"
    assert error.message == (
        f"Parameter 'command' is not closed: `<{found}` comes before `</parameter>`. End every "
        "value with `</parameter>`; if the text is part of the value, write it with a backslash "
        f"after '<': `<\\{found}`."
    )
    assert turn.calls == [good_call("call_1")]


@pytest.mark.parametrize(
    ("value", "tag"),
    [
        ("ls\n<parameter=timeout>\n30\n", "parameter="),
        ("print('<function=x>')", "function="),
    ],
)
def test_opening_tag_inside_a_value(value: str, tag: str) -> None:
    text = GOOD.replace("\nls\n", f"\n{value}\n")
    turn = parse_tool_calls(GOOD + text + GOOD)
    error = only_error(turn)
    assert (error.code, error.call_id) == (ErrorCode.NESTED_TAG, "call_1")
    assert f"`<{tag}`" in error.message
    assert f"`<\\{tag}`" in error.message
    assert turn.calls == [good_call("call_0"), good_call("call_2")]


@pytest.mark.parametrize(
    "body",
    [
        "<function=execute_bash>\n</parameter>\n</function>",
        "<function=execute_bash>\n</function>\n</function>",
        "<function=execute_bash>\n</function>\n<parameter=command>ls</parameter>",
    ],
)
def test_tag_out_of_place(body: str) -> None:
    turn = parse_tool_calls(f"<tool_call>\n{body}\n</tool_call>{GOOD}")
    assert codes(turn) == [ErrorCode.UNEXPECTED_TAG]
    assert turn.calls == [good_call("call_1")]


@pytest.mark.parametrize(
    "body",
    [
        "I run ls:\n<function=execute_bash>\n<parameter=command>ls</parameter>\n</function>",
        "<function=execute_bash>\nnote\n<parameter=command>ls</parameter>\n</function>",
        "<function=execute_bash>\n<parameter=command>ls</parameter> x\n</function>",
        "<function=execute_bash>\n<parameter=command>ls</parameter>\n</function> done",
    ],
)
def test_stray_text_between_tags(body: str) -> None:
    turn = parse_tool_calls(f"{GOOD}<tool_call>\n{body}\n</tool_call>")
    assert [(e.code, e.call_id) for e in turn.errors] == [(ErrorCode.STRAY_TEXT, "call_1")]
    assert turn.calls == [good_call("call_0")]


@pytest.mark.parametrize(
    "header", ["<function=>", "<function=9lives>", "<function=two words>", "<function=open\n"]
)
def test_invalid_function_name(header: str) -> None:
    turn = parse_tool_calls(f"<tool_call>\n{header}\n</function>\n</tool_call>\n{GOOD}")
    error = only_error(turn)
    assert (error.code, error.call_id) == (ErrorCode.INVALID_FUNCTION_NAME, "call_0")
    assert error.snippet.startswith(header.strip())
    assert turn.calls == [good_call("call_1")]


@pytest.mark.parametrize(
    "header", ["<parameter=>", "<parameter=a/b>", "<parameter=" + "k" * 129 + ">"]
)
def test_invalid_parameter_name(header: str) -> None:
    text = f"<tool_call>\n<function=f>\n{header}x</parameter>\n</function>\n</tool_call>"
    turn = parse_tool_calls(text + GOOD)
    assert codes(turn) == [ErrorCode.INVALID_PARAMETER_NAME]
    assert turn.calls == [good_call("call_1")]


def test_unknown_function() -> None:
    turn = parse_tool_calls(GOOD.replace("execute_bash", "rm_rf") + GOOD, tools=TOOLS)
    error = only_error(turn)
    assert error == ParseError(
        ErrorCode.UNKNOWN_FUNCTION,
        "Unknown function 'rm_rf'. Available functions: execute_bash, str_replace_editor.",
        "<function=rm_rf>",
        "call_0",
    )
    assert turn.calls == [good_call("call_1")]


def test_unknown_and_missing_parameters_are_all_reported() -> None:
    text = (
        "<tool_call>\n<function=str_replace_editor>\n<parameter=pth>\n/a\n</parameter>\n"
        "<parameter=mode>\nx\n</parameter>\n</function>\n</tool_call>"
    )
    turn = parse_tool_calls(GOOD + text, tools=TOOLS)
    assert [(e.code, e.snippet) for e in turn.errors] == [
        (ErrorCode.UNKNOWN_PARAMETER, "<parameter=pth>"),
        (ErrorCode.UNKNOWN_PARAMETER, "<parameter=mode>"),
        (ErrorCode.MISSING_PARAMETER, "<function=str_replace_editor>"),
        (ErrorCode.MISSING_PARAMETER, "<function=str_replace_editor>"),
    ]
    assert turn.errors[0].message == (
        "Function 'str_replace_editor' has no parameter 'pth'. "
        "Its parameters: command, file_text, new_str, old_str, path."
    )
    assert turn.errors[2].message == (
        "Function 'str_replace_editor' requires parameter 'command': add `<parameter=command>`."
    )
    assert {e.call_id for e in turn.errors} == {"call_1"}
    assert turn.calls == [good_call("call_0")]


def test_duplicate_parameter() -> None:
    text = (
        "<tool_call>\n<function=execute_bash>\n<parameter=command>\nls\n</parameter>\n"
        "<parameter=command>\npwd\n</parameter>\n</function>\n</tool_call>"
    )
    turn = parse_tool_calls(text + GOOD, tools=TOOLS)
    assert codes(turn) == [ErrorCode.DUPLICATE_PARAMETER]
    assert turn.calls == [good_call("call_1")]


def test_value_too_long_does_not_echo_the_value() -> None:
    secret = "SECRET" * 3
    long_call = render_tool_call(ToolCall("execute_bash", {"command": secret}))
    exact = render_tool_call(ToolCall("execute_bash", {"command": "x" * 17}))
    turn = parse_tool_calls(long_call + exact, max_value_chars=17)
    error = only_error(turn)
    assert error == ParseError(
        ErrorCode.VALUE_TOO_LONG,
        "The value of parameter 'command' has 18 characters; the limit is 17. "
        "Split the work into smaller steps.",
        "<parameter=command>",
        "call_0",
    )
    assert "SECRET" not in render_parse_errors(turn.errors)
    assert turn.calls == [ToolCall("execute_bash", {"command": "x" * 17}, "call_1")]


def test_too_many_calls_keeps_the_first_ones_and_reports_once() -> None:
    turn = parse_tool_calls("\n".join([GOOD] * 5) + "\nbye", max_calls=3)
    assert turn.calls == [good_call("call_0"), good_call("call_1"), good_call("call_2")]
    error = only_error(turn)
    assert (error.code, error.call_id) == (ErrorCode.TOO_MANY_CALLS, "call_3")
    assert error.message == "At most 3 tool calls per turn; call_3 and later ones were ignored."
    assert turn.text == "bye"


def test_errors_are_capped() -> None:
    turn = parse_tool_calls("</tool_call>" * 1000 + GOOD)
    assert len(turn.errors) == MAX_REPORTED_ERRORS
    assert turn.calls == [good_call("call_0")]


# --- results and error rendering ------------------------------------------------------------


def test_render_tool_result() -> None:
    rendered = render_tool_result("call_1", "execute_bash", "a.py\nb.py", 2, truncated=True)
    assert rendered == (
        '<tool_result id="call_1" name="execute_bash" exit_code="2" truncated="true">\n'
        "a.py\nb.py\n</tool_result>"
    )


def test_tool_result_escapes_its_closing_tag_only() -> None:
    output = "</tool_result> <\\/tool_result> </parameter>"
    rendered = render_tool_result("call_0", "execute_bash", output)
    assert rendered == (
        '<tool_result id="call_0" name="execute_bash" exit_code="0" truncated="false">\n'
        "<\\/tool_result> <\\\\/tool_result> </parameter>\n</tool_result>"
    )


@pytest.mark.parametrize(("call_id", "name"), [('call"0', "execute_bash"), ("call_0", "bad name")])
def test_tool_result_rejects_names_that_would_break_the_attributes(call_id, name) -> None:
    with pytest.raises(ValueError):
        render_tool_result(call_id, name, "")


def test_render_tool_call_rejects_invalid_names() -> None:
    with pytest.raises(ValueError):
        render_tool_call(ToolCall("execute_bash", {"a b": "x"}))


def test_render_parse_errors() -> None:
    turn = parse_tool_calls("</tool_call>\n<tool_call>\n<function=f>\n</tool_call>")
    assert render_parse_errors(turn.errors) == (
        '<tool_error code="unopened_tool_call">\n'
        "`</tool_call>` has no matching `<tool_call>` before it.\nAt:\n</tool_call>\n"
        "</tool_error>\n"
        '<tool_error code="unclosed_function" id="call_0">\n'
        "`<function=f>` is not closed with `</function>`.\nAt:\n<function=f>\n"
        "</tool_error>"
    )
    assert render_parse_errors([]) == ""


def test_error_block_escapes_its_closing_tag() -> None:
    error = ParseError(ErrorCode.STRAY_TEXT, "m", "x </tool_error> y", "call_0")
    assert render_parse_errors([error]) == (
        '<tool_error code="stray_text" id="call_0">\nm\nAt:\nx <\\/tool_error> y\n</tool_error>'
    )


# --- properties -----------------------------------------------------------------------------

FRAGMENTS = [
    *STRUCTURAL_TAGS,
    "<\\/parameter>",
    "<\\\\/parameter>",
    "<\\tool_call>",
    "<\\function=",
    "<\\",
    "<",
    "/",
    ">",
    "\\",
    "=",
    "\n",
    " ",
    "x",
    "&&",
    "parameter>",
]
fragment_text = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=4), max_size=30).map("".join)
values = st.text() | fragment_text
names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.\-]{0,20}", fullmatch=True)
calls_strategy = st.lists(
    st.builds(ToolCall, names, st.dictionaries(names, values, max_size=4)), max_size=5
)


@given(values)
def test_escape_is_reversible_and_leaves_no_structural_tag(value: str) -> None:
    escaped = escape_value(value)
    assert unescape_value(escaped) == value
    assert not any(tag in escaped for tag in STRUCTURAL_TAGS)


@given(calls_strategy)
def test_render_then_parse_round_trips(calls: list[ToolCall]) -> None:
    parameters: dict[str, set[str]] = {}
    for call in calls:
        parameters.setdefault(call.name, set()).update(call.arguments)
    specs = {name: ToolSpec(name, optional=keys) for name, keys in parameters.items()}
    turn = parse_tool_calls(render_tool_calls(calls), tools=specs, max_value_chars=10**6)
    assert turn.errors == []
    assert turn.text == ""
    expected = [ToolCall(c.name, c.arguments, f"call_{i}") for i, c in enumerate(calls)]
    assert turn.calls == expected


@given(st.lists(st.text(alphabet=st.characters(blacklist_characters="<")), min_size=2, max_size=4))
def test_prose_between_calls_is_kept(pieces: list[str]) -> None:
    text = GOOD.join(pieces)
    turn = parse_tool_calls(text)
    assert turn.errors == []
    assert turn.calls == [good_call(f"call_{i}") for i in range(len(pieces) - 1)]
    assert turn.text == "\n".join(p.strip() for p in pieces if p.strip())


@settings(max_examples=300)
@given(
    st.lists(
        fragment_text | st.sampled_from([GOOD, "<tool_call>\n<function=f>\n"]), max_size=8
    ).map("".join)
    | st.text(),
    st.integers(min_value=0, max_value=4),
    st.integers(min_value=0, max_value=20),
)
def test_parse_never_raises_and_its_calls_round_trip(
    text: str, max_calls: int, max_value_chars: int
) -> None:
    for tools in (None, TOOLS):
        turn = parse_tool_calls(
            text, tools=tools, max_calls=max_calls, max_value_chars=max_value_chars
        )
        assert all(error.code in set(ErrorCode) for error in turn.errors)
        assert len(turn.errors) <= MAX_REPORTED_ERRORS
        ids = [int(call.id.removeprefix("call_")) for call in turn.calls]
        assert ids == sorted(set(ids)) and all(i < max_calls for i in ids)
        render_parse_errors(turn.errors)
        again = parse_tool_calls(render_tool_calls(turn.calls), tools=tools)
        assert [(c.name, c.arguments) for c in again.calls] == [
            (c.name, c.arguments) for c in turn.calls
        ]


# --- big inputs: linear scanning, no recursion ----------------------------------------------

MEGABYTE = 1_000_000


@pytest.mark.parametrize(
    ("text", "expected_codes"),
    [
        (
            "<tool_call>\n<function=f>\n<parameter=v>\n" + "a" * MEGABYTE,
            [ErrorCode.UNCLOSED_TOOL_CALL],
        ),
        ("<tool_call>\n<function=f>\n<parameter=" + "a" * MEGABYTE, [ErrorCode.UNCLOSED_TOOL_CALL]),
        (
            "<tool_call>\n<function=f>\n<parameter=" + "a" * MEGABYTE + "</tool_call>",
            [ErrorCode.INVALID_PARAMETER_NAME],
        ),
        ("<" * MEGABYTE, []),
        ("</tool_call>" * (MEGABYTE // 12), [ErrorCode.UNOPENED_TOOL_CALL] * MAX_REPORTED_ERRORS),
        ("<parameter=" * (MEGABYTE // 11), []),
        ("<" + "\\" * MEGABYTE + "x", []),
        ("<tool_call>" * (MEGABYTE // 11), [ErrorCode.NESTED_TOOL_CALL] * MAX_REPORTED_ERRORS),
        (
            "<tool_call><function=f><parameter=v>" * (MEGABYTE // 36),
            [ErrorCode.NESTED_TOOL_CALL] * MAX_REPORTED_ERRORS,
        ),
        (
            "<tool_call>\n<function=f>\n" + "<parameter=v>x" * (MEGABYTE // 14) + "</tool_call>",
            [ErrorCode.NESTED_TAG],
        ),
    ],
    ids=[
        "unclosed-value",
        "unclosed-header",
        "long-header",
        "angles",
        "stray-closes",
        "prose-tags",
        "backslashes",
        "open-tags",
        "deep-nesting",
        "many-parameters",
    ],
)
def test_megabyte_inputs_parse_quickly(text: str, expected_codes: list[str]) -> None:
    started = time.perf_counter()
    turn = parse_tool_calls(text, max_calls=10**6)
    elapsed = time.perf_counter() - started
    assert codes(turn) == expected_codes
    assert turn.calls == []
    assert elapsed < 5.0


def test_megabyte_value_round_trips() -> None:
    value = ("</parameter>\\<\\/function>&&<x>\n" * (MEGABYTE // 30))[:MEGABYTE]
    call = ToolCall("str_replace_editor", {"command": "create", "path": "/a", "file_text": value})
    started = time.perf_counter()
    turn = parse_tool_calls(render_tool_call(call), tools=TOOLS, max_value_chars=MEGABYTE)
    assert time.perf_counter() - started < 5.0
    assert turn.calls == [ToolCall(call.name, call.arguments, "call_0")]


@pytest.mark.parametrize("limits", [{"max_calls": -1}, {"max_value_chars": -1}])
def test_negative_limits_are_a_caller_error(limits: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        parse_tool_calls(GOOD, **limits)
