import pytest

from minitemplate import Template, TemplateRuntimeError, TemplateSyntaxError


def render(source: str, **context: object) -> str:
    return Template(source).render(context)


def test_upper_and_lower_chain_left_to_right():
    assert render("{{ name|upper }} {{ name|lower }} {{ name|upper|lower }}", name="Ann") == (
        "ANN ann ann"
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, "n/a"), ("", "n/a"), (0, "0"), ("x", "x")],
    ids=["none", "empty-string", "zero-kept", "value-kept"],
)
def test_default_replaces_only_missing_none_or_empty(value, expected):
    assert render("{{ v|default:'n/a' }}", v=value) == expected


def test_default_applies_to_missing_variable():
    assert render("{{ nope | default:'anon' | upper }}") == "ANON"


def test_join_uses_separator_argument_or_comma_default():
    assert render("{{ xs|join:' - ' }}|{{ xs|join }}", xs=[1, "b", None]) == "1 - b - |1, b, "


def test_join_escapes_items_and_separator_unless_marked_safe():
    assert render("{{ xs|join:'<br>' }}", xs=["<a>", "b"]) == "&lt;a&gt;&lt;br&gt;b"
    assert render("{{ xs|join:'<br>'|safe }}", xs=["a", "b"]) == "a<br>b"


def test_join_rejects_strings():
    with pytest.raises(TemplateRuntimeError, match=r"^line 1: join expects a list, got str$"):
        render("{{ s|join }}", s="abc")


def test_length_of_lists_strings_dicts_and_missing():
    source = "{{ xs|length }} {{ s|length }} {{ d|length }} {{ nope|length }}"
    assert render(source, xs=[1, 2, 3], s="hello", d={"a": 1}) == "3 5 1 0"


def test_length_can_be_compared_in_conditions():
    source = "{% if xs|length > 2 %}many{% else %}few{% endif %}"
    assert [render(source, xs=[1, 2]), render(source, xs=[1, 2, 3])] == ["few", "many"]


def test_length_of_number_is_a_runtime_error():
    with pytest.raises(TemplateRuntimeError, match="length expects a sized value, got int"):
        render("{{ n|length }}", n=3)


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        ("Hello, world!", 10, "Hello, ..."),
        ("0123456789", 10, "0123456789"),
        ("0123456789X", 10, "0123456..."),
        ("abcdef", 4, "a..."),
        ("abcdef", 3, "abc"),
        ("abcdef", 0, ""),
    ],
    ids=["longer", "exactly-limit", "one-over", "tiny-limit", "no-room-for-ellipsis", "zero"],
)
def test_truncate_counts_the_ellipsis_toward_the_limit(text, limit, expected):
    assert render("{{ t|truncate:" + str(limit) + " }}", t=text) == expected


def test_truncate_rejects_negative_length():
    with pytest.raises(TemplateRuntimeError, match="truncate length must be a non-negative"):
        render("{{ t|truncate:-1 }}", t="abc")


def test_unknown_filter_is_a_syntax_error_with_line():
    with pytest.raises(TemplateSyntaxError, match=r"^line 2: unknown filter 'shout'$"):
        Template("ok\n{{ x|shout }}")


@pytest.mark.parametrize(
    ("source", "count"),
    [("{{ x|truncate }}", 0), ("{{ x|upper:1 }}", 1), ("{{ x|join:',', 'y' }}", 2)],
    ids=["missing-argument", "unexpected-argument", "too-many-arguments"],
)
def test_filter_arity_is_checked_at_compile_time(source, count):
    with pytest.raises(TemplateSyntaxError, match=rf"does not take {count} argument\(s\)"):
        Template(source)


def test_missing_filter_name_after_pipe():
    with pytest.raises(TemplateSyntaxError, match=r"expected a filter name after '\|'"):
        Template("{{ x| }}")
