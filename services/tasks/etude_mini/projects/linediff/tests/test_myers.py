from linediff import Opcode, diff_opcodes, lcs, ratio


def test_classic_myers_example():
    assert diff_opcodes("ABCABBA", "CBABAC") == [
        Opcode("delete", 0, 2, 0, 0),
        Opcode("equal", 2, 3, 0, 1),
        Opcode("insert", 3, 3, 1, 2),
        Opcode("equal", 3, 5, 2, 4),
        Opcode("delete", 5, 6, 4, 4),
        Opcode("equal", 6, 7, 4, 5),
        Opcode("insert", 7, 7, 5, 6),
    ]


def test_identical_and_empty_sequences():
    assert diff_opcodes("abc", "abc") == [Opcode("equal", 0, 3, 0, 3)]
    assert diff_opcodes("", "") == []


def test_one_empty_side_is_a_single_insert_or_delete():
    assert diff_opcodes("", "xy") == [Opcode("insert", 0, 0, 0, 2)]
    assert diff_opcodes("xy", "") == [Opcode("delete", 0, 2, 0, 0)]


def test_adjacent_delete_and_insert_become_replace():
    assert diff_opcodes("abc", "axc") == [
        Opcode("equal", 0, 1, 0, 1),
        Opcode("replace", 1, 2, 1, 2),
        Opcode("equal", 2, 3, 2, 3),
    ]


def test_common_prefix_and_suffix_are_kept_whole():
    assert diff_opcodes("prefix-A-suffix", "prefix-BB-suffix") == [
        Opcode("equal", 0, 7, 0, 7),
        Opcode("replace", 7, 8, 7, 9),
        Opcode("equal", 8, 15, 9, 16),
    ]


def test_works_on_lists_of_any_hashable_items():
    old = [1, (2, 3), "x", None]
    new = [(2, 3), "x", None, 4]
    assert diff_opcodes(old, new) == [
        Opcode("delete", 0, 1, 0, 0),
        Opcode("equal", 1, 4, 0, 3),
        Opcode("insert", 4, 4, 3, 4),
    ]


def test_lcs_is_a_longest_common_subsequence():
    assert lcs("ABCBDAB", "BDCABA") == ["B", "D", "A", "B"]
    assert lcs("abc", "xyz") == []


def test_ratio():
    assert ratio("abcd", "bcde") == 0.75
    assert ratio("", "") == 1.0
    assert ratio("abc", "") == 0.0
    assert ratio(["a", "b"], ["a", "b"]) == 1.0
