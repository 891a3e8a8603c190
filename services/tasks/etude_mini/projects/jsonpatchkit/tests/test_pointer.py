import pytest

from jsonpatchkit import InvalidPointer, JsonPointer, PointerNotFound, escape, resolve, unescape

RFC_DOCUMENT = {
    "foo": ["bar", "baz"],
    "": 0,
    "a/b": 1,
    "c%d": 2,
    "e^f": 3,
    "g|h": 4,
    "i\\j": 5,
    'k"l': 6,
    " ": 7,
    "m~n": 8,
}


@pytest.mark.parametrize(
    ("pointer", "expected"),
    [
        ("", RFC_DOCUMENT),
        ("/foo", ["bar", "baz"]),
        ("/foo/0", "bar"),
        ("/foo/1", "baz"),
        ("/", 0),
        ("/a~1b", 1),
        ("/c%d", 2),
        ("/e^f", 3),
        ("/g|h", 4),
        ("/i\\j", 5),
        ('/k"l', 6),
        ("/ ", 7),
        ("/m~0n", 8),
    ],
)
def test_rfc_6901_examples_resolve(pointer, expected):
    assert resolve(RFC_DOCUMENT, pointer) == expected


@pytest.mark.parametrize(
    ("token", "escaped"),
    [("a/b", "a~1b"), ("m~n", "m~0n"), ("~1", "~01"), ("/~", "~1~0"), ("plain", "plain")],
)
def test_escape_and_unescape_are_inverse(token, escaped):
    assert escape(token) == escaped
    assert unescape(escaped) == token


def test_tokens_are_unescaped_and_round_trip_through_str():
    pointer = JsonPointer("/a~1b/~01/0/")
    assert pointer.tokens == ("a/b", "~1", "0", "")
    assert str(pointer) == "/a~1b/~01/0/"
    assert repr(pointer) == "JsonPointer('/a~1b/~01/0/')"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("foo", r"pointer 'foo' must be empty or start with '/'"),
        ("/a~2b", r"invalid escape sequence in token 'a~2b'; use ~0 or ~1"),
        ("/trailing~", r"invalid escape sequence in token 'trailing~'"),
    ],
    ids=["no-leading-slash", "unknown-escape", "dangling-tilde"],
)
def test_malformed_pointers_are_rejected(text, message):
    with pytest.raises(InvalidPointer, match=message):
        JsonPointer(text)


def test_pointer_must_be_a_string():
    with pytest.raises(InvalidPointer, match="a pointer must be a string, not int"):
        JsonPointer(5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("pointer", "message"),
    [
        ("/missing", r"member 'missing' not found in object at ''"),
        ("/foo/2", r"index 2 is out of range for array of length 2 at '/foo'"),
        ("/foo/-", r"'-' refers past the end of the array at '/foo'"),
        ("/foo/01", r"invalid array index '01' at '/foo'"),
        ("/foo/-1", r"invalid array index '-1' at '/foo'"),
        ("/foo/0/x", r"cannot descend into string at '/foo/0'"),
        ("/ /x", r"cannot descend into number at '/ '"),
    ],
    ids=[
        "missing-member",
        "index-too-big",
        "dash",
        "leading-zero",
        "negative",
        "into-string",
        "into-number",
    ],
)
def test_unresolvable_pointers_say_where_they_failed(pointer, message):
    with pytest.raises(PointerNotFound, match=message):
        resolve(RFC_DOCUMENT, pointer)
    assert JsonPointer(pointer).exists(RFC_DOCUMENT) is False


def test_numeric_tokens_are_object_keys_for_objects():
    assert resolve({"0": "zero", "01": "padded"}, "/01") == "padded"
    assert resolve([[10, 20], [30]], "/1/0") == 30


def test_navigation_helpers():
    pointer = JsonPointer.from_tokens(["users", 3, "a/b"])
    assert str(pointer) == "/users/3/a~1b"
    assert str(pointer.parent) == "/users/3"
    assert pointer.last == "a/b"
    assert str(pointer.parent.child("name")) == "/users/3/name"
    assert JsonPointer("").is_root and not pointer.is_root
    assert pointer == JsonPointer("/users/3/a~1b") and hash(pointer) == hash(
        JsonPointer(str(pointer))
    )


def test_prefix_relation_is_by_whole_tokens():
    users = JsonPointer("/users")
    assert users.is_prefix_of(JsonPointer("/users/0")) is True
    assert users.is_prefix_of(users) is True
    assert users.is_prefix_of(JsonPointer("/usersX")) is False
    assert JsonPointer("").is_prefix_of(users) is True
    assert JsonPointer("/users/0").is_prefix_of(users) is False


def test_root_has_no_parent_or_last_token():
    with pytest.raises(PointerNotFound, match="the document root has no parent"):
        _ = JsonPointer("").parent
    with pytest.raises(PointerNotFound, match="the document root has no last token"):
        _ = JsonPointer("").last
