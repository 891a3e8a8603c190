from datetime import date

import pytest
from csvsniff import (
    CsvError,
    Dialect,
    RowIssue,
    SniffError,
    detect_line_terminator,
    detect_quote,
    read,
    sniff,
)


@pytest.mark.parametrize(
    ("delimiter", "label"), [(",", "comma"), (";", "semicolon"), ("\t", "tab"), ("|", "pipe")]
)
def test_sniffs_each_supported_delimiter(delimiter, label):
    text = delimiter.join(["id", "name", "score"]) + "\n"
    text += delimiter.join(["1", label, "2.5"]) + "\n" + delimiter.join(["2", "x", "3"]) + "\n"
    dialect = sniff(text)
    assert dialect.delimiter == delimiter
    assert dialect.has_header is True


def test_commas_inside_fields_do_not_win_over_the_real_delimiter():
    text = "name;note\nAnn;hello, world\nBob;hi\nCy;a, b, c\n"
    assert sniff(text).delimiter == ";"


def test_equally_good_delimiters_resolve_in_candidate_order():
    text = "a,b;c\n1,2;3\n"
    assert sniff(text).delimiter == ","
    assert sniff(text, delimiters=";,").delimiter == ";"


def test_quoted_delimiters_are_not_counted():
    text = 'a,b\n"1;2;3",x\n"4;5;6",y\n'
    dialect = sniff(text)
    assert (dialect.delimiter, dialect.quotechar) == (",", '"')


def test_detects_single_quote_but_not_apostrophes():
    assert detect_quote("'a b',c\n'd',e\n") == "'"
    assert detect_quote("O'Brien,Ann\nD'Arcy,Bo\n") is None
    assert detect_quote('x,"y"\n') == '"'
    assert detect_quote("x,y\n") is None
    assert detect_quote('id,"note\n') == '"'


def test_detects_backslash_escaping():
    dialect = sniff('id,quote\n1,"say \\"hi\\""\n2,"plain"\n')
    assert dialect.escapechar == "\\"
    assert dialect.doublequote is False
    assert sniff('id,quote\n1,"say ""hi"""\n').doublequote is True


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a\r\nb\r\n", "\r\n"),
        ("a\nb\n", "\n"),
        ("a\rb\r", "\r"),
        ("a\r\nb\nc\n", "\n"),
        ("a\r\nb\n", "\r\n"),
        ("single line", "\n"),
    ],
)
def test_detects_line_terminator(text, expected):
    assert detect_line_terminator(text) == expected


def test_detects_space_after_delimiter_by_majority():
    assert sniff("a, b, c\n1, 2, 3\n").skip_initial_space is True
    assert sniff("a, b,c\n1,2, 3\n").skip_initial_space is False


@pytest.mark.parametrize(
    ("text", "has_header"),
    [
        pytest.param("id,score\n1,2.5\n2,3.0\n", True, id="numeric-columns"),
        pytest.param("1,2.5\n2,3.0\n3,1.0\n", False, id="numbers-only"),
        pytest.param("name,zip\nAnn,01234\nBob,98765\n", True, id="fixed-width-text"),
        pytest.param("Ann,Paris\nBob,Rome\nCyd,Oslo\n", False, id="same-length-text"),
        pytest.param("Ann,x\nBobby,y\n", False, id="no-evidence"),
        pytest.param("id,name\n1,Ann\n", True, id="two-rows"),
        pytest.param("id,name\n1,Ann\n2,Bobby\n", True, id="single-vote"),
        pytest.param("h,1,\n2,3,x\n4,5,y\n", False, id="tied-votes-and-empty-cell"),
        pytest.param("a,b,cd\n1,2,ef\n3,4,gh\n", True, id="two-to-one"),
        pytest.param("1,a,b\n2,cd,ef\n3,gh,ij\n", True, id="text-votes-outweigh-numeric"),
        pytest.param("id,name\n", False, id="one-row"),
    ],
)
def test_header_detection(text, has_header):
    assert sniff(text).has_header is has_header


def test_sniff_errors():
    with pytest.raises(SniffError, match="cannot sniff an empty sample"):
        sniff(" \n")
    with pytest.raises(SniffError, match="no delimiter among"):
        sniff("one\ntwo\n")
    with pytest.raises(ValueError, match="distinct characters"):
        sniff("a,b", delimiters=",,")


def test_read_reports_inconsistent_rows_against_header_width():
    table = read("a,b,c\n1,2,3\n4,5\n6,7,8,9\n10,11,12\n")
    assert table.header == ["a", "b", "c"]
    assert table.inconsistent == [RowIssue(3, 3, 2), RowIssue(4, 3, 4)]
    assert table.width == 3


def test_read_without_header_uses_most_common_width():
    dialect = Dialect(has_header=False)
    table = read("1,2\n3,4,5\n6,7\n8,9\n", dialect)
    assert table.header is None
    assert table.width == 2
    assert table.inconsistent == [RowIssue(line=2, expected=2, actual=3)]


def test_read_infers_column_types_and_converts_rows():
    text = "id;price;active;since\n1;9.5;yes;2024-01-02\n2;10;no;\n3;;yes;2023-12-31\n4;1\n"
    table = read(text)
    assert [(t.name, t.nulls) for t in table.column_types] == [
        ("int", 0),
        ("float", 1),
        ("bool", 1),
        ("date", 2),
    ]
    assert table.inconsistent == [RowIssue(line=5, expected=4, actual=2)]
    assert table.typed_rows() == [
        [1, 9.5, True, date(2024, 1, 2)],
        [2, 10.0, False, None],
        [3, None, True, date(2023, 12, 31)],
        [4, 1.0, None, None],
    ]


def test_columns_and_records_pad_short_rows():
    table = read("k,v\na,1\nb\n", Dialect(has_header=True))
    assert table.column("v") == ["1", ""]
    assert table.column(0) == ["a", "b"]
    assert table.records() == [{"k": "a", "v": "1"}, {"k": "b", "v": ""}]
    with pytest.raises(KeyError, match="no column named 'z'"):
        table.column("z")
    with pytest.raises(IndexError, match="column 2 out of range for width 2"):
        table.column(2)
    with pytest.raises(IndexError, match="column -1 out of range for width 2"):
        table.column(-1)


def test_records_need_a_header():
    table = read("1,2\n3,4\n", Dialect())
    with pytest.raises(CsvError, match=r"records\(\) needs a header row"):
        table.records()


def test_read_empty_text_with_explicit_dialect():
    table = read("", Dialect(has_header=True))
    assert (table.header, table.rows, table.width, table.inconsistent) == (None, [], 0, [])
