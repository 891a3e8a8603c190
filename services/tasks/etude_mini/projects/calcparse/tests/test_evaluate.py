import math

import pytest

from calcparse import CalcError, CalcEvalError, CalcNameError, CalcSyntaxError, evaluate, parse


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("7 / 2", 3.5),
        ("4 / 2", 2.0),
        ("7 // 2", 3),
        ("-7 // 2", -4),
        ("-7 % 3", 2),
        ("7.5 % 2", 1.5),
        ("2 ** 10", 1024),
        ("2 ** -2", 0.25),
        ("-2 ** 2", -4),
        ("(-2) ** 2", 4),
        ("2 ** 3 ** 2", 512),
        ("100 / 10 / 5", 2.0),
        ("1e3 + .5", 1000.5),
        ("10 - 4 - 3", 3),
    ],
    ids=[
        "true-division",
        "division-stays-float",
        "floor-division",
        "floor-division-negative",
        "modulo-sign-of-divisor",
        "float-modulo",
        "int-power",
        "negative-exponent",
        "unary-minus-after-power",
        "parenthesised-base",
        "power-right-assoc",
        "division-left-assoc",
        "scientific",
        "subtraction-left-assoc",
    ],
)
def test_arithmetic(source, expected):
    result = evaluate(source)
    assert result == expected
    assert type(result) is type(expected)


def test_variables_come_from_the_environment():
    assert evaluate("price * qty - discount", {"price": 2.5, "qty": 4, "discount": 1}) == 9.0


def test_comparisons_and_boolean_operators():
    env = {"x": 5}
    assert evaluate("x > 1 and x <= 5", env) is True
    assert evaluate("x >= 6 or not x != 5", env) is True
    assert evaluate("x < 5 or x > 5", env) is False
    assert evaluate("1 == 1.0") is True
    assert evaluate("(1 < 2) == (3 < 2)") is False


def test_and_or_short_circuit():
    assert evaluate("false and 1 / 0 == 1") is False
    assert evaluate("true or missing") is True


def test_right_operand_is_evaluated_when_needed():
    with pytest.raises(CalcNameError, match="unknown variable 'missing' at position 9"):
        evaluate("true and missing")


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("1 + true", r"operator '\+' expects numbers, got a boolean at position 2"),
        ("-false", r"operator '-' expects numbers, got a boolean at position 0"),
        ("not 1", r"operator 'not' expects booleans, got a number at position 0"),
        ("1 and true", r"operator 'and' expects booleans, got a number at position 2"),
        ("true == 1", r"cannot compare a boolean with a number using '==' at position 5"),
        ("true < false", r"operator '<' expects numbers, got a boolean at position 5"),
    ],
    ids=["add-bool", "negate-bool", "not-number", "and-number", "eq-mixed", "lt-bools"],
)
def test_type_errors(source, message):
    with pytest.raises(CalcEvalError, match=message):
        evaluate(source)


@pytest.mark.parametrize(
    ("source", "position"),
    [("1 / (2 - 2)", 2), ("5 // 0", 2), ("5 % 0.0", 2), ("0 ** -1", 2)],
    ids=["divide", "floor-divide", "modulo", "zero-to-negative-power"],
)
def test_division_by_zero_points_at_operator(source, position):
    with pytest.raises(CalcEvalError, match=f"division by zero at position {position}"):
        evaluate(source)


def test_integer_exponent_limit_is_inclusive():
    assert evaluate("2 ** 10000").bit_length() == 10001
    with pytest.raises(CalcEvalError, match="exponent too large"):
        evaluate("2 ** 10001")


def test_non_real_and_overflowing_powers_are_rejected():
    with pytest.raises(CalcEvalError, match="result is not a real number at position 5"):
        evaluate("(-8) ** 0.5")
    with pytest.raises(CalcEvalError, match="numeric overflow"):
        evaluate("10.0 ** 400")


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("min(3, 1, 2)", 1),
        ("max(3, 1.5)", 3),
        ("abs(-2.5)", 2.5),
        ("round(2.5)", 2),
        ("round(3.5)", 4),
        ("round(2.567, 2)", 2.57),
        ("sqrt(16)", 4.0),
        ("sqrt(2) * sqrt(2) > 1.99", True),
    ],
    ids=[
        "min",
        "max",
        "abs",
        "round-half-even-down",
        "round-half-even-up",
        "round-digits",
        "sqrt",
        "sqrt-float",
    ],
)
def test_builtin_functions(source, expected):
    result = evaluate(source)
    assert result == expected
    assert type(result) is type(expected)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("max()", r"max\(\) takes at least 1 argument, got 0 at position 0"),
        ("abs(1, 2)", r"abs\(\) takes exactly 1 argument, got 2"),
        ("round(1, 2, 3)", r"round\(\) takes 1 or 2 arguments, got 3"),
        ("1 + sqrt(-1)", r"sqrt of a negative number at position 4"),
        ("round(1.25, 0.5)", r"cannot be interpreted as an integer"),
        ("max(1, true)", r"max\(\) expects numbers, got a boolean"),
    ],
    ids=[
        "too-few",
        "too-many",
        "round-too-many",
        "sqrt-negative",
        "round-float-digits",
        "bool-arg",
    ],
)
def test_builtin_function_errors(source, message):
    with pytest.raises(CalcEvalError, match=message):
        evaluate(source)


def test_unknown_names_raise_name_errors_with_positions():
    with pytest.raises(CalcNameError, match="unknown function 'hypot' at position 4") as caught:
        evaluate("2 * hypot(3, 4)")
    assert isinstance(caught.value, CalcError)
    with pytest.raises(CalcNameError, match="unknown variable 'y' at position 4"):
        evaluate("x + y", {"x": 1})


def test_custom_functions_extend_and_override_builtins():
    functions = {"hypot": math.hypot, "max": lambda *xs: -1}
    assert evaluate("hypot(3, 4) + max(9)", functions=functions) == 4.0


def test_evaluates_a_parsed_tree_repeatedly():
    tree = parse("n * (n + 1) // 2")
    assert [evaluate(tree, {"n": n}) for n in (0, 1, 10)] == [0, 1, 55]


def test_evaluate_reports_syntax_errors_from_source():
    with pytest.raises(CalcSyntaxError, match="unexpected '\\)' at position 5"):
        evaluate("(1+2))")


def test_errors_from_a_parsed_tree_have_no_source_text():
    with pytest.raises(CalcEvalError) as caught:
        evaluate(parse("1 / 0"))
    assert caught.value.position == 2
    assert caught.value.source == ""


def test_unary_operators_stack():
    assert evaluate("--3") == 3
    assert evaluate("-+-3") == 3
    assert evaluate("not not true") is True
    assert evaluate("+2.5") == 2.5


def test_mixed_int_and_float_comparisons():
    assert evaluate("0.1 + 0.2 > 0.3") is True
    assert evaluate("2 >= 2.0 and 2 <= 2.0 and not 2 != 2.0") is True


def test_whitespace_and_newlines_are_insignificant():
    assert evaluate("\t1 +\n 2\n* 3 ") == 7
