from dataclasses import dataclass

import pytest

from minitemplate import Markup, Template, TemplateRuntimeError, escape, tokenize


def render(source: str, **context: object) -> str:
    return Template(source).render(context)


@dataclass
class User:
    name: str
    _password: str = "hunter2"


def test_plain_text_passes_through_unchanged():
    assert render("Hello,\n  world! { not a tag }") == "Hello,\n  world! { not a tag }"


def test_substitutes_variables_and_keywords_override_context():
    template = Template("{{ greeting }}, {{ name }}!")
    assert template.render({"greeting": "Hi", "name": "Ann"}, name="Bob") == "Hi, Bob!"


def test_dotted_lookup_through_dicts_lists_and_attributes():
    context = {"order": {"items": [{"sku": "A1"}, {"sku": "B2"}]}, "user": User("Ann")}
    source = "{{ order.items.1.sku }}/{{ user.name }}"
    assert render(source, **context) == "B2/Ann"


@pytest.mark.parametrize(
    "source",
    ["{{ missing }}", "{{ user.email }}", "{{ items.2 }}", "{{ user._password }}"],
    ids=["missing-name", "missing-attribute", "index-out-of-range", "private-attribute"],
)
def test_missing_or_private_values_render_empty(source):
    assert render(source, user=User("Ann"), items=[1, 2]) == ""


def test_none_renders_as_empty_string_but_zero_and_false_do_not():
    assert render("[{{ a }}|{{ b }}|{{ c }}]", a=None, b=0, c=False) == "[|0|False]"


def test_output_is_html_escaped_by_default():
    assert render("{{ x }}", x="<a href=\"x\">Tom & 'Jerry'</a>") == (
        "&lt;a href=&quot;x&quot;&gt;Tom &amp; &#x27;Jerry&#x27;&lt;/a&gt;"
    )


def test_safe_filter_and_markup_values_skip_escaping():
    assert render("{{ x|safe }} {{ y }}", x="<b>hi</b>", y=Markup("<i>ok</i>")) == (
        "<b>hi</b> <i>ok</i>"
    )


def test_autoescape_can_be_disabled():
    assert Template("{{ x }}", autoescape=False).render(x="<b>") == "<b>"


def test_escape_respects_dunder_html_protocol():
    class Widget:
        def __html__(self) -> str:
            return "<widget/>"

    assert escape(Widget()) == "<widget/>"
    assert escape(5) == "5"


def test_comments_are_removed_but_surrounding_text_kept():
    assert render("a{# ignore {{ this }} #}b") == "ab"


def test_tokenize_reports_kinds_and_line_numbers():
    assert tokenize("hi\n{{ name }}\n{% if x %}{# c #}") == [
        ("text", "hi\n", 1),
        ("var", "name", 2),
        ("text", "\n", 2),
        ("block", "if x", 3),
    ]


def test_if_elif_else_picks_first_true_branch():
    source = (
        "{% if n > 10 %}big{% elif n > 5 %}medium{% elif n == 5 %}five{% else %}small{% endif %}"
    )
    results = [render(source, n=n) for n in (11, 10, 6, 5, 4)]
    assert results == ["big", "medium", "medium", "five", "small"]


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("a and b", "no"),
        ("a or b", "yes"),
        ("not b", "yes"),
        ("not a or b", "no"),
        ("a and not b", "yes"),
        ("b or a and b", "no"),
        ("(b or a) and a", "yes"),
        ("n >= 3 and n <= 3", "yes"),
        ("n != 3", "no"),
        ("n < 3", "no"),
        ("name == 'ann'", "yes"),
        ("'x' in tags", "yes"),
        ("'z' not in tags", "yes"),
        ("'x' in missing", "no"),
        ("'x' not in missing", "yes"),
        ("none == missing", "yes"),
        ("true and not false", "yes"),
    ],
)
def test_boolean_logic_and_comparisons(expression, expected):
    source = "{% if " + expression + " %}yes{% else %}no{% endif %}"
    assert render(source, a=True, b=False, n=3, name="ann", tags=["x", "y"]) == expected


def test_or_returns_first_truthy_operand_in_output():
    assert render("{{ nickname or name }}|{{ a and b }}", name="Ann", a=1, b=0) == "Ann|0"


def test_numbers_and_escaped_quotes_in_literals():
    assert render("{{ 'it\\'s' }} {% if x == 2.5 %}ok{% endif %}", x=2.5) == "it&#x27;s ok"


def test_for_loop_exposes_loop_variables():
    source = (
        "{% for x in items %}"
        "{{ loop.index }}/{{ loop.index0 }}/{{ loop.length }}"
        "{% if loop.first %}F{% endif %}{% if loop.last %}L{% endif %}={{ x }};"
        "{% endfor %}"
    )
    assert render(source, items=["a", "b", "c"]) == "1/0/3F=a;2/1/3=b;3/2/3L=c;"


def test_single_item_loop_is_both_first_and_last():
    source = "{% for x in items %}{{ loop.first }}-{{ loop.last }}{% endfor %}"
    assert render(source, items=["only"]) == "True-True"


def test_for_else_renders_for_empty_or_missing_iterables():
    source = "{% for x in items %}{{ x }}{% else %}empty{% endfor %}"
    assert [render(source, items=[]), render(source), render(source, items=[1])] == [
        "empty",
        "empty",
        "1",
    ]


def test_nested_loops_see_their_own_loop_and_outer_variables():
    source = (
        "{% for row in rows %}{% for cell in row %}"
        "{{ row.0 }}{{ loop.index }}{{ cell }}{% if not loop.last %},{% endif %}"
        "{% endfor %};{% endfor %}"
    )
    assert render(source, rows=[["a", "b"], ["c"]]) == "a1a,a2b;c1c;"


def test_loop_variable_does_not_leak_after_loop():
    assert render("{% for x in items %}{% endfor %}[{{ x }}]", items=[1, 2]) == "[]"
    assert render("{% for x in items %}{% endfor %}[{{ x }}]", items=[1], x="outer") == "[outer]"


def test_iterating_a_non_iterable_reports_line():
    with pytest.raises(TemplateRuntimeError, match=r"^line 2: cannot iterate over int$"):
        render("\n{% for x in n %}{% endfor %}", n=5)


def test_ordering_comparison_of_incompatible_types_fails_with_line():
    with pytest.raises(TemplateRuntimeError, match=r"^line 3: cannot apply '<' to str and int$"):
        render("\n\n{% if name < 3 %}x{% endif %}", name="ann")
