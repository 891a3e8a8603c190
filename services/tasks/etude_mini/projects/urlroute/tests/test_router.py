import pytest

from urlroute import MethodNotAllowed, NotFound, RouteError, Router


def list_users():
    return "list"


def show_user():
    return "show"


@pytest.fixture
def router() -> Router:
    r = Router()
    r.add("/users", list_users)
    r.add("/users/<int:id>", show_user, methods=["GET", "put"])
    r.add("/users/<name>", name="user_by_name")
    r.add("/users/me", name="me")
    r.add("/users/<int:id>/posts/<slug>", name="post")
    r.add("/files/<path:rest>", name="files")
    r.add("/files/<name>/raw", name="raw_file")
    r.add("/", name="home")
    return r


def test_matches_static_route_and_handler(router):
    match = router.match("GET", "/users")
    assert match.route.handler is list_users
    assert match.params == {}


def test_int_parameter_is_converted(router):
    match = router.match("GET", "/users/42")
    assert (match.route.name, match.params) == ("show_user", {"id": 42})


def test_static_beats_typed_beats_string(router):
    assert router.match("GET", "/users/me").route.name == "me"
    assert router.match("GET", "/users/7").route.name == "show_user"
    assert router.match("GET", "/users/bob").params == {"name": "bob"}


@pytest.mark.parametrize(
    "segment",
    ["042", "-1", "4.0", "٣"],
    ids=["leading-zero", "negative", "decimal", "non-ascii-digit"],
)
def test_non_canonical_integers_fall_back_to_string_route(router, segment):
    match = router.match("GET", f"/users/{segment}")
    assert (match.route.name, match.params) == ("user_by_name", {"name": segment})


def test_zero_is_a_valid_integer(router):
    assert router.match("GET", "/users/0").params == {"id": 0}


def test_several_parameters(router):
    match = router.match("GET", "/users/3/posts/hello-world")
    assert match.params == {"id": 3, "slug": "hello-world"}


def test_path_parameter_takes_the_rest(router):
    assert router.match("GET", "/files/a/b%20c/d.txt").params == {"rest": "a/b c/d.txt"}
    assert router.match("GET", "/files/a/raw").route.name == "raw_file"
    assert router.match("GET", "/files/a/raw/more").params == {"rest": "a/raw/more"}


def test_percent_encoded_slash_stays_inside_a_segment(router):
    assert router.match("GET", "/users/a%2Fb").params == {"name": "a/b"}


def test_query_string_and_dot_segments_are_ignored_for_matching(router):
    assert router.match("GET", "/users/./9/../9?tab=x").params == {"id": 9}


def test_trailing_slash_is_significant(router):
    with pytest.raises(NotFound, match="no route matches '/users/'"):
        router.match("GET", "/users/")
    assert router.match("GET", "/").route.name == "home"


def test_empty_path_parameter_does_not_match(router):
    with pytest.raises(NotFound):
        router.match("GET", "/files/")


def test_method_not_allowed_lists_methods(router):
    with pytest.raises(MethodNotAllowed) as caught:
        router.match("DELETE", "/users/5")
    assert caught.value.allowed == ("GET", "HEAD", "PUT")
    assert str(caught.value) == "DELETE is not allowed for '/users/5'; allowed: GET, HEAD, PUT"


def test_methods_are_case_insensitive_and_head_uses_get(router):
    assert router.match("put", "/users/5").route.name == "show_user"
    assert router.match("HEAD", "/users").route.name == "list_users"


def test_less_specific_route_serves_other_methods():
    r = Router()
    r.add("/items/new", methods=["POST"], name="create")
    r.add("/items/<name>", name="item")
    assert r.match("GET", "/items/new").route.name == "item"
    assert r.match("POST", "/items/new").route.name == "create"
    with pytest.raises(MethodNotAllowed) as caught:
        r.match("PATCH", "/items/new")
    assert caught.value.allowed == ("GET", "HEAD", "POST")


def test_equally_specific_routes_keep_registration_order():
    r = Router()
    r.add("/<a>/x", name="first")
    r.add("/y/<b>", name="second")
    r.add("/<c>/<d>", name="third")
    assert r.match("GET", "/y/x").route.name == "second"
    assert r.match("GET", "/z/x").route.name == "first"
    assert r.match("GET", "/z/w").route.name == "third"


def test_relative_request_path_is_not_found(router):
    with pytest.raises(NotFound, match="no route matches 'users'"):
        router.match("GET", "users")


def test_url_for_builds_and_encodes(router):
    assert router.url_for("show_user", id=5) == "/users/5"
    assert router.url_for("user_by_name", name="a/b c") == "/users/a%2Fb%20c"
    assert router.url_for("files", rest="docs/read me.txt") == "/files/docs/read%20me.txt"
    assert router.url_for("home") == "/"


def test_url_for_puts_extra_parameters_in_the_query(router):
    assert router.url_for("post", id=1, slug="hi", page=2, tag=["a", "b"]) == (
        "/users/1/posts/hi?page=2&tag=a&tag=b"
    )


def test_url_for_round_trips_through_match(router):
    for name, params in [("user_by_name", {"name": "ü ß/%"}), ("files", {"rest": "a/b c/%d"})]:
        assert router.match("GET", router.url_for(name, **params)).params == params


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("nope", {}, r"no route named 'nope'"),
        ("show_user", {}, r"missing parameter 'id' for route 'show_user'"),
        ("show_user", {"id": "5"}, r"parameter 'id': expects a non-negative int"),
        ("show_user", {"id": -1}, r"parameter 'id': expects a non-negative int"),
        ("show_user", {"id": True}, r"parameter 'id': expects a non-negative int"),
        ("user_by_name", {"name": ""}, r"parameter 'name': must not be empty"),
    ],
    ids=["unknown-route", "missing", "string-for-int", "negative", "bool-for-int", "empty-string"],
)
def test_url_for_errors(router, name, params, message):
    with pytest.raises(RouteError, match=message):
        router.url_for(name, **params)


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("users", r"must start with '/'"),
        ("/users/id<int:id>", r"parameter must span a whole segment: 'id<int:id>'"),
        ("/users/<float:x>", r"unknown converter 'float'"),
        ("/<a>/<int:a>", r"parameter 'a' appears twice"),
        ("/<path:p>/raw", r"'path' parameter 'p' must be the last segment"),
        ("/users/<1x>", r"parameter must span a whole segment"),
    ],
    ids=[
        "relative",
        "partial-segment",
        "unknown-converter",
        "duplicate-name",
        "path-not-last",
        "bad-name",
    ],
)
def test_invalid_patterns(pattern, message):
    with pytest.raises(RouteError, match=message):
        Router().add(pattern, name="x")


def test_registration_conflicts():
    r = Router()
    r.add("/users/<int:id>", methods=["GET", "POST"], name="a")
    with pytest.raises(
        RouteError, match=r"'/users/<int:uid>' clashes with '/users/<int:id>' for POST"
    ):
        r.add("/users/<int:uid>", methods=["post", "DELETE"], name="b")
    with pytest.raises(RouteError, match="route name 'a' is already used"):
        r.add("/other", name="a")
    with pytest.raises(RouteError, match="has no methods"):
        r.add("/empty", methods=[], name="c")
    r.add("/users/<int:uid>", methods=["DELETE"], name="d")
    r.add("/users/<uid>", methods=["POST"], name="e")
    assert r.match("DELETE", "/users/1").route.name == "d"


def test_name_defaults_to_pattern_without_handler():
    r = Router()
    route = r.add("/about")
    assert route.name == "/about"
    assert r.url_for("/about") == "/about"
