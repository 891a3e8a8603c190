"""npm-style version ranges: caret, tilde, x-ranges, hyphen ranges and ``||`` unions.

A range is a union of comparator sets; a version satisfies the range if it satisfies every
comparator of at least one set. Sugar is desugared at parse time, e.g. ``^1.2.3`` becomes
``>=1.2.3 <2.0.0-0``, and ``str(Range(...))`` shows the result. Exclusive upper bounds end
at ``-0``, the lowest prerelease, so that ``^1.2.3`` never admits ``2.0.0-beta``.
"""

import operator
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .version import InvalidVersion, Version

_OPERATORS: dict[str, Callable[[Version, Version], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "=": operator.eq,
}
_PARTIAL = re.compile(
    r"v?(?P<major>0|[1-9][0-9]*|[xX*])"
    r"(?:\.(?P<minor>0|[1-9][0-9]*|[xX*])"
    r"(?:\.(?P<patch>0|[1-9][0-9]*|[xX*])(?P<rest>[-+][0-9A-Za-z.+-]*)?)?)?"
)
_COMPARATOR = re.compile(r"(?P<op>\^|~>?|<=|>=|<|>|=)?(?P<version>.*)")
_HYPHEN = re.compile(r"(?P<low>\S+)\s+-\s+(?P<high>\S+)")
# Nothing sorts below 0.0.0-0, so "<0.0.0-0" is a comparator no version satisfies.
_NOTHING = ("<", Version(0, 0, 0, (0,)))

Partial = tuple[int | None, int | None, int | None, Version | None]


class InvalidRange(ValueError):
    """The text is not a valid version range."""


@dataclass(frozen=True)
class Comparator:
    op: str
    version: Version

    def test(self, version: Version) -> bool:
        return _OPERATORS[self.op](version, self.version)

    def __str__(self) -> str:
        return f"{'' if self.op == '=' else self.op}{self.version}"


def _parse_partial(text: str, source: str) -> Partial:
    """Parse ``1``, ``1.2``, ``1.x``, ``1.2.3-rc.1`` ...; wildcards and missing parts are None.

    The fourth element is the full version, set only when all three numbers are present.
    """
    match = _PARTIAL.fullmatch(text)
    if match is None:
        raise InvalidRange(f"invalid version {text!r} in range {source!r}")
    numbers: list[int | None] = []
    for name in ("major", "minor", "patch"):
        part = match.group(name)
        # Once one part is a wildcard the rest are too: "1.x.3" means "1.x".
        if part is None or part in "xX*" or (numbers and numbers[-1] is None):
            numbers.append(None)
        else:
            numbers.append(int(part))
    major, minor, patch = numbers
    if patch is None:
        if match.group("rest"):
            raise InvalidRange(f"prerelease needs a full version in range {source!r}")
        return major, minor, patch, None
    try:
        full = Version.parse(f"{major}.{minor}.{patch}{match.group('rest') or ''}")
    except InvalidVersion as exc:
        raise InvalidRange(f"invalid version {text!r} in range {source!r}: {exc}") from None
    return major, minor, patch, full


def _floor(major: int, minor: int | None, patch: int | None) -> Version:
    return Version(major, minor or 0, patch or 0)


def _next(major: int, minor: int | None) -> Version:
    """The first release above the wildcard range ``major.minor.x`` (or ``major.x``)."""
    return Version(major + 1, 0, 0) if minor is None else Version(major, minor + 1, 0)


def _below(major: int, minor: int, patch: int) -> tuple[str, Version]:
    """An exclusive upper bound that also excludes the prereleases of the bound itself."""
    return ("<", Version(major, minor, patch, (0,)))


def _below_next(major: int, minor: int | None) -> tuple[str, Version]:
    upper = _next(major, minor)
    return _below(upper.major, upper.minor, upper.patch)


def _caret(partial: Partial) -> list[tuple[str, Version]]:
    """Allow changes that do not modify the left-most non-zero part."""
    major, minor, patch, full = partial
    if major is None:
        return []
    low = full or _floor(major, minor, patch)
    if minor is None or major > 0:
        return [(">=", low), _below(major + 1, 0, 0)]
    if patch is None or minor > 0:
        return [(">=", low), _below(0, minor + 1, 0)]
    return [(">=", low), _below(0, 0, patch + 1)]


def _tilde(partial: Partial) -> list[tuple[str, Version]]:
    """Allow patch-level changes if a minor version is given, minor-level changes if not."""
    major, minor, patch, full = partial
    if major is None:
        return []
    return [(">=", full or _floor(major, minor, patch)), _below_next(major, minor)]


def _primitive(op: str, partial: Partial) -> list[tuple[str, Version]]:
    """A plain comparator, where a partial version stands for a whole x-range."""
    major, minor, _, full = partial
    if full is not None:
        return [(op or "=", full)]
    if major is None:
        return [_NOTHING] if op in ("<", ">") else []
    if op in ("", "="):
        return [(">=", _floor(major, minor, None)), _below_next(major, minor)]
    if op == ">":
        return [(">=", _next(major, minor))]
    if op == "<=":
        return [_below_next(major, minor)]
    if op == "<":
        return [_below(major, minor or 0, 0)]
    return [(op, _floor(major, minor, None))]


def _hyphen(low: Partial, high: Partial) -> list[tuple[str, Version]]:
    """``A - B``: a partial A is filled with zeros, a partial B means "up to the end of B"."""
    result = []
    if low[0] is not None:
        result.append((">=", low[3] or _floor(low[0], low[1], low[2])))
    if high[3] is not None:
        result.append(("<=", high[3]))
    elif high[0] is not None:
        result.append(_below_next(high[0], high[1]))
    return result


def _parse_set(text: str, source: str) -> tuple[Comparator, ...]:
    hyphen = _HYPHEN.fullmatch(text)
    if hyphen:
        low = _parse_partial(hyphen["low"], source)
        pairs = _hyphen(low, _parse_partial(hyphen["high"], source))
        return tuple(Comparator(op, version) for op, version in pairs)
    # Allow a space between an operator and its version: ">= 1.2.3".
    text = re.sub(r"(\^|~>?|<=|>=|<|>|=)\s+", r"\1", text)
    comparators: list[Comparator] = []
    for token in text.split():
        match = _COMPARATOR.fullmatch(token)
        assert match is not None  # The pattern accepts any token.
        op, partial = match["op"] or "", _parse_partial(match["version"], source)
        if op == "^":
            pairs = _caret(partial)
        elif op.startswith("~"):
            pairs = _tilde(partial)
        else:
            pairs = _primitive(op, partial)
        comparators.extend(Comparator(o, version) for o, version in pairs)
    return tuple(comparators)


class Range:
    """A parsed range. Prereleases only match when a comparator in the same set names a
    prerelease of the same ``major.minor.patch`` (so ``>=1.0.0-rc.1`` admits 1.0.0-rc.2 but
    not 1.1.0-rc.1), unless ``include_prerelease=True``.
    """

    def __init__(self, text: str) -> None:
        if not isinstance(text, str):
            raise TypeError(f"expected a string, got {type(text).__name__}")
        self.raw = text
        self.sets = tuple(_parse_set(part.strip(), text) for part in text.split("||"))

    def __str__(self) -> str:
        return " || ".join(" ".join(map(str, s)) or "*" for s in self.sets)

    def __repr__(self) -> str:
        return f"Range({self.raw!r})"

    def test(self, version: Version | str, *, include_prerelease: bool = False) -> bool:
        version = version if isinstance(version, Version) else Version.parse(version)
        return any(_test_set(s, version, include_prerelease) for s in self.sets)

    def __contains__(self, version: Version | str) -> bool:
        return self.test(version)


def _test_set(comparators: tuple[Comparator, ...], version: Version, include: bool) -> bool:
    if not all(c.test(version) for c in comparators):
        return False
    if not version.prerelease or include:
        return True
    # Opting into prereleases of one release must not admit prereleases of all later ones.
    core = (version.major, version.minor, version.patch)
    return any(
        c.version.prerelease and (c.version.major, c.version.minor, c.version.patch) == core
        for c in comparators
    )


def _as_range(spec: Range | str) -> Range:
    return spec if isinstance(spec, Range) else Range(spec)


def satisfies(
    version: Version | str, spec: Range | str, *, include_prerelease: bool = False
) -> bool:
    return _as_range(spec).test(version, include_prerelease=include_prerelease)


def _matching(
    versions: Iterable[Version | str], spec: Range | str, include_prerelease: bool
) -> list[Version]:
    candidates = [v if isinstance(v, Version) else Version.parse(v) for v in versions]
    range_ = _as_range(spec)
    return [v for v in candidates if range_.test(v, include_prerelease=include_prerelease)]


def max_satisfying(
    versions: Iterable[Version | str], spec: Range | str, *, include_prerelease: bool = False
) -> Version | None:
    """The highest version in ``versions`` within ``spec`` (the first of equals), or None."""
    best = None
    for version in _matching(versions, spec, include_prerelease):
        if best is None or version > best:
            best = version
    return best


def min_satisfying(
    versions: Iterable[Version | str], spec: Range | str, *, include_prerelease: bool = False
) -> Version | None:
    """The lowest version in ``versions`` within ``spec`` (the first of equals), or None."""
    best = None
    for version in _matching(versions, spec, include_prerelease):
        if best is None or version < best:
            best = version
    return best
