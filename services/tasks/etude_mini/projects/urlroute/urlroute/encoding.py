"""Percent-encoding and query strings (RFC 3986, with ``+`` for spaces in queries)."""

import string
from collections.abc import Iterable

UNRESERVED = frozenset(string.ascii_letters + string.digits + "-._~")
_HEX = frozenset(string.hexdigits)


class URLError(ValueError):
    """A URL or one of its parts is malformed."""


def quote(text: str, safe: str = "/") -> str:
    """Percent-encode ``text`` as UTF-8, leaving unreserved characters and ``safe`` alone."""
    keep = UNRESERVED | set(safe)
    return "".join(
        chr(byte) if byte < 128 and chr(byte) in keep else f"%{byte:02X}"
        for byte in text.encode("utf-8")
    )


def unquote(text: str, *, plus_as_space: bool = False) -> str:
    """Decode percent-escapes; malformed escapes and invalid UTF-8 raise :class:`URLError`."""
    if plus_as_space:
        text = text.replace("+", " ")
    data = bytearray()
    index = 0
    while index < len(text):
        char = text[index]
        if char != "%":
            data += char.encode("utf-8")
            index += 1
            continue
        escape = text[index + 1 : index + 3]
        if len(escape) < 2 or not set(escape) <= _HEX:
            raise URLError(f"invalid percent-escape {text[index : index + 3]!r} at {index}")
        data.append(int(escape, 16))
        index += 3
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise URLError(f"percent-escapes in {text!r} are not valid UTF-8") from None


def normalize_escapes(text: str) -> str:
    """Uppercase escape hex digits and decode escapes of unreserved characters."""
    parts = text.split("%")
    out = [parts[0]]
    for part in parts[1:]:
        escape = part[:2]
        if len(escape) < 2 or not set(escape) <= _HEX:
            raise URLError(f"invalid percent-escape '%{escape}' in {text!r}")
        char = chr(int(escape, 16))
        out.append((char if char in UNRESERVED else "%" + escape.upper()) + part[2:])
    return "".join(out)


def parse_query(query: str) -> list[tuple[str, str]]:
    """``"a=1&a=2&b"`` becomes ``[("a", "1"), ("a", "2"), ("b", "")]``; order is kept."""
    pairs = []
    for part in query.split("&"):
        if not part:
            continue
        key, _, value = part.partition("=")
        pairs.append((unquote(key, plus_as_space=True), unquote(value, plus_as_space=True)))
    return pairs


def build_query(pairs: Iterable[tuple[str, object]]) -> str:
    """The inverse of :func:`parse_query`; list or tuple values repeat their key."""
    parts = []
    for key, value in pairs:
        values = value if isinstance(value, list | tuple) else [value]
        for item in values:
            encoded = [quote(str(text), safe="").replace("%20", "+") for text in (key, item)]
            parts.append("=".join(encoded))
    return "&".join(parts)
