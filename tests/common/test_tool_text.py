"""The text of tool results: each format reads back with its own pattern, and the texts the
scripted solver predicts are the ones the tools write (the tools' own tests pin the whole
results: tests/environment/test_tools.py)."""

from __future__ import annotations

from etude.common.tool_text import (
    CUT_MARK,
    GREP_HIT,
    GREP_LONG_LINE,
    GREP_MAX_RESULTS,
    NUMBERED_LINE,
    READ_ON,
    cut_to,
    edited,
    grep_hit,
    grep_more,
    grep_no_matches,
    numbered_line,
    plural,
    printable,
    read_on,
)


def test_numbered_lines_read_as_cat_n_prints_them_and_read_back():
    assert numbered_line(7, "x = 1") == "     7\tx = 1"
    assert numbered_line(1234567, "") == "1234567\t"
    found = NUMBERED_LINE.match(numbered_line(42, "  if a:\tb"))
    assert found is not None and (found[1], found[2]) == ("42", "  if a:\tb")


def test_grep_lines_read_back_path_and_number():
    text = "\n".join(
        [grep_hit("pkg/a b.py", 3, "x: int = 1"), grep_hit("c.py", 10, GREP_LONG_LINE)]
    )
    assert text == "pkg/a b.py:3:x: int = 1\nc.py:10:[line over 300 bytes omitted]"
    assert [(m[1], int(m[2])) for m in GREP_HIT.finditer(text)] == [("pkg/a b.py", 3), ("c.py", 10)]
    assert not GREP_HIT.search(grep_more(5, 15))


def test_grep_notes():
    assert grep_no_matches("def f", "src") == "No matches for 'def f' in src."
    assert grep_more(1, 11) == (
        "… 1 more match not shown (11 in total); narrow the search with path or glob, or "
        f"raise max_results (at most {GREP_MAX_RESULTS})."
    )
    assert grep_more(2, 12).startswith("… 2 more matches not shown (12 in total);")


def test_read_on_names_the_line_to_read_from():
    note = read_on(1, 400, 1000, 401)
    assert note == "… showing lines 1-400 of 1000; call read_file with start_line=401 to read on."
    assert READ_ON.findall(note) == ["401"]


def test_edited_and_plurals():
    assert edited(2, "a.py", "     1\tx") == (
        "Replaced 2 occurrences in a.py. Lines around the first change now read:\n     1\tx"
    )
    assert plural(1, "line") == "1 line" and plural(0, "match", "matches") == "0 matches"


def test_printable_replaces_undecodable_bytes():
    name = b"caf\xe9.txt".decode("utf-8", "surrogateescape")
    assert printable(name) == "caf\ufffd.txt"
    assert printable("plain") == "plain"


def test_a_cut_output_says_how_much_was_left_out_and_reads_back():
    assert cut_to("abcdef", 6) == "abcdef"
    assert cut_to("abcdef", 4) == "abcd\n[… 2 more characters cut]"
    assert CUT_MARK.search(cut_to("abcdef", 4)) and not CUT_MARK.search(cut_to("abc", 4))
