import pytest

from semverkit import (
    InvalidRange,
    InvalidVersion,
    Range,
    max_satisfying,
    min_satisfying,
    parse,
    satisfies,
)


@pytest.mark.parametrize(
    ("spec", "desugared"),
    [
        ("^1.2.3", ">=1.2.3 <2.0.0-0"),
        ("^0.2.3", ">=0.2.3 <0.3.0-0"),
        ("^0.0.3", ">=0.0.3 <0.0.4-0"),
        ("^1.2", ">=1.2.0 <2.0.0-0"),
        ("^0.x", ">=0.0.0 <1.0.0-0"),
        ("^0.0", ">=0.0.0 <0.1.0-0"),
        ("^0.1", ">=0.1.0 <0.2.0-0"),
        ("^0.1.2", ">=0.1.2 <0.2.0-0"),
        ("^1.2.3-beta.2", ">=1.2.3-beta.2 <2.0.0-0"),
        ("^*", "*"),
        ("~1.2.3", ">=1.2.3 <1.3.0-0"),
        ("~1.2", ">=1.2.0 <1.3.0-0"),
        ("~1", ">=1.0.0 <2.0.0-0"),
        ("~>0.5.1", ">=0.5.1 <0.6.0-0"),
        ("~*", "*"),
    ],
)
def test_caret_and_tilde_desugar_like_npm(spec, desugared):
    assert str(Range(spec)) == desugared


@pytest.mark.parametrize(
    ("spec", "desugared"),
    [
        ("1.x", ">=1.0.0 <2.0.0-0"),
        ("1.2.*", ">=1.2.0 <1.3.0-0"),
        ("1", ">=1.0.0 <2.0.0-0"),
        ("1.X.3", ">=1.0.0 <2.0.0-0"),
        ("*", "*"),
        ("", "*"),
        (">1", ">=2.0.0"),
        (">1.2", ">=1.3.0"),
        (">=1.2", ">=1.2.0"),
        ("<1.2", "<1.2.0-0"),
        ("<1", "<1.0.0-0"),
        ("<=1.2", "<1.3.0-0"),
        ("<=1", "<2.0.0-0"),
        (">*", "<0.0.0-0"),
        (">=*", "*"),
        ("=1.2.3", "1.2.3"),
        ("v1.2.3", "1.2.3"),
    ],
)
def test_x_ranges_and_partial_comparators(spec, desugared):
    assert str(Range(spec)) == desugared


@pytest.mark.parametrize(
    ("spec", "desugared"),
    [
        ("1.2.3 - 2.3.4", ">=1.2.3 <=2.3.4"),
        ("1.2 - 2.3.4", ">=1.2.0 <=2.3.4"),
        ("1.2.3 - 2.3", ">=1.2.3 <2.4.0-0"),
        ("1.2.3 - 2", ">=1.2.3 <3.0.0-0"),
        ("1 - 2", ">=1.0.0 <3.0.0-0"),
        ("* - 2.0.0", "<=2.0.0"),
        ("1.0.0 - *", ">=1.0.0"),
    ],
)
def test_hyphen_ranges(spec, desugared):
    assert str(Range(spec)) == desugared


def test_whitespace_between_operator_and_version_is_allowed():
    assert str(Range("  >=  1.0.0   <2.0.0 ")) == ">=1.0.0 <2.0.0"


def test_union_matches_any_alternative():
    spec = Range("1.2.7 || >=1.2.9 <2.0.0")
    assert str(spec) == "1.2.7 || >=1.2.9 <2.0.0"
    results = {v: v in spec for v in ["1.2.6", "1.2.7", "1.2.8", "1.2.9", "1.9.99", "2.0.0"]}
    assert results == {
        "1.2.6": False,
        "1.2.7": True,
        "1.2.8": False,
        "1.2.9": True,
        "1.9.99": True,
        "2.0.0": False,
    }


@pytest.mark.parametrize(
    ("version", "spec", "expected"),
    [
        ("1.2.3", "^1.2.3", True),
        ("1.2.2", "^1.2.3", False),
        ("1.9.9", "^1.2.3", True),
        ("2.0.0", "^1.2.3", False),
        ("0.2.9", "^0.2.3", True),
        ("0.3.0", "^0.2.3", False),
        ("1.2.9", "~1.2.3", True),
        ("1.3.0", "~1.2.3", False),
        ("2.3.4", "1.2.3 - 2.3.4", True),
        ("2.3.5", "1.2.3 - 2.3.4", False),
        ("1.2.3+build", "1.2.3", True),
        ("0.0.0", "<0.0.1", True),
        ("3.0.0", "<=2.9.9 || >3.0.0", False),
    ],
)
def test_satisfies_at_the_boundaries(version, spec, expected):
    assert satisfies(version, spec) is expected


@pytest.mark.parametrize(
    ("version", "spec", "expected"),
    [
        ("1.0.0-rc.1", "*", False),
        ("1.0.0-rc.1", "^1.0.0", False),
        ("1.2.3-rc.2", ">=1.2.3-rc.1", True),
        ("1.2.3-rc.0", ">=1.2.3-rc.1", False),
        ("1.2.4-rc.1", ">=1.2.3-rc.1", False),
        ("1.2.3-rc.2", "^1.2.3-rc.1", True),
        ("2.0.0-rc.1", "^1.2.3-rc.1", False),
        ("1.2.3-rc.2", ">1.0.0 || >=1.2.3-rc.1", True),
    ],
)
def test_prereleases_only_match_when_opted_in_for_the_same_release(version, spec, expected):
    assert satisfies(version, spec) is expected


def test_include_prerelease_drops_the_same_release_restriction():
    assert satisfies("1.5.0-beta", "^1.0.0", include_prerelease=True) is True
    assert satisfies("2.0.0-beta", "^1.0.0", include_prerelease=True) is False
    assert satisfies("1.0.0-rc", "*", include_prerelease=True) is True


def test_max_and_min_satisfying():
    versions = ["1.2.3", "1.2.4", "1.3.0", "2.0.0", "1.2.5-rc.1"]
    assert str(max_satisfying(versions, "~1.2")) == "1.2.4"
    assert str(min_satisfying(versions, "~1.2")) == "1.2.3"
    assert str(max_satisfying(versions, "^1")) == "1.3.0"
    assert str(max_satisfying(versions, "~1.2", include_prerelease=True)) == "1.2.5-rc.1"
    assert max_satisfying(versions, ">=3") is None
    assert min_satisfying([], "*") is None


def test_satisfying_prefers_the_first_of_equal_precedence():
    versions = [parse("1.0.0+a"), parse("1.0.0+b"), parse("0.9.0")]
    assert str(max_satisfying(versions, "*")) == "1.0.0+a"
    assert str(min_satisfying(["1.0.0+x", "1.0.0+y"], "1.x")) == "1.0.0+x"


def test_impossible_comparators_match_nothing():
    assert satisfies("0.0.0", ">*") is False
    assert satisfies("0.0.0-0", "<*", include_prerelease=True) is False


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (">=", r"invalid version '' in range '>='"),
        ("^", r"invalid version '' in range '\^'"),
        ("1.02", r"invalid version '1\.02' in range '1\.02'"),
        ("1.2.3.4", r"invalid version '1\.2\.3\.4'"),
        ("banana", r"invalid version 'banana'"),
        ("1.2-rc", r"invalid version '1\.2-rc'"),
        ("1.2.x-rc", r"prerelease needs a full version in range '1\.2\.x-rc'"),
        ("^1.2.3-01", r"invalid version '1\.2\.3-01' in range '\^1\.2\.3-01': numeric"),
        (">=1 - 2", r"invalid version '>=1'"),
    ],
    ids=[
        "bare-operator",
        "bare-caret",
        "leading-zero",
        "four-parts",
        "word",
        "partial-prerelease",
        "wildcard-prerelease",
        "bad-prerelease",
        "operator-in-hyphen",
    ],
)
def test_invalid_ranges_are_rejected(spec, message):
    with pytest.raises(InvalidRange, match=message):
        Range(spec)


def test_testing_an_invalid_version_raises():
    with pytest.raises(InvalidVersion, match=r"expected MAJOR\.MINOR\.PATCH"):
        satisfies("1.2", "^1.0.0")
    with pytest.raises(TypeError, match="expected a string, got list"):
        Range(["^1"])  # type: ignore[arg-type]


def test_comparators_are_exposed_per_set():
    spec = Range("^1.2.3 || 2.x")
    assert [[str(c) for c in group] for group in spec.sets] == [
        [">=1.2.3", "<2.0.0-0"],
        [">=2.0.0", "<3.0.0-0"],
    ]
    first = spec.sets[0][0]
    assert (first.op, first.test(parse("1.2.3")), first.test(parse("1.2.2"))) == (">=", True, False)
    assert repr(spec) == "Range('^1.2.3 || 2.x')"


def test_ranges_can_be_reused_with_version_objects():
    spec = Range("~2.4")
    assert [spec.test(parse(v)) for v in ("2.3.9", "2.4.0", "2.4.17", "2.5.0")] == [
        False,
        True,
        True,
        False,
    ]
