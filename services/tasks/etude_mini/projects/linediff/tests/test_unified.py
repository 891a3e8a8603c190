import difflib

import pytest

from linediff import Hunk, group_opcodes, make_hunks, split_lines, unified_diff
from linediff.myers import diff_opcodes

SEVEN = "one\ntwo\nthree\nfour\nfive\nsix\nseven\n"


def numbered(count: int) -> str:
    return "".join(f"line {n}\n" for n in range(1, count + 1))


def test_unified_diff_output():
    new = "one\ntwo\n3\nfour\nfive\nsix\nseven\neight\n"
    assert unified_diff(SEVEN, new, "old.txt", "new.txt", context=1) == (
        "--- old.txt\n"
        "+++ new.txt\n"
        "@@ -2,3 +2,3 @@\n"
        " two\n"
        "-three\n"
        "+3\n"
        " four\n"
        "@@ -7 +7,2 @@\n"
        " seven\n"
        "+eight\n"
    )


def test_default_context_is_three_lines():
    new = SEVEN.replace("four", "FOUR")
    assert unified_diff(SEVEN, new) == (
        "--- a\n+++ b\n@@ -1,7 +1,7 @@\n one\n two\n three\n-four\n+FOUR\n five\n six\n seven\n"
    )


def test_identical_texts_give_an_empty_diff():
    assert unified_diff(SEVEN, SEVEN) == ""


def test_insert_into_empty_file_uses_zero_range():
    assert unified_diff("", "a\nb\n") == "--- a\n+++ b\n@@ -0,0 +1,2 @@\n+a\n+b\n"


def test_deleting_everything():
    assert unified_diff("a\n", "") == "--- a\n+++ b\n@@ -1 +0,0 @@\n-a\n"


def test_pure_insertion_with_no_context_names_the_line_before():
    new = "one\ntwo\nINSERTED\nthree\nfour\nfive\nsix\nseven\n"
    assert unified_diff(SEVEN, new, context=0) == "--- a\n+++ b\n@@ -2,0 +3 @@\n+INSERTED\n"


def test_missing_final_newline_is_marked():
    assert unified_diff("a\nb", "a\nc") == (
        "--- a\n+++ b\n@@ -1,2 +1,2 @@\n a\n-b\n"
        "\\ No newline at end of file\n+c\n\\ No newline at end of file\n"
    )


def test_adding_a_final_newline_shows_as_a_change():
    assert unified_diff("a\nb", "a\nb\n", context=0) == (
        "--- a\n+++ b\n@@ -2 +2 @@\n-b\n\\ No newline at end of file\n+b\n"
    )


@pytest.mark.parametrize(
    ("gap", "hunk_count"),
    [(5, 1), (6, 1), (7, 2)],
    ids=["gap-below-twice-context", "gap-equal-twice-context", "gap-above-twice-context"],
)
def test_changes_merge_when_gap_is_at_most_twice_the_context(gap, hunk_count):
    old = split_lines(numbered(gap + 2))
    new = ["X\n", *old[1:-1], "Y\n"]
    assert len(make_hunks(old, new, context=3)) == hunk_count


def test_hunk_ranges_when_split():
    old = split_lines(numbered(20))
    new = list(old)
    new[2] = "changed 3\n"
    new[15] = "changed 16\n"
    hunks = make_hunks(old, new, context=2)
    assert [h.header() for h in hunks] == ["@@ -1,5 +1,5 @@", "@@ -14,5 +14,5 @@"]
    assert hunks[1].lines[0] == (" ", "line 14\n")


def test_matches_difflib_on_unambiguous_input():
    old = numbered(30)
    new = old.replace("line 4\n", "").replace("line 20\n", "line 20\nextra\n")
    expected = "".join(
        difflib.unified_diff(old.splitlines(True), new.splitlines(True), "x", "y", n=2)
    )
    assert unified_diff(old, new, "x", "y", context=2) == expected


def test_group_opcodes_rejects_negative_context():
    with pytest.raises(ValueError, match="context must not be negative"):
        group_opcodes(diff_opcodes("ab", "ac"), context=-1)


def test_hunk_line_views_and_single_line_header():
    hunk = Hunk(2, 1, 2, 1, (("-", "old\n"), ("+", "new\n")))
    assert hunk.old_lines == ["old\n"]
    assert hunk.new_lines == ["new\n"]
    assert hunk.header() == "@@ -3 +3 @@"


@pytest.mark.parametrize(
    ("text", "lines"),
    [
        ("", []),
        ("a", ["a"]),
        ("a\n", ["a\n"]),
        ("a\n\nb", ["a\n", "\n", "b"]),
        ("a\r\nb\x0cc\n", ["a\r\n", "b\x0cc\n"]),
    ],
    ids=["empty", "no-newline", "one-line", "blank-line", "only-newline-splits"],
)
def test_split_lines(text, lines):
    assert split_lines(text) == lines
