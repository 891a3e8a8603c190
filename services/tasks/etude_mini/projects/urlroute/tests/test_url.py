import pytest

from urlroute import URL, URLError, build_query, parse_query, quote, remove_dot_segments, unquote


def test_parses_every_component():
    url = URL.parse("https://user:pw@Example.com:8443/a/b?x=1&x=2#top")
    assert url == URL("https", "user:pw", "Example.com", 8443, "/a/b", "x=1&x=2", "top")


def test_absent_and_empty_query_and_fragment_differ():
    assert URL.parse("http://h/").query is None
    assert URL.parse("http://h/?").query == ""
    assert URL.parse("http://h/#").fragment == ""
    assert str(URL.parse("http://h/?#")) == "http://h/?#"


@pytest.mark.parametrize(
    "text",
    [
        "http://example.com",
        "https://u@h:1/p;q?a=b#f",
        "mailto:joe@example.com",
        "//cdn.example.com/lib.js",
        "relative/path?x",
        "file:///etc/hosts",
        "http://[2001:db8::1]:8080/",
    ],
    ids=[
        "bare-host",
        "everything",
        "no-authority",
        "scheme-relative",
        "relative",
        "empty-host",
        "ipv6",
    ],
)
def test_parse_and_build_round_trip(text):
    assert str(URL.parse(text)) == text


def test_ipv6_host_is_stored_without_brackets():
    url = URL.parse("http://[::1]:8080/x")
    assert (url.host, url.port, url.path) == ("::1", 8080, "/x")


def test_colon_after_slash_is_not_a_scheme():
    url = URL.parse("/a:b")
    assert (url.scheme, url.path) == ("", "/a:b")


def test_build_adds_slash_between_authority_and_relative_path():
    assert str(URL(scheme="http", host="h", path="p")) == "http://h/p"


@pytest.mark.parametrize(
    ("scheme", "port", "expected"),
    [
        ("http", None, 80),
        ("HTTPS", None, 443),
        ("wss", None, 443),
        ("http", 8080, 8080),
        ("gopher", None, None),
    ],
    ids=["http", "uppercase-https", "wss", "explicit", "unknown-scheme"],
)
def test_effective_port(scheme, port, expected):
    assert URL(scheme=scheme, host="h", port=port).effective_port == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1http://h/", r"invalid scheme '1http'"),
        ("ht tp://h/", r"invalid scheme 'ht tp'"),
        ("http://h:80a/", r"invalid port '80a'"),
        ("http://h:65536/", r"port 65536 is out of range"),
        ("http://[::1/", r"unterminated IPv6 address"),
        ("http://[::1]x/", r"unexpected 'x' after IPv6 address"),
        ("http://exa mple.com/", r"invalid character ' ' in host"),
    ],
    ids=[
        "digit-scheme",
        "space-in-scheme",
        "bad-port",
        "port-too-big",
        "open-bracket",
        "junk-after-ipv6",
        "space-in-host",
    ],
)
def test_rejects_malformed_urls(text, message):
    with pytest.raises(URLError, match=message):
        URL.parse(text)


def test_highest_port_and_empty_port_are_accepted():
    assert URL.parse("http://h:65535/").port == 65535
    assert URL.parse("http://h:/").port is None


def test_query_dict_groups_repeated_keys():
    url = URL.parse("/s?tag=a&q=x+y&tag=b&&flag&e=")
    assert url.query_dict() == {"tag": ["a", "b"], "q": ["x y"], "flag": [""], "e": [""]}


def test_normalized():
    url = URL.parse("HTTP://Example.COM:80/a/./b/../c%7e%2f?%7eq#%7Ef")
    assert str(url.normalized()) == "http://example.com/a/c~%2F?~q#~f"


def test_normalized_keeps_non_default_port_and_adds_root_path():
    assert str(URL.parse("https://h:80").normalized()) == "https://h:80/"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/a/b/c/./../../g", "/a/g"),
        ("mid/content=5/../6", "mid/6"),
        ("/a/b/..", "/a/"),
        ("/a/./", "/a/"),
        ("/..", "/"),
        ("/../../x", "/x"),
        ("/a//../b", "/a/b"),
        ("", ""),
    ],
    ids=[
        "rfc-example",
        "relative",
        "trailing-dotdot",
        "trailing-dot",
        "above-root",
        "far-above-root",
        "empty-segment",
        "empty",
    ],
)
def test_remove_dot_segments(path, expected):
    assert remove_dot_segments(path) == expected


BASE = URL.parse("http://a/b/c/d;p?q")


RFC_EXAMPLES = [
    ("g:h", "g:h"),
    ("g", "http://a/b/c/g"),
    ("./g", "http://a/b/c/g"),
    ("g/", "http://a/b/c/g/"),
    ("/g", "http://a/g"),
    ("//g", "http://g"),
    ("?y", "http://a/b/c/d;p?y"),
    ("g?y#s", "http://a/b/c/g?y#s"),
    ("#s", "http://a/b/c/d;p?q#s"),
    ("", "http://a/b/c/d;p?q"),
    (".", "http://a/b/c/"),
    ("..", "http://a/b/"),
    ("../..", "http://a/"),
    ("../../../g", "http://a/g"),
    ("g;x=1/../y", "http://a/b/c/y"),
    ("g?y/./x", "http://a/b/c/g?y/./x"),
]


@pytest.mark.parametrize(
    ("reference", "expected"),
    RFC_EXAMPLES,
    ids=[reference or "empty" for reference, _ in RFC_EXAMPLES],
)
def test_resolve_rfc3986_examples(reference, expected):
    assert str(BASE.resolve(reference)) == expected


def test_resolve_against_base_with_empty_path():
    assert str(URL.parse("http://h").resolve("x/y")) == "http://h/x/y"


def test_quote_and_unquote():
    assert quote("a b/ü?") == "a%20b/%C3%BC%3F"
    assert quote("a/b", safe="") == "a%2Fb"
    assert quote("~-._") == "~-._"
    assert unquote("a%20b%2F%c3%bc") == "a b/ü"
    assert unquote("a+b") == "a+b"
    assert unquote("a+b", plus_as_space=True) == "a b"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("100%", r"invalid percent-escape '%' at 3"),
        ("%4", r"'%4' at 0"),
        ("x%zz", r"'%zz' at 1"),
        ("%C3", r"not valid UTF-8"),
    ],
    ids=["trailing-percent", "short-escape", "non-hex", "truncated-utf8"],
)
def test_unquote_rejects_bad_escapes(text, message):
    with pytest.raises(URLError, match=message):
        unquote(text)


def test_query_round_trip_with_special_characters():
    pairs = [("q", "a b&c=d"), ("tag", "ü"), ("empty", "")]
    query = build_query(pairs)
    assert query == "q=a+b%26c%3Dd&tag=%C3%BC&empty="
    assert parse_query(query) == pairs


def test_build_query_repeats_keys_for_sequences():
    assert build_query([("x", [1, 2]), ("y", (True,))]) == "x=1&x=2&y=True"
