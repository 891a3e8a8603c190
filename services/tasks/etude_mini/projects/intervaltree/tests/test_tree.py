import random
from datetime import date

import pytest
from intervaltree import Bounds, Interval, IntervalTree


def spans(intervals):
    return [(i.start, i.end) for i in intervals]


@pytest.fixture
def half_open():
    return IntervalTree([(1, 3, "a"), (3, 5, "b"), (4, 9, "c"), (10, 12, "d")], bounds="[)")


@pytest.fixture
def closed():
    return IntervalTree([(1, 3, "a"), (3, 5, "b"), (4, 9, "c"), (10, 12, "d")], bounds="[]")


def test_bounds_must_be_given_explicitly():
    with pytest.raises(TypeError, match="bounds"):
        IntervalTree([(1, 2)])
    assert IntervalTree(bounds=Bounds.CLOSED).bounds is Bounds.CLOSED


def test_iterates_in_start_then_end_order():
    tree = IntervalTree([(5, 6), (1, 9), (1, 2), (3, 4)], bounds="[)")
    assert spans(tree) == [(1, 2), (1, 9), (3, 4), (5, 6)]
    assert len(tree) == 4


def test_stabbing_query_half_open_excludes_end_point(half_open):
    assert [i.data for i in half_open.at(3)] == ["b"]
    assert [i.data for i in half_open.at(1)] == ["a"]
    assert [i.data for i in half_open.at(4.5)] == ["b", "c"]
    assert half_open.at(9) == []
    assert half_open.at(0) == []


def test_stabbing_query_closed_includes_both_end_points(closed):
    assert [i.data for i in closed.at(3)] == ["a", "b"]
    assert [i.data for i in closed.at(9)] == ["c"]
    assert [i.data for i in closed.at(12)] == ["d"]
    assert closed.at(12.5) == []


def test_overlap_query_half_open_boundaries(half_open):
    assert [i.data for i in half_open.overlapping(2, 4)] == ["a", "b"]
    assert [i.data for i in half_open.overlapping(9, 10)] == []
    assert [i.data for i in half_open.overlapping(8.9, 10.1)] == ["c", "d"]


def test_overlap_query_closed_boundaries(closed):
    assert [i.data for i in closed.overlapping(2, 4)] == ["a", "b", "c"]
    assert [i.data for i in closed.overlapping(9, 10)] == ["c", "d"]
    assert [i.data for i in closed.overlapping(6, 6)] == ["c"]


def test_query_ranges_are_validated(half_open, closed):
    with pytest.raises(ValueError, match=r"empty interval \[4, 4\)"):
        half_open.overlapping(4, 4)
    with pytest.raises(ValueError, match="interval end 1 is before start 5"):
        closed.overlapping(5, 1)
    with pytest.raises(ValueError, match="interval end 0 is before start 2"):
        closed.enveloped_by(2, 0)


def test_enveloped_by_requires_full_containment(half_open):
    assert [i.data for i in half_open.enveloped_by(1, 5)] == ["a", "b"]
    assert [i.data for i in half_open.enveloped_by(1, 4.99)] == ["a"]
    assert [i.data for i in half_open.enveloped_by(1.01, 12)] == ["b", "c", "d"]
    assert [i.data for i in half_open.enveloped_by(0, 100)] == ["a", "b", "c", "d"]


def test_enveloped_by_finds_same_start_with_shorter_end():
    tree = IntervalTree([(5, 20), (5, 6), (5, 8), (7, 8), (1, 6)], bounds="[]")
    assert spans(tree.enveloped_by(5, 8)) == [(5, 6), (5, 8), (7, 8)]


def test_enveloped_by_includes_point_interval_at_closed_query_end():
    tree = IntervalTree([(5, 5, "end"), (1, 1, "start"), (2, 6, "over")], bounds="[]")
    assert [i.data for i in tree.enveloped_by(1, 5)] == ["start", "end"]


def test_insert_rejects_empty_interval_only_in_half_open_tree():
    with pytest.raises(ValueError, match=r"empty interval \[2, 2\) in a half-open tree"):
        IntervalTree([(2, 2)], bounds="[)")
    tree = IntervalTree([(2, 2, "point")], bounds="[]")
    assert [i.data for i in tree.at(2)] == ["point"]


def test_insert_rejects_malformed_values():
    tree = IntervalTree(bounds="[)")
    with pytest.raises(TypeError, match="expected Interval or"):
        tree.insert([1, 2])
    with pytest.raises(TypeError, match="expected Interval or"):
        tree.insert((1, 2, 3, 4))


def test_duplicate_intervals_are_ignored_but_payloads_distinguish():
    tree = IntervalTree(bounds="[)")
    assert tree.insert((1, 4, "x")) is True
    assert tree.insert(Interval(1, 4, "x")) is False
    assert tree.insert((1, 4, "y")) is True
    assert len(tree) == 2
    assert [i.data for i in tree.at(2)] == ["x", "y"]


def test_remove_requires_matching_payload(half_open):
    with pytest.raises(KeyError, match=r"interval not in tree: Interval\(start=1, end=3"):
        half_open.remove((1, 3))
    half_open.remove((1, 3, "a"))
    assert half_open.at(2) == []
    assert half_open.discard((1, 3, "a")) is False
    assert len(half_open) == 3
    half_open.check_invariants()


def test_removing_one_payload_keeps_the_other_in_the_same_range():
    tree = IntervalTree([(1, 4, "x"), (1, 4, "y"), (0, 9, "z")], bounds="[)")
    tree.remove((1, 4, "x"))
    assert [i.data for i in tree.at(2)] == ["z", "y"]
    assert (1, 4, "y") in tree
    assert (1, 4, "x") not in tree


def test_contains_handles_foreign_values(half_open):
    assert (4, 9, "c") in half_open
    assert (4, 9) not in half_open
    assert "nonsense" not in half_open
    assert (5, 1) not in half_open


def test_delete_node_with_two_children_keeps_max_end_correct():
    tree = IntervalTree([(5, 6), (2, 100), (8, 9), (1, 2), (3, 4), (7, 8), (9, 10)], bounds="[)")
    tree.remove((5, 6))
    tree.check_invariants()
    tree.remove((2, 100))
    tree.check_invariants()
    assert tree.at(50) == []
    assert tree.span() == Interval(1, 10)


@pytest.mark.parametrize(
    ("starts", "removed"),
    [
        pytest.param([0, 4, 9, 8, 2, 10, 5, 11], 0, id="right-heavy-after-delete"),
        pytest.param([0, 2, 7, 10, 11, 4, 1, 5], 7, id="left-heavy-after-delete"),
    ],
)
def test_delete_rebalances_with_single_rotation_when_child_is_even(starts, removed):
    tree = IntervalTree(((s, s + 1) for s in starts), bounds="[)")
    tree.remove((removed, removed + 1))
    tree.check_invariants()
    assert tree.height == 4
    assert [i.start for i in tree] == sorted(set(starts) - {removed})


def corruptible_tree():
    tree = IntervalTree([(1, 2), (2, 9), (3, 4)], bounds="[)")
    tree.check_invariants()
    return tree, tree._root


def test_invariant_checker_detects_stale_max_end():
    tree, root = corruptible_tree()
    root.max_end = 4
    with pytest.raises(AssertionError, match=r"stale height or max_end at \(2, 9\)"):
        tree.check_invariants()


def test_invariant_checker_detects_misordered_keys():
    tree, root = corruptible_tree()
    root.left, root.right = root.right, root.left
    with pytest.raises(AssertionError, match=r"key \(3, 4\) out of order"):
        tree.check_invariants()


@pytest.mark.parametrize("side", ["left", "right"])
def test_invariant_checker_rejects_duplicate_keys(side):
    tree, root = corruptible_tree()
    getattr(root, side).key = root.key
    with pytest.raises(AssertionError, match=r"key \(2, 9\) out of order"):
        tree.check_invariants()


def test_invariant_checker_detects_imbalance():
    tree, root = corruptible_tree()
    root.left = None
    root.right.right = root.__class__(Interval(5, 6))
    root.right.height, root.right.max_end = 2, 6
    with pytest.raises(AssertionError, match=r"node \(2, 9\) is unbalanced"):
        tree.check_invariants()


def test_invariant_checker_detects_size_mismatch():
    tree, _ = corruptible_tree()
    tree._size = 4
    with pytest.raises(AssertionError, match="size 4 but 3 intervals stored"):
        tree.check_invariants()


def test_sequential_inserts_stay_balanced():
    tree = IntervalTree(((i, i + 1) for i in range(1023)), bounds="[)")
    assert tree.height == 10
    tree.check_invariants()
    for i in range(0, 1023, 2):
        tree.remove((i, i + 1))
    tree.check_invariants()
    assert len(tree) == 511
    assert tree.height <= 10


def test_span_covers_everything_and_is_none_when_empty(half_open):
    assert half_open.span() == Interval(1, 12)
    assert IntervalTree(bounds="[]").span() is None


def test_merged_half_open_keeps_touching_intervals_apart():
    tree = IntervalTree([(1, 3), (3, 5), (4, 9), (10, 12), (11, 11.5)], bounds="[)")
    assert spans(tree.merged()) == [(1, 3), (3, 9), (10, 12)]
    assert spans(tree.merged(touching=True)) == [(1, 9), (10, 12)]


def test_merged_closed_joins_touching_intervals():
    tree = IntervalTree([(1, 3, "a"), (3, 5, "b"), (6, 7, "c"), (7, 7, "d")], bounds="[]")
    merged = tree.merged()
    assert merged == [Interval(1, 5), Interval(6, 7)]
    assert all(i.data is None for i in merged)


def test_merged_of_nested_intervals_keeps_outer_end():
    tree = IntervalTree([(0, 10), (1, 2), (3, 4)], bounds="[)")
    assert spans(tree.merged()) == [(0, 10)]


def test_works_with_dates():
    tree = IntervalTree(bounds="[)")
    tree.insert((date(2024, 1, 1), date(2024, 2, 1), "january"))
    tree.insert((date(2024, 2, 1), date(2024, 3, 1), "february"))
    assert [i.data for i in tree.at(date(2024, 2, 1))] == ["february"]
    assert tree.span().length.days == 60


def test_clear_bool_and_repr(half_open):
    assert bool(half_open)
    assert bool(IntervalTree([(1, 2)], bounds="[)"))
    assert repr(half_open) == "IntervalTree(4 intervals, bounds='[)')"
    half_open.clear()
    assert not half_open
    assert list(half_open) == []
    assert half_open.height == 0


@pytest.mark.parametrize("bounds", ["[)", "[]"])
def test_queries_match_brute_force_after_random_edits(bounds):
    rng = random.Random(20240307)
    rule = Bounds.coerce(bounds)
    tree = IntervalTree(bounds=bounds)
    reference: list[Interval] = []
    for step in range(600):
        start = rng.randint(0, 60)
        interval = Interval(start, start + rng.randint(1, 15), step % 3)
        if reference and rng.random() < 0.35:
            victim = reference.pop(rng.randrange(len(reference)))
            tree.remove(victim)
        elif interval not in reference:
            reference.append(interval)
            assert tree.insert(interval) is True
    tree.check_invariants()
    assert len(tree) == len(reference)
    ordered = sorted(reference, key=lambda i: i.key)
    for lo in range(-1, 78, 3):
        hi = lo + 4
        query = Interval(lo, hi)
        expected = [i for i in ordered if rule.overlaps(i, query)]
        assert sorted(tree.overlapping(lo, hi), key=repr) == sorted(expected, key=repr)
        assert set(map(repr, tree.at(lo))) == {
            repr(i) for i in ordered if rule.contains_point(i, lo)
        }
        assert set(map(repr, tree.enveloped_by(lo, hi))) == {
            repr(i) for i in ordered if query.envelops(i)
        }
