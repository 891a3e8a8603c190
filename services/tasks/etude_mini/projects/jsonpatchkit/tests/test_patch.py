import copy

import pytest

from jsonpatchkit import (
    InvalidPatch,
    JsonPatchError,
    PatchConflict,
    PatchTestFailed,
    apply_patch,
    json_equal,
)


@pytest.mark.parametrize(
    ("document", "patch", "expected"),
    [
        (
            {"foo": "bar"},
            [{"op": "add", "path": "/baz", "value": "qux"}],
            {"baz": "qux", "foo": "bar"},
        ),
        (
            {"foo": ["bar", "baz"]},
            [{"op": "add", "path": "/foo/1", "value": "qux"}],
            {"foo": ["bar", "qux", "baz"]},
        ),
        ({"baz": "qux", "foo": "bar"}, [{"op": "remove", "path": "/baz"}], {"foo": "bar"}),
        (
            {"foo": ["bar", "qux", "baz"]},
            [{"op": "remove", "path": "/foo/1"}],
            {"foo": ["bar", "baz"]},
        ),
        (
            {"baz": "qux", "foo": "bar"},
            [{"op": "replace", "path": "/baz", "value": "boo"}],
            {"baz": "boo", "foo": "bar"},
        ),
        (
            {"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}},
            [{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}],
            {"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}},
        ),
        (
            {"foo": ["all", "grass", "cows", "eat"]},
            [{"op": "move", "from": "/foo/1", "path": "/foo/3"}],
            {"foo": ["all", "cows", "eat", "grass"]},
        ),
        (
            {"foo": "bar"},
            [{"op": "add", "path": "/child", "value": {"grandchild": {}}}],
            {"foo": "bar", "child": {"grandchild": {}}},
        ),
        (
            {"foo": "bar"},
            [{"op": "add", "path": "/baz", "value": "qux", "xyz": 123}],
            {"foo": "bar", "baz": "qux"},
        ),
        ({"/": 9, "~1": 10}, [{"op": "test", "path": "/~01", "value": 10}], {"/": 9, "~1": 10}),
        (
            {"foo": ["bar"]},
            [{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}],
            {"foo": ["bar", ["abc", "def"]]},
        ),
    ],
    ids=[
        "A1-add-member",
        "A2-add-element",
        "A3-remove-member",
        "A4-remove-element",
        "A5-replace",
        "A6-move-member",
        "A7-move-element",
        "A10-add-nested",
        "A11-ignore-unknown-members",
        "A14-escape-order",
        "A16-add-array-value",
    ],
)
def test_rfc_6902_appendix_examples(document, patch, expected):
    assert apply_patch(document, patch) == expected


def test_input_document_and_patch_values_are_never_aliased():
    document = {"items": [{"id": 1}], "meta": {"tags": ["a"]}}
    snapshot = copy.deepcopy(document)
    value = {"id": 2}
    patch = [
        {"op": "add", "path": "/items/-", "value": value},
        {"op": "copy", "from": "/meta/tags", "path": "/tags"},
    ]
    result = apply_patch(document, patch)
    value["id"] = 99
    result["tags"].append("b")
    assert document == snapshot
    assert result["items"] == [{"id": 1}, {"id": 2}]
    assert result["meta"]["tags"] == ["a"]


def test_failed_patch_leaves_document_untouched_and_reports_index():
    document = {"a": 1}
    patch = [{"op": "add", "path": "/b", "value": 2}, {"op": "remove", "path": "/zzz"}]
    with pytest.raises(
        PatchConflict, match=r"^operation 1 \(remove\): member 'zzz' not found"
    ) as info:
        apply_patch(document, patch)
    assert (info.value.index, info.value.op) == (1, "remove")
    assert document == {"a": 1}


def test_root_operations_replace_the_whole_document():
    assert apply_patch({"a": 1}, [{"op": "add", "path": "", "value": [1, 2]}]) == [1, 2]
    assert apply_patch([1], [{"op": "replace", "path": "", "value": None}]) is None
    with pytest.raises(PatchConflict, match="cannot remove the document root"):
        apply_patch({}, [{"op": "remove", "path": ""}])


def test_add_at_array_end_boundaries():
    assert apply_patch([1, 2], [{"op": "add", "path": "/2", "value": 3}]) == [1, 2, 3]
    assert apply_patch([1, 2], [{"op": "add", "path": "/0", "value": 0}]) == [0, 1, 2]
    with pytest.raises(PatchConflict, match=r"index 3 is out of range for array of length 2"):
        apply_patch([1, 2], [{"op": "add", "path": "/3", "value": 3}])


def test_replace_and_remove_need_an_existing_target():
    with pytest.raises(PatchConflict, match=r"operation 0 \(replace\): index 2 is out of range"):
        apply_patch([1, 2], [{"op": "replace", "path": "/2", "value": 3}])
    with pytest.raises(PatchConflict, match=r"\(replace\): member 'b' not found"):
        apply_patch({"a": 1}, [{"op": "replace", "path": "/b", "value": 3}])
    with pytest.raises(PatchConflict, match=r"'-' refers past the end of the array at ''"):
        apply_patch([1, 2], [{"op": "remove", "path": "/-"}])


def test_replace_keeps_member_order_and_array_length():
    result = apply_patch({"a": 1, "b": 2, "c": 3}, [{"op": "replace", "path": "/a", "value": 9}])
    assert list(result.items()) == [("a", 9), ("b", 2), ("c", 3)]
    assert apply_patch([1, 2, 3], [{"op": "replace", "path": "/1", "value": 9}]) == [1, 9, 3]


def test_add_into_missing_parent_or_scalar_fails():
    with pytest.raises(PatchConflict, match=r"\(add\): member 'baz' not found in object at ''"):
        apply_patch({"foo": "bar"}, [{"op": "add", "path": "/baz/bat", "value": "qux"}])
    with pytest.raises(PatchConflict, match=r"cannot add a member to string at '/foo'"):
        apply_patch({"foo": "bar"}, [{"op": "add", "path": "/foo/x", "value": 1}])


def test_move_onto_itself_is_a_no_op_but_source_must_exist():
    assert apply_patch({"a": 1}, [{"op": "move", "from": "/a", "path": "/a"}]) == {"a": 1}
    with pytest.raises(PatchConflict, match=r"\(move\): member 'x' not found"):
        apply_patch({"a": 1}, [{"op": "move", "from": "/x", "path": "/x"}])


def test_move_into_own_child_is_invalid_but_into_sibling_prefix_is_fine():
    with pytest.raises(InvalidPatch, match=r"cannot move '/a' into its own child '/a/b'"):
        apply_patch({"a": {"b": 1}}, [{"op": "move", "from": "/a", "path": "/a/b"}])
    result = apply_patch({"a": 1, "ab": {}}, [{"op": "move", "from": "/a", "path": "/ab/x"}])
    assert result == {"ab": {"x": 1}}


def test_copy_duplicates_a_subtree():
    result = apply_patch({"a": {"b": [1]}}, [{"op": "copy", "from": "/a", "path": "/c"}])
    assert result == {"a": {"b": [1]}, "c": {"b": [1]}}
    assert result["a"] is not result["c"]


@pytest.mark.parametrize(
    ("document", "value", "passes"),
    [
        ({"x": 1}, 1.0, True),
        ({"x": 1}, True, False),
        ({"x": False}, 0, False),
        ({"x": "10"}, 10, False),
        ({"x": {"a": 1, "b": [1, 2]}}, {"b": [1, 2], "a": 1}, True),
        ({"x": [1, 2]}, [2, 1], False),
        ({"x": [1, 2]}, [1, 2, 3], False),
        ({"x": None}, None, True),
        ({"x": True}, True, True),
        ({"x": True}, False, False),
        ({"x": ["a"]}, "a", False),
        ({"x": {"a": 1}}, {"a": 1, "b": None}, False),
    ],
    ids=[
        "int-float",
        "int-bool",
        "bool-int",
        "string-number",
        "object-order",
        "array-order",
        "array-length",
        "null",
        "same-bool",
        "different-bool",
        "array-vs-element",
        "extra-member",
    ],
)
def test_test_operation_uses_json_equality(document, value, passes):
    patch = [{"op": "test", "path": "/x", "value": value}]
    assert json_equal(document["x"], value) is passes
    if passes:
        assert apply_patch(document, patch) == document
    else:
        with pytest.raises(PatchTestFailed, match=r"^operation 0 \(test\): value at '/x' is"):
            apply_patch(document, patch)


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"op": "add"}, r"^a patch must be an array of operations, not object$"),
        ("[]", r"^a patch must be an array of operations, not string$"),
        ([["add"]], r"^operation 0: an operation must be an object, not array$"),
        ([{"path": "/a"}], r"^operation 0: missing or non-string 'op' member$"),
        ([{"op": 3, "path": "/a"}], r"missing or non-string 'op' member"),
        ([{"op": "append", "path": "/a"}], r"^operation 0: unknown op 'append'$"),
        ([{"op": "add", "path": "/a"}], r"'add' operation is missing the 'value' member"),
        ([{"op": "replace", "value": 1}], r"'replace' operation is missing the 'path' member"),
        ([{"op": "move", "path": "/a"}], r"'move' operation is missing the 'from' member"),
        ([{"op": "copy", "from": "a", "path": "/b"}], r"invalid 'from': pointer 'a' must be"),
        ([{"op": "test", "path": 1, "value": 1}], r"invalid 'path': a pointer must be a string"),
    ],
    ids=[
        "object-patch",
        "string-patch",
        "array-op",
        "no-op",
        "numeric-op",
        "unknown-op",
        "no-value",
        "no-path",
        "no-from",
        "bad-from",
        "non-string-path",
    ],
)
def test_malformed_patches_are_rejected_before_anything_is_applied(patch, message):
    with pytest.raises(InvalidPatch, match=message):
        apply_patch({"a": 1}, patch)


def test_validation_covers_the_whole_patch_before_applying():
    patch = [{"op": "remove", "path": "/missing"}, {"op": "bogus", "path": "/a"}]
    with pytest.raises(InvalidPatch, match=r"^operation 1: unknown op 'bogus'$") as info:
        apply_patch({"a": 1}, patch)
    assert isinstance(info.value, JsonPatchError) and info.value.index == 1


def test_null_value_is_a_present_value():
    assert apply_patch({"a": 1}, [{"op": "replace", "path": "/a", "value": None}]) == {"a": None}
