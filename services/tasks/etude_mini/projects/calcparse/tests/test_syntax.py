import re

import pytest

from calcparse import CalcSyntaxError, dump, parse, to_rpn, tokenize
from calcparse.tokens import TokenKind


def test_tokenizes_names_operators_and_positions():
    tokens = tokenize("x1 >= 2.5e-3")
    assert [(t.kind, t.text, t.position) for t in tokens] == [
        (TokenKind.NAME, "x1", 0),
        (TokenKind.SYMBOL, ">=", 3),
        (TokenKind.NUMBER, "2.5e-3", 6),
        (TokenKind.END, "", 12),
    ]


@pytest.mark.parametrize(
    ("text", "value"),
    [("42", 42), ("4.2", 4.2), (".5", 0.5), ("5.", 5.0), ("1e3", 1000.0), ("1E+2", 100.0)],
    ids=["int", "float", "leading-dot", "trailing-dot", "exponent", "signed-exponent"],
)
def test_number_literals(text, value):
    token = tokenize(text)[0]
    assert token.value == value
    assert type(token.value) is type(value)


def test_double_star_is_one_token_but_spaced_stars_are_two():
    assert [t.text for t in tokenize("2**3")] == ["2", "**", "3", ""]
    assert [t.text for t in tokenize("2* *3")] == ["2", "*", "*", "3", ""]


def test_keywords_are_distinguished_from_names():
    kinds = [t.kind for t in tokenize("not notable")]
    assert kinds == [TokenKind.KEYWORD, TokenKind.NAME, TokenKind.END]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("1 + 2 * 3", "(+ 1 (* 2 3))"),
        ("10 - 4 - 3", "(- (- 10 4) 3)"),
        ("2 ** 3 ** 2", "(** 2 (** 3 2))"),
        ("-2 ** 2", "(neg (** 2 2))"),
        ("2 ** -1", "(** 2 (neg 1))"),
        ("-x * +y", "(* (neg x) (pos y))"),
        ("(1 + 2) * 3", "(* (+ 1 2) 3)"),
        ("7 // 2 % 3", "(% (// 7 2) 3)"),
        ("a < b + 1", "(< a (+ b 1))"),
        ("not a == b and c or d", "(or (and (not (== a b)) c) d)"),
        ("a or b and c", "(or a (and b c))"),
        ("max(1, f(x), -y)", "(max 1 (f x) (neg y))"),
        ("pi()", "(pi)"),
        ("true != false", "(!= true false)"),
    ],
    ids=[
        "mul-before-add",
        "sub-left-assoc",
        "pow-right-assoc",
        "neg-looser-than-pow",
        "neg-in-exponent",
        "unary-signs",
        "parentheses",
        "same-level-left-to-right",
        "arith-before-compare",
        "not-looser-than-compare",
        "and-before-or",
        "nested-calls",
        "no-arg-call",
        "booleans",
    ],
)
def test_grouping(source, expected):
    assert dump(source) == expected


def test_parenthesised_comparisons_may_be_combined():
    assert dump("(1 < 2) == true") == "(== (< 1 2) true)"


@pytest.mark.parametrize(
    ("source", "message", "position"),
    [
        ("", "empty expression", 0),
        ("   ", "empty expression", 3),
        ("1 +", "expected an expression but found end of input", 3),
        ("1 2", "unexpected '2'", 2),
        ("(1 + 2", "expected ')' to close '(' at position 0 but found end of input", 6),
        ("max(1,)", "expected an expression but found ')'", 6),
        ("max(1 2)", "expected ')' to close '(' at position 3 but found '2'", 6),
        ("* 3", "expected an expression but found '*'", 0),
        ("1 < 2 < 3", "comparison operators cannot be chained", 6),
        ("1 == 2 != 3", "comparison operators cannot be chained", 7),
        ("3 $ 4", "unexpected character '$'", 2),
        ("1.2.3", "malformed number", 0),
        ("12abc", "malformed number", 0),
        ("2e+", "malformed exponent", 1),
    ],
    ids=[
        "empty",
        "only-spaces",
        "dangling-operator",
        "two-numbers",
        "unclosed-paren",
        "trailing-comma",
        "missing-comma",
        "leading-operator",
        "chained-less-than",
        "chained-equality",
        "bad-character",
        "two-dots",
        "letters-after-digits",
        "empty-exponent",
    ],
)
def test_syntax_errors_report_position(source, message, position):
    with pytest.raises(CalcSyntaxError, match=re.escape(message)) as caught:
        parse(source)
    assert caught.value.position == position
    assert str(caught.value).endswith(f"at position {position}")


def test_error_excerpt_points_at_the_problem():
    with pytest.raises(CalcSyntaxError) as caught:
        parse("1 + * 2")
    assert caught.value.excerpt() == "1 + * 2\n    ^"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("1 + 2 * 3", "1 2 3 * +"),
        ("(1 + 2) * 3", "1 2 + 3 *"),
        ("2 ** 3 ** 2", "2 3 2 ** **"),
        ("-a - -b", "a neg b neg -"),
        ("max(1, 2, 3) - abs(-4)", "1 2 3 max/3 4 neg abs/1 -"),
        ("not x < 1e3 or true", "x 1e3 < not true or"),
    ],
    ids=["precedence", "parentheses", "right-assoc", "unary", "calls", "logic"],
)
def test_to_rpn(source, expected):
    assert to_rpn(source) == expected


def test_to_rpn_accepts_a_parsed_tree():
    assert to_rpn(parse("a*b")) == "a b *"


def test_call_requires_the_parenthesis_right_after_a_name():
    assert dump("f (x)") == "(f x)"
    with pytest.raises(CalcSyntaxError, match=re.escape("unexpected '(' at position 3")):
        parse("(f)(x)")


def test_syntax_error_positions_survive_multiline_input():
    with pytest.raises(CalcSyntaxError) as caught:
        parse("1 +\n2 +\n)")
    assert caught.value.position == 8
