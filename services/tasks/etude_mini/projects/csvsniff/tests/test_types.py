from datetime import date

import pytest
from csvsniff import ColumnType, classify, convert, infer_type


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ("", "null"),
        (" N/A ", "null"),
        ("None", "null"),
        ("TRUE", "bool"),
        ("no", "bool"),
        ("0", "int"),
        ("-42", "int"),
        ("+7", "int"),
        ("007", "str"),
        ("3.14", "float"),
        ("0.5", "float"),
        (".5", "float"),
        ("1e3", "float"),
        ("-2.5E-3", "float"),
        ("00.5", "str"),
        ("05", "str"),
        ("05.5", "str"),
        ("-0.25", "float"),
        ("2024-02-29", "date"),
        ("2023-02-29", "str"),
        ("2024-2-9", "str"),
        ("1,5", "str"),
        ("abc", "str"),
    ],
)
def test_classifies_single_values(value, kind):
    assert classify(value) == kind


def test_integer_column_is_int_with_full_confidence():
    assert infer_type(["1", "2", "", "30"]) == ColumnType("int", 1.0, nulls=1)


def test_mixed_int_and_float_column_is_float():
    assert infer_type(["1", "2.5", "3"]) == ColumnType("float", 1.0)


def test_type_needs_min_share_of_values():
    values = ["1"] * 9 + ["oops"]
    assert infer_type(values) == ColumnType("int", 0.9)
    assert infer_type([*values, "x"]) == ColumnType("str", 0.1818)
    assert infer_type(values, min_share=0.95).name == "str"


def test_confidence_is_rounded_to_four_places():
    assert infer_type(["1"] * 29 + ["x", "y"]) == ColumnType("int", 0.9355)


def test_min_share_of_one_demands_every_value():
    assert infer_type(["1", "2"], min_share=1.0) == ColumnType("int", 1.0)
    assert infer_type(["1", "2", "x"], min_share=1.0) == ColumnType("str", 0.3333)


def test_nullable_means_at_least_one_null():
    assert not infer_type(["1", "2"]).nullable
    assert infer_type(["1", ""]).nullable
    assert infer_type(["1", ""]).nulls == 1


def test_all_null_column_has_zero_confidence():
    column_type = infer_type(["", "NA", "null"])
    assert column_type == ColumnType("str", 0.0, nulls=3)
    assert column_type.nullable


def test_bool_and_date_columns():
    assert infer_type(["yes", "No", "TRUE"]) == ColumnType("bool", 1.0)
    assert infer_type(["2024-01-01", "2024-12-31"]).name == "date"


def test_min_share_is_validated():
    with pytest.raises(ValueError, match=r"min_share must be in \(0, 1\], got 0"):
        infer_type(["1"], min_share=0)
    with pytest.raises(ValueError, match=r"got 1\.5"):
        infer_type(["1"], min_share=1.5)


def test_convert_values_to_python_types():
    assert convert(" 42 ", "int") == 42
    assert convert("42", "float") == 42.0
    assert convert("Yes", "bool") is True
    assert convert("false", "bool") is False
    assert convert("2024-03-07", "date") == date(2024, 3, 7)
    assert convert("n/a", "int") is None
    assert convert("oops", "int") is None
    assert convert("007", "str") == "007"
    with pytest.raises(ValueError, match="unknown type 'decimal'"):
        convert("1", "decimal")
