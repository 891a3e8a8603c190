"""Command output is capped to a head and a tail with an exact count of what was cut."""

from __future__ import annotations

from etude.sandbox.output import CappedOutput, cap_output


def capture(chunks, head=5, tail=5):
    output = CappedOutput(head, tail)
    for chunk in chunks:
        output.add(chunk)
    return output.text()


def test_short_output_is_whole():
    assert capture([b"abc", b"de"]) == ("abcde", 0)


def test_long_output_keeps_head_and_tail_and_counts_the_middle():
    text, cut = capture([b"0123456789AB"])
    assert cut == 2
    assert text == "01234\n[… 2 characters cut …]\n789AB"


def test_a_hundred_megabytes_are_never_held():
    output = CappedOutput(5000, 5000)
    block = b"y\n" * 50_000
    for _ in range(1000):
        output.add(block)
    output.add(b"THE END")
    text, cut = output.text()
    assert cut == 1000 * len(block) + 7 - 10_000
    assert text.startswith("y\ny\n") and text.endswith("THE END")
    assert len(output._head) + len(output._tail) <= 40_000


def test_multibyte_characters_are_counted_as_characters():
    text, cut = capture(["é".encode() * 20], head=3, tail=3)
    assert cut == 14
    assert text == "ééé\n[… 14 characters cut …]\nééé"


def test_cap_output_keeps_head_and_tail_and_counts_the_cut():
    assert cap_output("short") == ("short", 0)
    assert cap_output("0123456789", head=3, tail=2) == ("012\n[… 5 characters cut …]\n89", 5)
    text, cut = cap_output("x" * 10_001)
    assert cut == 1 and text.count("x") == 10_000
