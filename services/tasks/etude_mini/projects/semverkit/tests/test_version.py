import itertools

import pytest

from semverkit import InvalidVersion, Version, compare, is_valid, parse


def test_parses_all_components():
    version = parse("1.22.333-rc.1.x-y+build.007")
    assert (version.major, version.minor, version.patch) == (1, 22, 333)
    assert version.prerelease == ("rc", 1, "x-y")
    assert version.build == ("build", "007")
    assert version.is_prerelease is True


@pytest.mark.parametrize(
    "text",
    [
        "0.0.0",
        "1.2.3",
        "10.20.30",
        "1.0.0-alpha",
        "1.0.0-0.3.7",
        "1.0.0-x.7.z.92",
        "1.0.0--1",
        "1.0.0+20130313144700",
        "1.0.0-beta+exp.sha.5114f85",
        "1.0.0-0A.is.legal",
    ],
)
def test_valid_versions_round_trip_through_str(text):
    assert str(parse(text)) == text
    assert is_valid(text) is True


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1.2", r"expected MAJOR\.MINOR\.PATCH, got '1\.2'"),
        ("1.2.3.4", r"expected MAJOR\.MINOR\.PATCH"),
        ("v1.2.3", r"major must be a non-negative integer, got 'v1'"),
        ("1.-2.3", r"expected MAJOR\.MINOR\.PATCH"),
        ("01.2.3", r"major must not have leading zeros, got '01'"),
        ("1.02.3", r"minor must not have leading zeros, got '02'"),
        ("1.2.03", r"patch must not have leading zeros, got '03'"),
        ("1.2.x", r"patch must be a non-negative integer, got 'x'"),
        ("1.2.²", r"patch must be a non-negative integer"),
        ("1.2.3-", r"prerelease identifiers must not be empty"),
        ("1.2.3-a..b", r"prerelease identifiers must not be empty"),
        ("1.2.3-01", r"numeric prerelease identifier must not have leading zeros, got '01'"),
        ("1.2.3-a_b", r"invalid character in prerelease identifier 'a_b'"),
        ("1.2.3+", r"build identifiers must not be empty"),
        ("1.2.3+a+b", r"invalid character in build identifier 'a\+b'"),
        ("", r"expected MAJOR\.MINOR\.PATCH, got ''"),
    ],
    ids=[
        "two-parts",
        "four-parts",
        "v-prefix",
        "negative",
        "zero-major",
        "zero-minor",
        "zero-patch",
        "wildcard",
        "unicode-digit",
        "empty-prerelease",
        "empty-identifier",
        "numeric-leading-zero",
        "underscore",
        "empty-build",
        "double-plus",
        "empty",
    ],
)
def test_invalid_versions_are_rejected_with_a_reason(text, message):
    with pytest.raises(InvalidVersion, match=message):
        parse(text)
    assert is_valid(text) is False


def test_build_identifiers_may_have_leading_zeros():
    assert parse("1.0.0+001").build == ("001",)


def test_parse_rejects_non_strings():
    with pytest.raises(TypeError, match="expected a string, got int"):
        parse(123)  # type: ignore[arg-type]


def test_constructor_validates_and_normalizes_identifiers():
    assert Version(1, 0, 0, ("rc", "7")).prerelease == ("rc", 7)
    with pytest.raises(InvalidVersion, match="minor must be a non-negative integer, got -1"):
        Version(1, -1, 0)
    with pytest.raises(InvalidVersion, match="numeric prerelease identifiers must not be neg"):
        Version(1, 0, 0, (-1,))
    with pytest.raises(InvalidVersion, match="invalid prerelease identifier True"):
        Version(1, 0, 0, (True,))
    with pytest.raises(InvalidVersion, match="invalid character in build identifier 'a b'"):
        Version(1, 0, 0, (), ("a b",))


def test_spec_precedence_example_is_strictly_increasing():
    chain = [
        "1.0.0-alpha",
        "1.0.0-alpha.1",
        "1.0.0-alpha.beta",
        "1.0.0-beta",
        "1.0.0-beta.2",
        "1.0.0-beta.11",
        "1.0.0-rc.1",
        "1.0.0",
        "1.0.1",
        "1.1.0",
        "2.0.0",
    ]
    versions = [parse(text) for text in chain]
    for lower, higher in itertools.pairwise(versions):
        assert lower < higher and higher > lower
        assert lower.compare(higher) == -1 and higher.compare(lower) == 1
    assert sorted(reversed(versions)) == versions


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("1.2.3", "1.2.3", 0),
        ("1.10.0", "1.9.0", 1),
        ("2.0.0", "10.0.0", -1),
        ("1.0.0-2", "1.0.0-10", -1),
        ("1.0.0-rc.1", "1.0.0-rc.1+build", 0),
        ("1.0.0-1.alpha", "1.0.0-1.beta", -1),
        ("1.0.0-a10", "1.0.0-a9", -1),
        ("1.0.0-999", "1.0.0-a", -1),
        ("1.0.0-B", "1.0.0-a", -1),
        ("1.0.0-rc.1", "1.0.0-rc", 1),
        ("1.0.0", "1.0.0-rc.1", 1),
        ("1.0.0+b", "1.0.0+a", 0),
    ],
    ids=[
        "equal",
        "numeric-minor",
        "numeric-major",
        "numeric-identifiers",
        "equal-prereleases",
        "equal-numeric-prefix",
        "lexical-identifiers",
        "numeric-before-alpha",
        "ascii-case",
        "longer-wins",
        "release-wins",
        "build-ignored",
    ],
)
def test_compare_follows_semver_precedence(a, b, expected):
    assert compare(a, b) == expected
    assert compare(b, a) == -expected


def test_equality_and_hash_ignore_build_metadata():
    a, b = parse("1.0.0+linux"), parse("1.0.0+mac")
    assert a == b and hash(a) == hash(b)
    assert len({a, b, parse("1.0.0-rc")}) == 2
    assert a != "1.0.0"


@pytest.mark.parametrize(
    ("start", "part", "expected"),
    [
        ("1.2.3", "major", "2.0.0"),
        ("1.2.3", "minor", "1.3.0"),
        ("1.2.3", "patch", "1.2.4"),
        ("1.2.3+build.5", "patch", "1.2.4"),
        ("2.0.0-rc.1", "major", "2.0.0"),
        ("2.1.0-rc.1", "major", "3.0.0"),
        ("2.0.1-rc.1", "major", "3.0.0"),
        ("1.3.0-rc.1", "minor", "1.3.0"),
        ("1.3.1-rc.1", "minor", "1.4.0"),
        ("1.2.4-rc.1", "patch", "1.2.4"),
        ("1.2.4-rc.1+b", "release", "1.2.4"),
        ("1.2.3", "release", "1.2.3"),
    ],
)
def test_bumps_follow_npm_rules(start, part, expected):
    assert str(parse(start).bump(part)) == expected


@pytest.mark.parametrize(
    ("start", "identifier", "expected"),
    [
        ("1.2.3", None, "1.2.4-0"),
        ("1.2.3", "rc", "1.2.4-rc.0"),
        ("1.2.4-0", None, "1.2.4-1"),
        ("1.2.4-rc.1", None, "1.2.4-rc.2"),
        ("1.2.4-rc.9", "rc", "1.2.4-rc.10"),
        ("1.2.4-rc", None, "1.2.4-rc.0"),
        ("1.2.4-alpha.1.beta", None, "1.2.4-alpha.2.beta"),
        ("1.2.4-alpha.3", "beta", "1.2.4-beta.0"),
        ("1.2.4-rc.1+build", None, "1.2.4-rc.2"),
    ],
)
def test_prerelease_bumps(start, identifier, expected):
    assert str(parse(start).bump_prerelease(identifier)) == expected


def test_bump_rejects_bad_parts_and_identifiers():
    version = parse("1.2.3")
    with pytest.raises(ValueError, match="unknown version part 'micro'"):
        version.bump("micro")
    with pytest.raises(ValueError, match="an identifier only applies to prerelease bumps"):
        version.bump("minor", "rc")
    with pytest.raises(InvalidVersion, match="prerelease identifier must not be numeric"):
        version.bump("prerelease", "7")
    with pytest.raises(InvalidVersion, match=r"invalid character in prerelease identifier 'r\.c'"):
        version.bump_prerelease("r.c")


def test_release_is_not_a_prerelease_and_finalize_strips_metadata():
    version = parse("3.1.4-beta.2+sha.abc")
    assert parse("3.1.4").is_prerelease is False
    assert str(version.finalize()) == "3.1.4"
    assert version.finalize().build == ()


def test_sorting_a_shuffled_release_history():
    history = ["1.10.0", "1.2.0", "1.2.0-rc.10", "1.2.0-rc.2", "0.9.9", "1.2.0-beta"]
    assert [str(v) for v in sorted(map(parse, history))] == [
        "0.9.9",
        "1.2.0-beta",
        "1.2.0-rc.2",
        "1.2.0-rc.10",
        "1.2.0",
        "1.10.0",
    ]


def test_ordering_against_other_types_is_unsupported():
    with pytest.raises(TypeError):
        _ = parse("1.0.0") < "2.0.0"  # type: ignore[operator]
