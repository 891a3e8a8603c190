import pytest

from linediff import (
    PatchConflictError,
    PatchParseError,
    apply_patch,
    format_patch,
    parse_patch,
    unified_diff,
)


def numbered(count: int) -> str:
    return "".join(f"line {n}\n" for n in range(1, count + 1))


ORIGINAL = numbered(12)
CHANGED = ORIGINAL.replace("line 3\n", "line three\n").replace("line 10\n", "")
PATCH = unified_diff(ORIGINAL, CHANGED, "a/f.txt", "b/f.txt", context=1)


def test_parse_patch_reads_headers_and_hunks():
    patch = parse_patch(
        "--- a/f.txt\t2024-01-01 10:00\n+++ b/f.txt\n@@ -2,2 +2 @@ def f():\n x\n-y\n"
    )
    assert (patch.old_name, patch.new_name) == ("a/f.txt", "b/f.txt")
    (hunk,) = patch.hunks
    assert (hunk.old_index, hunk.old_count, hunk.new_index, hunk.new_count) == (1, 2, 1, 1)
    assert hunk.lines == ((" ", "x\n"), ("-", "y\n"))


def test_parse_then_format_round_trips():
    assert format_patch(parse_patch(PATCH)) == PATCH
    assert str(parse_patch(PATCH)) == PATCH


def test_preamble_before_headers_is_ignored():
    assert apply_patch(ORIGINAL, "diff --git a/f.txt b/f.txt\nindex 1..2\n" + PATCH) == CHANGED


def test_apply_at_declared_position():
    assert apply_patch(ORIGINAL, PATCH) == CHANGED


def test_apply_with_offset_after_lines_were_added_above():
    shifted = "new 1\nnew 2\n" + ORIGINAL
    expected = "new 1\nnew 2\n" + CHANGED
    assert apply_patch(shifted, PATCH) == expected


def test_drift_from_one_hunk_carries_to_the_next():
    # One line vanished above each hunk: the first is found one line early, and the second,
    # two lines early, is within reach only because the search starts from that drift.
    trimmed = ORIGINAL.replace("line 1\n", "").replace("line 6\n", "")
    expected = CHANGED.replace("line 1\n", "").replace("line 6\n", "")
    assert apply_patch(trimmed, PATCH, max_offset=1) == expected


def test_offset_search_is_bounded_inclusively():
    shifted = "x\n" * 5 + ORIGINAL
    assert apply_patch(shifted, PATCH, max_offset=5) == "x\n" * 5 + CHANGED
    with pytest.raises(PatchConflictError, match="hunk 1 does not apply near line 2"):
        apply_patch(shifted, PATCH, max_offset=4)


def test_ambiguous_context_prefers_nearest_then_earlier_match():
    patch = "--- a\n+++ b\n@@ -3 +3 @@\n-x\n+y\n"
    assert apply_patch("x\na\nb\na\nx\n", patch) == "y\na\nb\na\nx\n"
    assert apply_patch("a\nx\nb\na\nx\n", patch) == "a\ny\nb\na\nx\n"
    assert apply_patch("a\na\nb\nx\nx\n", patch) == "a\na\nb\ny\nx\n"


def test_conflict_reports_the_failing_hunk():
    damaged = ORIGINAL.replace("line 10\n", "line ten\n")
    with pytest.raises(PatchConflictError, match="hunk 2 does not apply near line 9") as caught:
        apply_patch(damaged, PATCH)
    assert caught.value.hunk == 2


def test_detects_an_already_applied_patch():
    with pytest.raises(PatchConflictError, match="hunk 1 appears to be applied already"):
        apply_patch(CHANGED, PATCH)


def test_reverse_apply_restores_the_original():
    assert apply_patch(CHANGED, PATCH, reverse=True) == ORIGINAL


def test_missing_newline_markers_apply_exactly():
    patch = unified_diff("a\nb", "a\nb\nc")
    assert apply_patch("a\nb", patch) == "a\nb\nc"
    with pytest.raises(PatchConflictError):
        apply_patch("a\nb\n", patch)


def test_blank_context_lines_without_leading_space_are_accepted():
    patch = "--- a\n+++ b\n@@ -1,3 +1,3 @@\n x\n\n-y\n+z\n"
    assert apply_patch("x\n\ny\n", patch) == "x\n\nz\n"


def test_patch_text_without_final_newline_still_parses():
    assert apply_patch("a\nb\n", "--- a\n+++ b\n@@ -2 +2 @@\n-b\n+c") == "a\nc\n"


def test_patch_creating_a_file_from_nothing():
    assert apply_patch("", unified_diff("", "hello\nworld\n")) == "hello\nworld\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", r"line 1: expected '---' and '\+\+\+' file headers"),
        ("--- a\n@@ -1 +1 @@\n", r"line 1: expected '---' and '\+\+\+' file headers"),
        ("--- a\n+++ b\n", r"line 3: patch has no hunks"),
        ("--- a\n+++ b\n@@ -1 +1\n-x\n", r"line 3: expected a hunk header, got '@@ -1 \+1'"),
        (
            "--- a\n+++ b\n@@ -1,2 +1,2 @@\n-x\n+y\n",
            r"line 3: hunk is missing 1 old and 1 new lines",
        ),
        ("--- a\n+++ b\n@@ -1 +1 @@\n x\n-y\n", r"line 5: expected a hunk header, got '-y'"),
        (
            "--- a\n+++ b\n@@ -1,2 +1 @@\n x\n+y\n",
            r"line 5: hunk has more lines than its header declares",
        ),
        ("--- a\n+++ b\n@@ -1 +1 @@\n*x\n", r"line 4: unexpected line in hunk: '\*x'"),
        ("--- a\n+++ b\n@@ -1 +1 @@\n\\ No newline\n", r"line 4: unexpected line in hunk"),
        (
            "--- a\n+++ b\n@@ -1,2 +1,2 @@\n x\n-y\n+z\n@@ -2 +2 @@\n-y\n+w\n",
            r"line 7: hunk 2 overlaps the previous hunk",
        ),
    ],
    ids=[
        "empty",
        "missing-plus-header",
        "no-hunks",
        "bad-hunk-header",
        "truncated-hunk",
        "extra-line-after-hunk",
        "too-many-new-lines",
        "bad-marker",
        "marker-before-any-line",
        "overlapping-hunks",
    ],
)
def test_parse_errors(text, message):
    with pytest.raises(PatchParseError, match=message):
        parse_patch(text)
