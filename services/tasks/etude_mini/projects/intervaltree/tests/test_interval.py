import pytest
from intervaltree import Bounds, Interval


def test_interval_rejects_reversed_endpoints():
    with pytest.raises(ValueError, match="interval end 1 is before start 2"):
        Interval(2, 1)


def test_interval_length_key_and_equality_include_data():
    a = Interval(2, 7, "x")
    assert a.length == 5
    assert a.key == (2, 7)
    assert a == Interval(2, 7, "x")
    assert a != Interval(2, 7, "y")


def test_envelops_is_inclusive_at_both_ends():
    outer = Interval(0, 10)
    assert outer.envelops(Interval(0, 10))
    assert outer.envelops(Interval(3, 4))
    assert not outer.envelops(Interval(-1, 4))
    assert not outer.envelops(Interval(5, 11))


@pytest.mark.parametrize(
    ("bounds", "other", "expected"),
    [
        pytest.param("[)", (3, 5), False, id="half-open-touching"),
        pytest.param("[]", (3, 5), True, id="closed-touching"),
        pytest.param("[)", (2, 5), True, id="half-open-sharing-one-unit"),
        pytest.param("[]", (4, 5), False, id="closed-gap"),
        pytest.param("[)", (-2, 1), False, id="half-open-touching-left"),
        pytest.param("[]", (-2, 1), True, id="closed-touching-left"),
    ],
)
def test_overlap_depends_on_bounds_at_shared_endpoints(bounds, other, expected):
    rule = Bounds.coerce(bounds)
    a, b = Interval(1, 3), Interval(*other)
    assert rule.overlaps(a, b) is expected
    assert rule.overlaps(b, a) is expected


@pytest.mark.parametrize(
    ("bounds", "point", "expected"),
    [
        ("[)", 1, True),
        ("[)", 3, False),
        ("[]", 3, True),
        ("[]", 0.999, False),
        ("[)", 2.999, True),
    ],
)
def test_point_containment_at_boundaries(bounds, point, expected):
    assert Bounds.coerce(bounds).contains_point(Interval(1, 3), point) is expected


def test_bounds_coercion_and_rendering():
    assert Bounds.coerce("[]") is Bounds.CLOSED
    assert Bounds.coerce(Bounds.HALF_OPEN) is Bounds.HALF_OPEN
    assert Bounds.CLOSED.render(1, 2) == "[1, 2]"
    assert Bounds.HALF_OPEN.render(1, 2) == "[1, 2)"
    with pytest.raises(ValueError, match=r"bounds must be '\[\)' or '\[\]', got '\(\]'"):
        Bounds.coerce("(]")


def test_empty_ranges_are_only_valid_when_closed():
    Bounds.CLOSED.check(3, 3)
    with pytest.raises(ValueError, match=r"empty interval \[3, 3\) in a half-open tree"):
        Bounds.HALF_OPEN.check(3, 3)
    with pytest.raises(ValueError, match="interval end 2 is before start 3"):
        Bounds.CLOSED.check(3, 2)
