import pytest

from minitemplate import Template, TemplateError, TemplateSyntaxError


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("a\n{% if x %}\nb", r"^line 2: unclosed 'if' block; expected '\{% endif %\}'$"),
        ("{% for x in y %}\n\n", r"^line 1: unclosed 'for' block; expected '\{% endfor %\}'$"),
        (
            "{% if a %}\n{% for x in y %}\n{% endif %}",
            r"^line 3: unexpected 'endif' tag in 'for' block opened on line 2$",
        ),
    ],
    ids=["if", "for", "for-closed-by-endif"],
)
def test_unclosed_blocks_report_the_opening_line(source, message):
    with pytest.raises(TemplateSyntaxError, match=message):
        Template(source)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("x\ny {{ name", r"^line 2: unclosed '\{\{' tag$"),
        ("\n\n{% if x", r"^line 3: unclosed '\{%' tag$"),
        ("{# never closed", r"^line 1: unclosed '\{#' tag$"),
    ],
    ids=["variable", "block", "comment"],
)
def test_unclosed_tags_report_their_line(source, message):
    with pytest.raises(TemplateSyntaxError, match=message):
        Template(source)


def test_line_numbers_count_newlines_inside_earlier_tags():
    with pytest.raises(TemplateSyntaxError, match=r"^line 4: unknown tag 'include'$"):
        Template("{{\nx\n}}\n{% include 'x' %}")


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("{% endif %}", r"^line 1: unexpected 'endif' tag$"),
        ("ok\n{% else %}", r"^line 2: unexpected 'else' tag$"),
        ("{% for x in y %}{% elif z %}{% endfor %}", r"unexpected 'elif' tag in 'for' block"),
        (
            "{% if a %}\n{% endfor %}",
            r"^line 2: unexpected 'endfor' tag in 'if' block opened on line 1$",
        ),
        ("{% %}", r"unknown tag ''"),
    ],
    ids=["stray-endif", "stray-else", "elif-in-for", "mismatched-end", "empty-tag"],
)
def test_misplaced_tags_are_rejected(source, message):
    with pytest.raises(TemplateSyntaxError, match=message):
        Template(source)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("{% if a %}{% else %}{% elif b %}{% endif %}", r"^line 1: 'elif' cannot follow 'else'$"),
        ("{% if a %}{% else %}\n{% else %}{% endif %}", r"^line 2: 'else' cannot follow 'else'$"),
        ("{% for x in y %}{% else %}{% else %}{% endfor %}", "'else' cannot follow 'else'"),
        ("{% if a %}{% else b %}{% endif %}", "'else' takes no arguments"),
        ("{% if a %}{% endif a %}", "'endif' takes no arguments"),
    ],
    ids=["elif-after-else", "double-else", "double-else-in-for", "else-args", "endif-args"],
)
def test_else_structure_is_validated(source, message):
    with pytest.raises(TemplateSyntaxError, match=message):
        Template(source)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("{{ }}", "expected an expression"),
        ("{% if %}{% endif %}", "expected an expression"),
        ("{{ a == }}", "unexpected end of expression"),
        ("{{ a b }}", "unexpected 'b'"),
        ("{{ a not b }}", "unexpected 'not'"),
        ("{{ (a or b }}", "unexpected end of expression"),
        ("{{ a and }}", "unexpected end of expression"),
        ("{{ 'open }}", 'unexpected character "\'" in expression'),
        ("{{ a + b }}", "unexpected character '\\+' in expression"),
    ],
    ids=[
        "empty-output",
        "empty-if",
        "dangling-op",
        "two-names",
        "not-without-in",
        "unbalanced",
        "dangling-and",
        "unterminated-string",
        "bad-character",
    ],
)
def test_malformed_expressions_are_syntax_errors(source, message):
    with pytest.raises(TemplateSyntaxError, match=message):
        Template(source)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("{% for in items %}{% endfor %}", "expected 'for <name> in <expression>'"),
        ("{% for x of items %}{% endfor %}", "expected 'for <name> in <expression>'"),
        ("{% for loop in items %}{% endfor %}", "'loop' is reserved"),
    ],
    ids=["no-name", "wrong-keyword", "reserved-name"],
)
def test_malformed_for_tags(source, message):
    with pytest.raises(TemplateSyntaxError, match=message):
        Template(source)


def test_errors_expose_message_and_line_separately():
    with pytest.raises(TemplateError) as info:
        Template("\n\n{% frobnicate %}")
    assert (info.value.message, info.value.lineno) == ("unknown tag 'frobnicate'", 3)
