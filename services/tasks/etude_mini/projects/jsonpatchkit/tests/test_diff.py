import pytest

from jsonpatchkit import apply_patch, make_patch


def test_identical_documents_need_no_operations():
    assert make_patch({"a": [1, {"b": 2}]}, {"a": [1, {"b": 2}]}) == []
    assert make_patch({"a": 1, "b": 2}, {"b": 2, "a": 1.0}) == []


def test_object_changes_produce_remove_replace_add():
    source = {"keep": 1, "drop": 2, "change": {"deep": "x"}}
    target = {"keep": 1, "change": {"deep": "y"}, "new": [1]}
    assert make_patch(source, target) == [
        {"op": "remove", "path": "/drop"},
        {"op": "replace", "path": "/change/deep", "value": "y"},
        {"op": "add", "path": "/new", "value": [1]},
    ]


def test_type_changes_replace_the_value():
    assert make_patch({"a": 1}, {"a": True}) == [{"op": "replace", "path": "/a", "value": True}]
    assert make_patch({"a": [1]}, {"a": {"0": 1}}) == [
        {"op": "replace", "path": "/a", "value": {"0": 1}}
    ]
    assert make_patch([1], {"x": 1}) == [{"op": "replace", "path": "", "value": {"x": 1}}]


def test_single_insertion_and_deletion_in_arrays():
    assert make_patch([1, 2, 3], [1, 9, 2, 3]) == [{"op": "add", "path": "/1", "value": 9}]
    assert make_patch([1, 2, 3], [1, 3]) == [{"op": "remove", "path": "/1"}]
    assert make_patch([1, 2, 3], [0, 1, 2, 3]) == [{"op": "add", "path": "/0", "value": 0}]
    assert make_patch([1, 2, 3], [1, 2, 3, 4]) == [{"op": "add", "path": "/3", "value": 4}]
    assert make_patch([1, 2, 3], [1, 2]) == [{"op": "remove", "path": "/2"}]


def test_repeated_elements_are_trimmed_only_once():
    assert make_patch([1, 1], [1]) == [{"op": "remove", "path": "/1"}]
    assert make_patch([1], [1, 1]) == [{"op": "add", "path": "/1", "value": 1}]


def test_surplus_elements_are_removed_at_a_single_index():
    assert make_patch(["a", "b", "c", "d", "z"], ["a", "x", "z"]) == [
        {"op": "replace", "path": "/1", "value": "x"},
        {"op": "remove", "path": "/2"},
        {"op": "remove", "path": "/2"},
    ]


def test_keys_needing_escapes_are_escaped():
    assert make_patch({}, {"a/b": 1, "m~n": 2}) == [
        {"op": "add", "path": "/a~1b", "value": 1},
        {"op": "add", "path": "/m~0n", "value": 2},
    ]


def test_patch_values_do_not_alias_the_target():
    target = {"a": {"b": [1]}}
    patch = make_patch({}, target)
    target["a"]["b"].append(2)
    assert patch == [{"op": "add", "path": "/a", "value": {"b": [1]}}]


@pytest.mark.parametrize(
    ("source", "target"),
    [
        ({"a": [1, 2, 3], "b": {"c": None}}, {"a": [3, 2, 1], "b": {"c": False}, "d": 0}),
        ([{"id": 1, "tags": ["x"]}, {"id": 2}], [{"id": 1, "tags": ["x", "y"]}, {"id": 3}, {}]),
        ({"x": [1, 2, 3, 4, 5]}, {"x": [2, 4]}),
        ([[], [[1]]], [[[1]], []]),
        ({"": {"/": {"~": 1}}}, {"": {"/": {"~": 2, "~1": 3}}}),
        ("old", ["new"]),
        ({"a": 1}, {}),
    ],
    ids=["mixed", "records", "shrink", "nested-arrays", "escaped-keys", "scalar-root", "to-empty"],
)
def test_applying_the_generated_patch_reproduces_the_target(source, target):
    assert apply_patch(source, make_patch(source, target)) == target
