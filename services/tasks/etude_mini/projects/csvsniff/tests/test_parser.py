import pytest
from csvsniff import CsvError, CsvFormatError, Dialect, parse_rows


def fields(text, **dialect):
    return [row.fields for row in parse_rows(text, Dialect(**dialect))]


def test_splits_simple_rows_and_ignores_final_terminator():
    assert fields("a,b,c\n1,2,3\n") == [["a", "b", "c"], ["1", "2", "3"]]


def test_accepts_crlf_and_lone_cr_line_endings():
    assert fields("a,b\r\n1,2\r\n") == [["a", "b"], ["1", "2"]]
    assert fields("a,b\r1,2") == [["a", "b"], ["1", "2"]]


def test_crlf_counts_as_one_line_for_row_numbers():
    rows = parse_rows('a\r\n"b\r\nc"\r\nd\r\n\r\ne')
    assert [(r.line, r.fields) for r in rows] == [
        (1, ["a"]),
        (2, ["b\r\nc"]),
        (4, ["d"]),
        (6, ["e"]),
    ]


def test_quoted_fields_keep_delimiters_and_line_breaks():
    rows = parse_rows('id,note\n1,"hello, world"\n2,"two\nlines"\n3,x\n')
    assert [r.fields for r in rows] == [
        ["id", "note"],
        ["1", "hello, world"],
        ["2", "two\nlines"],
        ["3", "x"],
    ]
    assert [r.line for r in rows] == [1, 2, 3, 5]


def test_quoted_crlf_is_kept_verbatim():
    assert fields('a,"x\r\ny"\r\nb,c') == [["a", "x\r\ny"], ["b", "c"]]


def test_doubled_quotes_become_one_quote():
    assert fields('"say ""hi""",""\n') == [['say "hi"', ""]]


def test_backslash_escapes_when_doublequote_is_off():
    rows = fields(r'"say \"hi\"",a\,b' + "\n", escapechar="\\", doublequote=False)
    assert rows == [['say "hi"', "a,b"]]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("a\\,b", [["a,b"]], id="escaped-delimiter"),
        pytest.param("a\\,", [["a,"]], id="escaped-delimiter-at-end"),
        pytest.param("x\\", [["x\\"]], id="trailing-escape-is-literal"),
        pytest.param("x\\\ny", [["x\\"], ["y"]], id="escape-never-swallows-line-break"),
    ],
)
def test_escape_character_outside_quotes(text, expected):
    assert fields(text, escapechar="\\") == expected


@pytest.mark.parametrize("text", ['"a\\"', '"a\\'])
def test_escape_at_end_of_quoted_field_leaves_it_unterminated(text):
    with pytest.raises(CsvFormatError, match="line 1: unterminated quoted field"):
        fields(text, escapechar="\\", doublequote=False)


def test_doubled_quote_ends_field_when_doublequote_is_off():
    with pytest.raises(CsvFormatError, match="""line 1: unexpected '"' after closing quote"""):
        fields('"a""b"', doublequote=False)


def test_empty_fields_and_trailing_delimiters():
    assert fields(",a,,\n") == [["", "a", "", ""]]
    assert fields("a,") == [["a", ""]]
    assert fields('""') == [[""]]


def test_blank_lines_are_skipped():
    rows = parse_rows("a,b\n\n\n1,2\n\n")
    assert [(r.line, r.fields) for r in rows] == [(1, ["a", "b"]), (4, ["1", "2"])]


def test_quote_in_middle_of_unquoted_field_is_literal():
    assert fields('5" pipe,x\n') == [['5" pipe', "x"]]


def test_text_after_closing_quote_is_an_error_with_line_number():
    with pytest.raises(CsvFormatError, match="line 2: unexpected 'x' after closing quote") as info:
        parse_rows('a,b\n"q"x,1\n')
    assert info.value.line == 2


def test_unterminated_quote_reports_the_line_where_the_row_started():
    with pytest.raises(CsvFormatError, match="line 2: unterminated quoted field"):
        parse_rows('a,b\n1,"open\nstill open\n')


def test_skip_initial_space_only_strips_after_delimiters():
    assert fields('a, b,  "c, d"', skip_initial_space=True) == [["a", "b", "c, d"]]
    assert fields("a, b") == [["a", " b"]]
    assert fields("a,b ", skip_initial_space=True) == [["a", "b "]]


def test_alternative_delimiter_and_quote():
    rows = fields("x|'p|q'|z\n", delimiter="|", quotechar="'")
    assert rows == [["x", "p|q", "z"]]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"delimiter": ";;"}, "delimiter must be a single character"),
        ({"quotechar": ""}, "quotechar must be a single character"),
        ({"escapechar": "ab"}, "escapechar must be a single character or None"),
        ({"delimiter": "\n"}, "cannot be line breaks"),
        ({"delimiter": '"'}, "must all differ"),
        ({"escapechar": ","}, "must all differ"),
        ({"line_terminator": "\n\n"}, "unsupported line terminator"),
    ],
)
def test_dialect_validation(options, message):
    with pytest.raises(CsvError, match=message):
        Dialect(**options)


def test_parse_rows_requires_text():
    with pytest.raises(TypeError, match="expected str, got bytes"):
        parse_rows(b"a,b")
