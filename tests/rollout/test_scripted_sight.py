"""The honesty rules one by one: what counts as having been shown a path, a line, a word or
a piece of code."""

from __future__ import annotations

from etude.common.toolcalls import ToolCall
from etude.rollout.scripted_sight import Sight

STATEMENT = (
    "- `tests/test_evaluate.py::test_builtin_functions[abs]`: "
    "calcparse.evaluator.CalcEvalError: abs() takes exactly 1 argument"
)


def read(path: str, start: str | None = None, end: str | None = None) -> ToolCall:
    args = {"path": path} | ({"start_line": start} if start else {}) | (
        {"end_line": end} if end else {}
    )  # fmt: skip
    return ToolCall("read_file", args)


def test_a_path_is_shown_verbatim_as_a_module_name_or_in_a_traceback_frame():
    sight = Sight(STATEMENT)
    assert sight.unjustified(read("calcparse/evaluator.py")) is None  # calcparse.evaluator.X
    assert sight.unjustified(read("calcparse/parser.py")) == (
        "read_file: calcparse/parser.py was not shown"
    )
    framed = Sight('File "/tmp/x/calcparse/parser.py", line 88, in parse')
    assert framed.unjustified(read("calcparse/parser.py", "80", "95")) is None
    assert framed.unjustified(read("calcparse/parser.py", "90", "95")) is not None
    listed = Sight("Fix it.")
    listed.see(ToolCall("list_dir", {"path": "."}), "./\n  pkg/\n    core.py\n  README.md")
    assert listed.has_path("pkg/core.py") and listed.has_directory("pkg")


def test_lines_are_justified_by_hits_listings_and_reading_on():
    sight = Sight(STATEMENT)
    grep = ToolCall("grep", {"pattern": r"\bbuiltin\b", "path": "calcparse", "glob": "*.py"})
    assert sight.unjustified(grep) is None
    sight.see(grep, "calcparse/evaluator.py:163:        builtin = BUILTINS.get(node.name)")
    assert sight.unjustified(read("calcparse/evaluator.py", "150", "170")) is None
    assert sight.unjustified(read("calcparse/evaluator.py", "165", "170")) is not None
    page = read("calcparse/evaluator.py", "163", "164")
    sight.see(page, "   163\tbuiltin = 1\n… call read_file with start_line=165 to read on.")
    assert sight.unjustified(read("calcparse/evaluator.py", "165", "180")) is None  # reading on
    assert sight.unjustified(read("calcparse/evaluator.py", "x", "9")) is not None


def test_words_of_patterns_queries_and_commands_must_have_been_shown():
    sight = Sight(STATEMENT)
    assert sight.unjustified(ToolCall("grep", {"pattern": r"def \w*argument"})) is None
    assert "evaluate" not in STATEMENT.replace("test_evaluate", "")  # only as a test's name
    assert sight.unjustified(ToolCall("grep", {"pattern": "def evaluate"})) is None
    assert sight.unjustified(ToolCall("grep", {"pattern": "Parser"})) == (
        "grep: pattern words not shown: parser"
    )
    query = ToolCall("codebase_search", {"query": "where are the builtin functions"})
    assert sight.unjustified(query) is None
    smoke = {"command": "python -c \"import calcparse.evaluator; print('ok')\""}
    assert sight.unjustified(ToolCall("run_terminal_command", smoke)) is None
    other = {"command": "python -c \"import calcparse.parser; print('ok')\""}
    assert "module calcparse.parser" in sight.unjustified(ToolCall("run_terminal_command", other))


def test_an_edit_quotes_consecutive_lines_a_listing_showed_in_full():
    sight = Sight(STATEMENT)
    window = read("calcparse/evaluator.py", "1", "3")
    sight.see(window, "     1\tdef f(x):\n     2\t    y = x\n     3\t    return y\n")
    edit = {"path": "calcparse/evaluator.py", "new_string": "z"}
    quote = ToolCall("edit_file", {**edit, "old_string": "    y = x\n    return y"})
    assert sight.unjustified(quote) is None
    gap = Sight(STATEMENT)
    gap.see(window, "     1\tdef f(x):\n     3\t    return y")
    assert gap.unjustified(ToolCall("edit_file", {**edit, "old_string": "def f(x):\n    return y"}))
    cut = Sight(STATEMENT)
    cut.see(window, "     1\tdef f(x):\n     2\t    y = x + 10\n[… 40 more characters cut]")
    # The loop cut the result inside line 2: only line 1 was shown whole.
    assert cut.unjustified(ToolCall("edit_file", {**edit, "old_string": "    y = x + 10"}))
    assert cut.unjustified(ToolCall("edit_file", {**edit, "old_string": "def f(x):"})) is None


def test_prose_names_only_what_was_shown():
    sight = Sight(STATEMENT)
    assert sight.unjustified_prose("I'll search for `builtin` in calcparse/evaluator.py.") is None
    assert sight.unjustified_prose("The bug is in `_Evaluator.call`.") is not None
    assert sight.unjustified_prose("Reading around line 167.") == "prose names line 167, not shown"
    assert sight.unjustified_prose("`and` and `or` are mixed up.") is None
