"""Semantic Versioning 2.0.0 versions: strict parsing, precedence and bumping."""

import re
from dataclasses import dataclass
from functools import total_ordering

Identifier = int | str

_NUMBER = re.compile(r"0|[1-9][0-9]*")
_ALPHANUMERIC = re.compile(r"[0-9A-Za-z-]+")
_PARTS = ("major", "minor", "patch")


class InvalidVersion(ValueError):
    """The text is not a valid semantic version."""


def _parse_number(name: str, text: str) -> int:
    if not text.isascii() or not text.isdigit():
        raise InvalidVersion(f"{name} must be a non-negative integer, got {text!r}")
    if _NUMBER.fullmatch(text) is None:
        raise InvalidVersion(f"{name} must not have leading zeros, got {text!r}")
    return int(text)


def _parse_identifier(kind: str, text: str) -> Identifier:
    """Parse one dot-separated identifier; numeric prerelease identifiers become ints."""
    if not text:
        raise InvalidVersion(f"{kind} identifiers must not be empty")
    if _ALPHANUMERIC.fullmatch(text) is None:
        raise InvalidVersion(f"invalid character in {kind} identifier {text!r}")
    if kind == "prerelease" and text.isdigit():
        return _parse_number("numeric prerelease identifier", text)
    return text


def _compare_identifiers(a: Identifier, b: Identifier) -> int:
    if isinstance(a, int) and isinstance(b, int):
        return (a > b) - (a < b)
    if isinstance(a, int):  # Numeric identifiers always sort before alphanumeric ones.
        return -1
    if isinstance(b, int):
        return 1
    return (a > b) - (a < b)  # ASCII order, as the spec requires.


def _compare_prerelease(a: tuple[Identifier, ...], b: tuple[Identifier, ...]) -> int:
    if not a or not b:
        # A release outranks any of its prereleases: 1.0.0-rc.1 < 1.0.0.
        return (not a) - (not b)
    for left, right in zip(a, b, strict=False):
        result = _compare_identifiers(left, right)
        if result:
            return result
    # With an equal prefix, the longer list of identifiers has higher precedence.
    return (len(a) > len(b)) - (len(a) < len(b))


@total_ordering
@dataclass(frozen=True, eq=False)
class Version:
    """An immutable semantic version.

    Equality, hashing and ordering follow SemVer precedence, which ignores build metadata:
    ``Version.parse("1.0.0+a") == Version.parse("1.0.0+b")``. Compare ``str()`` forms to
    tell such versions apart.
    """

    major: int
    minor: int
    patch: int
    prerelease: tuple[Identifier, ...] = ()
    build: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("major", "minor", "patch"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidVersion(f"{name} must be a non-negative integer, got {value!r}")
        for identifier in self.prerelease:
            if isinstance(identifier, bool) or not isinstance(identifier, int | str):
                raise InvalidVersion(f"invalid prerelease identifier {identifier!r}")
            if isinstance(identifier, int) and identifier < 0:
                raise InvalidVersion("numeric prerelease identifiers must not be negative")
        # Round-trip identifiers through the parser so both constructors enforce the same
        # rules, and so "7" and 7 become the same numeric identifier.
        pre = tuple(_parse_identifier("prerelease", str(i)) for i in self.prerelease)
        object.__setattr__(self, "prerelease", pre)
        for identifier in self.build:
            _parse_identifier("build", identifier)

    @classmethod
    def parse(cls, text: str) -> "Version":
        """Parse ``MAJOR.MINOR.PATCH[-PRERELEASE][+BUILD]`` strictly (no ``v`` prefix)."""
        if not isinstance(text, str):
            raise TypeError(f"expected a string, got {type(text).__name__}")
        rest, _, build = text.partition("+")
        core, _, prerelease = rest.partition("-")
        parts = core.split(".")
        if len(parts) != 3:
            raise InvalidVersion(f"expected MAJOR.MINOR.PATCH, got {text!r}")
        major, minor, patch = (_parse_number(n, p) for n, p in zip(_PARTS, parts, strict=True))
        return cls(
            major,
            minor,
            patch,
            tuple(prerelease.split(".")) if "-" in rest else (),
            tuple(build.split(".")) if "+" in text else (),
        )

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += "-" + ".".join(str(i) for i in self.prerelease)
        if self.build:
            text += "+" + ".".join(self.build)
        return text

    @property
    def is_prerelease(self) -> bool:
        return bool(self.prerelease)

    def compare(self, other: "Version") -> int:
        """Return -1, 0 or 1 as ``self`` has lower, equal or higher precedence than ``other``."""
        mine, theirs = (self.major, self.minor, self.patch), (other.major, other.minor, other.patch)
        if mine != theirs:
            return -1 if mine < theirs else 1
        return _compare_prerelease(self.prerelease, other.prerelease)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Version) and self.compare(other) == 0

    def __lt__(self, other: "Version") -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self.compare(other) < 0

    def __hash__(self) -> int:
        return hash((self.major, self.minor, self.patch, self.prerelease))

    # Bumping follows npm: bumping a prerelease to the release it precedes "finishes" it,
    # so 2.0.0-rc.1 bumped by major is 2.0.0, not 3.0.0. Build metadata is always dropped.

    def bump_major(self) -> "Version":
        if self.prerelease and self.minor == 0 and self.patch == 0:
            return Version(self.major, 0, 0)
        return Version(self.major + 1, 0, 0)

    def bump_minor(self) -> "Version":
        if self.prerelease and self.patch == 0:
            return Version(self.major, self.minor, 0)
        return Version(self.major, self.minor + 1, 0)

    def bump_patch(self) -> "Version":
        if self.prerelease:
            return Version(self.major, self.minor, self.patch)
        return Version(self.major, self.minor, self.patch + 1)

    def bump_prerelease(self, identifier: str | None = None) -> "Version":
        """Next prerelease: 1.2.3 -> 1.2.4-0, 1.2.4-rc.1 -> 1.2.4-rc.2, 1.2.4-rc -> 1.2.4-rc.0.

        With ``identifier``, a release or a prerelease with a different first identifier
        starts a new series: ``bump_prerelease("beta")`` on 1.2.4-alpha.3 gives 1.2.4-beta.0.
        """
        if identifier is not None and isinstance(_parse_identifier("prerelease", identifier), int):
            raise InvalidVersion(f"prerelease identifier must not be numeric, got {identifier!r}")
        start: tuple[Identifier, ...] = (identifier, 0) if identifier is not None else (0,)
        if not self.prerelease:
            return Version(self.major, self.minor, self.patch + 1, start)
        if identifier is not None and self.prerelease[0] != identifier:
            return Version(self.major, self.minor, self.patch, start)
        pre = list(self.prerelease)
        for index in range(len(pre) - 1, -1, -1):  # Increment the last numeric identifier.
            value = pre[index]
            if isinstance(value, int):
                pre[index] = value + 1
                break
        else:
            pre.append(0)
        return Version(self.major, self.minor, self.patch, tuple(pre))

    def finalize(self) -> "Version":
        """The release this version leads up to: prerelease and build removed."""
        return Version(self.major, self.minor, self.patch)

    def bump(self, part: str, identifier: str | None = None) -> "Version":
        """Dispatch by name: "major", "minor", "patch", "prerelease" or "release"."""
        if part == "prerelease":
            return self.bump_prerelease(identifier)
        if identifier is not None:
            raise ValueError(f"an identifier only applies to prerelease bumps, not {part!r}")
        bumps = {
            "major": self.bump_major,
            "minor": self.bump_minor,
            "patch": self.bump_patch,
            "release": self.finalize,
        }
        if part not in bumps:
            raise ValueError(f"unknown version part {part!r}")
        return bumps[part]()


def parse(text: str) -> Version:
    return Version.parse(text)


def is_valid(text: str) -> bool:
    try:
        Version.parse(text)
    except InvalidVersion:
        return False
    return True


def compare(a: str | Version, b: str | Version) -> int:
    """Compare two versions given as strings or :class:`Version` objects."""
    left = a if isinstance(a, Version) else Version.parse(a)
    right = b if isinstance(b, Version) else Version.parse(b)
    return left.compare(right)
