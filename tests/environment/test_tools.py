"""The agent's tools on a temp-dir workspace: results, limits, errors and path escapes."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from etude.common.toolcalls import parse_tool_calls, tools_by_name
from etude.environment.tools import TOOLS, grep_engines, tool_catalog, tool_specs
from etude.environment.tools import grep as grep_module
from etude.environment.tools.base import (
    CommandOutcome,
    SandboxNamespaces,
    SearchHit,
    ToolContext,
    ToolOutput,
)
from etude.environment.tools.paths import resolve
from etude.sandbox.bwrap import find_bwrap
from etude.sandbox.output import cap_output
from tests.conftest import skip_without_sandboxes

HAS_RIPGREP = shutil.which("rg") is not None


class LocalShell:
    """Runs commands with `asyncio.create_subprocess_shell` in the workspace.

    A stand-in for the sandbox's `CommandRunner`, which lives in another module and is tested
    on its own; the tool only needs something that runs a command and returns an outcome.
    """

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd

    async def run(self, command: str, timeout_s: float) -> CommandOutcome:
        process = await asyncio.create_subprocess_shell(
            command,
            cwd=self.cwd,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,  # its own process group, so a timeout kills the children
        )
        try:
            stdout, _ = await asyncio.wait_for(process.communicate(), timeout_s)
        except TimeoutError:
            os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
            return CommandOutcome(output="", exit_code=-9, timed_out=True, truncated_chars=0)
        text, cut = cap_output(stdout.decode("utf-8", "replace"), head=50, tail=50)
        return CommandOutcome(text, process.returncode or 0, False, cut)


class FakeSearch:
    def __init__(self, hits: list[SearchHit] | None = None, fail: bool = False) -> None:
        self.hits = hits or []
        self.fail = fail
        self.queries: list[tuple[str, str, int, list[str]]] = []

    async def query(
        self, workspace_id: str, query: str, k: int, target_directories: list[str]
    ) -> list[SearchHit]:
        self.queries.append((workspace_id, query, k, target_directories))
        if self.fail:
            raise ConnectionError("index is down")
        return self.hits


class Changes:
    def __init__(self) -> None:
        self.calls: list[tuple[list[str], list[str]]] = []

    async def __call__(self, changed: list[str], deleted: list[str]) -> None:
        self.calls.append((changed, deleted))


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("needle: top secret\n")
    return root


@pytest.fixture
def changes() -> Changes:
    return Changes()


@pytest.fixture
def ctx(workspace: Path, changes: Changes) -> ToolContext:
    return ToolContext("session-1", workspace, LocalShell(workspace), on_files_changed=changes)


@pytest.fixture
def sandboxed(ctx: ToolContext, workspace: Path, monkeypatch: pytest.MonkeyPatch):
    """ctx with namespaces to run ripgrep in: a bare bwrap with the workspace at /workspace
    (ripgrep runs only inside a sandbox). Yields the list of ripgrep runs, to show it ran."""
    if not HAS_RIPGREP:
        pytest.skip("ripgrep is not installed")
    with skip_without_sandboxes():
        bwrap = find_bwrap(None)
    read_info, write_info = os.pipe()
    system = [a for d in ("/usr", "/bin", "/lib", "/lib64") for a in ("--ro-bind-try", d, d)]
    process = subprocess.Popen(
        [str(bwrap.path), "--unshare-all", "--die-with-parent", *system, "--proc", "/proc",
         "--dev", "/dev", "--bind", str(workspace), "/workspace", "--info-fd", str(write_info),
         "--", "sleep", "3600"],
        pass_fds=(write_info,),
    )  # fmt: skip
    os.close(write_info)
    with os.fdopen(read_info, "rb") as info:
        pid = json.loads(info.read())["child-pid"]
    ctx.namespaces = SandboxNamespaces(pid, "/workspace")
    runs: list[str] = []
    real = grep_module.search_ripgrep

    async def counted(*args, **kwargs):
        runs.append("rg")
        return await real(*args, **kwargs)

    monkeypatch.setattr(grep_module, "search_ripgrep", counted)
    yield runs
    process.kill()
    process.wait()


def use_engine(engine: str, request: pytest.FixtureRequest, monkeypatch) -> None:
    if engine == "python":
        monkeypatch.setattr(grep_engines, "find_ripgrep", lambda: None)
    else:
        request.getfixturevalue("sandboxed")


async def call(ctx: ToolContext, name: str, **arguments: str) -> ToolOutput:
    return await TOOLS[name].function(ctx, **arguments)


def write(root: Path, files: dict[str, str | bytes]) -> None:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def failed(result: ToolOutput, reason: str) -> bool:
    return result.exit_code != 0 and result.error_reason == reason


# --- registry ---------------------------------------------------------------------------------


def test_registry_has_exactly_the_ten_tools_with_their_flags_and_parameters():
    expected = {
        "read_file": (True, {"path"}, {"start_line", "end_line"}),
        "list_dir": (True, set(), {"path", "depth"}),
        "grep": (True, {"pattern"}, {"path", "glob", "case_insensitive", "max_results"}),
        "file_search": (True, {"glob"}, set()),
        "codebase_search": (True, {"query"}, {"k", "target_directories"}),
        "edit_file": (False, {"path", "old_string", "new_string"}, {"replace_all"}),
        "write_file": (False, {"path", "content"}, set()),
        "delete_file": (False, {"path"}, set()),
        "run_terminal_command": (False, {"command"}, {"timeout_s"}),
        "submit": (False, {"message"}, set()),
    }
    assert list(TOOLS) == list(expected)
    for name, (read_only, required, optional) in expected.items():
        registered = TOOLS[name]
        assert (registered.read_only, set(registered.spec.required)) == (read_only, required)
        assert set(registered.spec.optional) == optional
        assert registered.description, name
    assert [spec.name for spec in tool_specs()] == list(expected)


def test_the_catalog_describes_every_tool_and_parameter_in_order():
    catalog = tool_catalog()
    assert [t.name for t in catalog.tools] == list(TOOLS)
    read_file = catalog.tools[0]
    assert (read_file.required, read_file.optional) == (("path",), ("start_line", "end_line"))
    assert catalog.tools[-1].description.startswith("Finish the task")
    assert catalog.path_rules.startswith("Paths are relative to the workspace root")


def test_specs_work_with_the_tool_call_parser():
    turn = parse_tool_calls(
        "<tool_call>\n<function=read_file>\n<parameter=path>\na.py\n</parameter>\n"
        "<parameter=colour>\nred\n</parameter>\n</function>\n</tool_call>",
        tools=tools_by_name(tool_specs()),
    )
    assert [error.code for error in turn.errors] == ["unknown_parameter"]


async def test_direct_calls_check_unknown_and_missing_arguments(ctx):
    unknown = await call(ctx, "read_file", path="a", colour="red")
    assert failed(unknown, "bad_argument")
    assert "unknown parameter(s): colour" in unknown.output
    missing = await call(ctx, "edit_file", path="a")
    assert failed(missing, "bad_argument")
    assert "missing required parameter(s): new_string, old_string" in missing.output


async def test_every_output_is_capped_by_the_registry(ctx, workspace):
    write(workspace, {"big.txt": "a" * 200 + "\n"})
    ctx.limits["max_output_chars"] = 100
    result = await call(ctx, "read_file", path="big.txt")
    assert result.truncated and result.truncated_chars == len("     1\t") + 200 - 100
    assert len(result.output) < 150


# --- read_file ----------------------------------------------------------------------------------


async def test_read_file_numbers_lines_like_cat_n(ctx, workspace):
    write(workspace, {"a.py": "one\ntwo\r\nthree"})
    result = await call(ctx, "read_file", path="a.py")
    assert result == ToolOutput("     1\tone\n     2\ttwo\n     3\tthree")


async def test_read_file_range(ctx, workspace):
    write(workspace, {"a.txt": "".join(f"line {n}\n" for n in range(1, 11))})
    result = await call(ctx, "read_file", path="a.txt", start_line="3", end_line="4")
    assert result.output == "     3\tline 3\n     4\tline 4"
    tail = await call(ctx, "read_file", path="a.txt", start_line="10", end_line="99")
    assert tail.output == "    10\tline 10"


async def test_read_file_stops_at_400_lines_and_says_how_to_read_on(ctx, workspace):
    write(workspace, {"long.txt": "".join(f"{n}\n" for n in range(1, 1235))})
    first = await call(ctx, "read_file", path="long.txt")
    lines = first.output.split("\n")
    assert len(lines) == 401 and lines[399] == "   400\t400"
    assert lines[400] == (
        "… showing lines 1-400 of 1234; call read_file with start_line=401 to read on."
    )
    assert first.truncated and first.exit_code == 0
    second = await call(ctx, "read_file", path="long.txt", start_line="401")
    assert second.output.split("\n")[0] == "   401\t401"
    assert second.output.endswith(
        "showing lines 401-800 of 1234; call read_file with start_line=801 to read on."
    )


async def test_read_file_stops_at_32_kb(ctx, workspace):
    write(workspace, {"wide.txt": ("x" * 200 + "\n") * 300})
    result = await call(ctx, "read_file", path="wide.txt")
    # Each shown line is 6 + 1 + 200 characters plus a newline: 157 fit in 32 KiB.
    assert result.output.count("\n") == 157
    assert result.output.endswith(
        "showing lines 1-157 of 300; call read_file with start_line=158 to read on."
    )
    assert len(result.output.encode()) <= 32 * 1024 + 200


async def test_read_file_cuts_a_single_giant_line(ctx, workspace):
    write(workspace, {"min.js": "y" * 100_000 + "\nnext\n"})
    result = await call(ctx, "read_file", path="min.js")
    assert "[line cut: " in result.output and result.truncated
    assert result.output.endswith("call read_file with start_line=2 to read on.")


async def test_read_file_errors(ctx, workspace):
    write(workspace, {"bin.dat": b"\x7fELF\0\0\0", "dir/x.txt": "x\n", "three.txt": "1\n2\n3\n"})
    assert failed(await call(ctx, "read_file", path="bin.dat"), "binary_file")
    assert failed(await call(ctx, "read_file", path="dir"), "is_directory")
    missing = await call(ctx, "read_file", path="nope.txt")
    assert failed(missing, "not_found") and "nope.txt does not exist" in missing.output
    beyond = await call(ctx, "read_file", path="three.txt", start_line="9")
    assert failed(beyond, "out_of_range")
    assert beyond.output == "start_line=9 is past the end of three.txt, which has 3 lines."
    assert failed(await call(ctx, "read_file", path="three.txt", start_line="x"), "bad_argument")
    backwards = await call(ctx, "read_file", path="three.txt", start_line="3", end_line="2")
    assert failed(backwards, "bad_argument")


async def test_special_files_are_refused_without_blocking(ctx, workspace):
    os.mkfifo(workspace / "pipe")
    assert failed(await call(ctx, "read_file", path="pipe"), "not_a_file")
    assert failed(await call(ctx, "write_file", path="pipe", content="x"), "not_a_file")
    edit = await call(ctx, "edit_file", path="pipe", old_string="a", new_string="b")
    assert failed(edit, "not_a_file")


async def test_undecodable_names_are_shown_with_replacement_characters(ctx, workspace):
    (workspace / os.fsdecode(b"bad\xff.txt")).write_text("x")
    assert (await call(ctx, "list_dir")).output == "./\n  bad\ufffd.txt"


async def test_read_file_empty_file(ctx, workspace):
    write(workspace, {"empty.txt": ""})
    assert (await call(ctx, "read_file", path="empty.txt")).output == "(empty file)"


# --- list_dir -----------------------------------------------------------------------------------

TREE = {
    ".gitignore": "*.log\n!keep.log\nbuild/\n/top.txt\n",
    ".git/HEAD": "ref: refs/heads/main\n",
    "README.md": "# demo\n",
    "app.log": "x\n",
    "keep.log": "x\n",
    "top.txt": "x\n",
    "build/out.js": "x\n",
    "src/main.py": "x\n",
    "src/top.txt": "not anchored here\n",
    "src/.gitignore": "secret.py\n",
    "src/secret.py": "x\n",
    "src/pkg/deep/leaf.py": "x\n",
}


async def test_list_dir_depths_and_gitignore(ctx, workspace):
    write(workspace, TREE)
    (workspace / "src" / "link").symlink_to("pkg")
    one = await call(ctx, "list_dir", depth="1")
    assert one.output == "./\n  .gitignore\n  README.md\n  keep.log\n  src/"
    two = await call(ctx, "list_dir")
    assert two.output == (
        "./\n  .gitignore\n  README.md\n  keep.log\n  src/\n    .gitignore\n"
        "    link -> pkg\n    main.py\n    pkg/\n    top.txt"
    )
    three = await call(ctx, "list_dir", path="src", depth="3")
    assert three.output == (
        "src/\n  .gitignore\n  link -> pkg\n  main.py\n  pkg/\n    deep/\n      leaf.py\n  top.txt"
    )


async def test_list_dir_caps_at_500_entries(ctx, workspace):
    write(workspace, {f"many/f{n:03}.txt": "" for n in range(620)})
    result = await call(ctx, "list_dir", path="many")
    lines = result.output.split("\n")
    assert len(lines) == 1 + 500 + 1 and lines[500] == "  f499.txt"
    assert lines[-1] == "… 120 more entries not shown; list a subdirectory or use a smaller depth."
    assert result.truncated


async def test_list_dir_errors(ctx, workspace):
    write(workspace, {"a.txt": "x", "empty/.keep": ""})
    (workspace / "empty" / ".keep").unlink()
    assert (await call(ctx, "list_dir", path="empty")).output == "empty/\n  (empty directory)"
    assert failed(await call(ctx, "list_dir", path="a.txt"), "not_a_directory")
    assert failed(await call(ctx, "list_dir", path="missing"), "not_found")
    assert failed(await call(ctx, "list_dir", depth="4"), "bad_argument")


# --- grep ---------------------------------------------------------------------------------------

SEARCH_TREE: dict[str, str | bytes] = {
    ".gitignore": "*.log\n!keep.log\nbuild/\n/top_only.txt\n/src/pkg/skip.txt\n",
    ".git/HEAD": "needle in git\n",
    ".hidden/config.txt": "needle hidden\n",
    "-dash.txt": "needle dash\n",
    "README.md": "Needle in readme\nno match here\n",
    "bin/data.bin": b"\0needle in binary\n",
    "build/out.js": "needle build\n",
    "colon:name.txt": "needle colon\n",
    "debug.log": "needle log\n",
    "docs/guide.md": "Needle docs\n" + "needle " * 60 + "\n",
    "docs/unicode.txt": "naïve needle ünïcödé\n",
    "keep.log": "needle keep\n",
    "order/B.txt": "needle B\n",
    "order/a.txt": "needle a.txt\n",
    "order/a-b.txt": "needle a-b\n",
    "order/a/x.txt": "needle a/x\n",
    "space dir/file name.txt": "needle space\n",
    "src/.gitignore": "generated/\n/local.py\npkg/also_skip.txt\n",
    "src/app.py": "def needle():\n    return 'NEEDLE'\n",
    "src/generated/gen.py": "needle gen\n",
    "src/local.py": "needle local\n",
    "src/pkg/.gitignore": "*.tmp\n",
    "src/pkg/also_skip.txt": "needle also skipped\n",
    "src/pkg/deep.ts": "let needle = 1;\r\nneedle();\r\n",
    "src/pkg/skip.txt": "needle skipped\n",
    "src/pkg/top_only.txt": "needle nested top\n",
    "src/pkg/x.tmp": "needle tmp\n",
    "src/util.py": "x = 1\n# needle here\n",
    "top_only.txt": "needle top\n",
}

EXPECTED_NEEDLES = "\n".join(
    [
        "-dash.txt:1:needle dash",
        ".hidden/config.txt:1:needle hidden",
        "colon:name.txt:1:needle colon",
        "docs/guide.md:2:[line over 300 bytes omitted]",
        "docs/unicode.txt:1:naïve needle ünïcödé",
        "keep.log:1:needle keep",
        "order/B.txt:1:needle B",
        "order/a/x.txt:1:needle a/x",
        "order/a-b.txt:1:needle a-b",
        "order/a.txt:1:needle a.txt",
        "space dir/file name.txt:1:needle space",
        "src/app.py:1:def needle():",
        "src/pkg/deep.ts:1:let needle = 1;\r",
        "src/pkg/deep.ts:2:needle();\r",
        "src/pkg/top_only.txt:1:needle nested top",
        "src/util.py:2:# needle here",
    ]
)

GREP_QUERIES = [
    {"pattern": "needle"},
    {"pattern": "needle", "case_insensitive": "true"},
    {"pattern": "needle", "path": "src/pkg"},
    {"pattern": "needle", "path": "src", "glob": "*.py"},
    {"pattern": "NEEDLE", "glob": "src/**/*.ts", "case_insensitive": "yes"},
    {"pattern": "^needle", "path": "src/pkg/deep.ts"},
    {"pattern": r"ne+dle\b", "path": "docs", "case_insensitive": "true"},
    {"pattern": "needle", "path": "src/generated"},
    {"pattern": "needle", "path": "link_in"},
    {"pattern": "nothing matches this"},
    {"pattern": "e", "max_results": "5"},
]


@pytest.fixture
def search_tree(workspace: Path) -> Path:
    write(workspace, SEARCH_TREE)
    (workspace / "link_out").symlink_to(workspace.parent / "outside")
    (workspace / "link_app.py").symlink_to("src/app.py")
    (workspace / "link_in").symlink_to("src/pkg")
    return workspace


@pytest.fixture
def python_grep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(grep_engines, "find_ripgrep", lambda: None)


async def test_grep_python_engine_output(ctx, search_tree, python_grep):
    result = await call(ctx, "grep", pattern="needle")
    assert result == ToolOutput(EXPECTED_NEEDLES)


async def test_grep_ripgrep_output(ctx, search_tree, sandboxed):
    assert (await call(ctx, "grep", pattern="needle")) == ToolOutput(EXPECTED_NEEDLES)
    assert sandboxed == ["rg"]


async def test_grep_without_sandbox_namespaces_uses_python(ctx, search_tree):
    assert ctx.namespaces is None  # ripgrep never reads the workspace from the host
    assert (await call(ctx, "grep", pattern="needle")) == ToolOutput(EXPECTED_NEEDLES)


async def test_grep_engines_agree(ctx, search_tree, monkeypatch, sandboxed):
    with_rg = [await call(ctx, "grep", **query) for query in GREP_QUERIES]
    monkeypatch.setattr(grep_engines, "find_ripgrep", lambda: None)
    without_rg = [await call(ctx, "grep", **query) for query in GREP_QUERIES]
    for query, fast, slow in zip(GREP_QUERIES, with_rg, without_rg, strict=True):
        assert fast == slow, query
    assert with_rg[2].output == (
        "src/pkg/deep.ts:1:let needle = 1;\r\nsrc/pkg/deep.ts:2:needle();\r\n"
        "src/pkg/top_only.txt:1:needle nested top"
    )
    assert with_rg[7].output == "src/generated/gen.py:1:needle gen"
    assert with_rg[8].output == with_rg[2].output  # a link inside the workspace is followed
    assert with_rg[9].output == "No matches for 'nothing matches this' in the workspace."


@pytest.mark.parametrize("engine", ["ripgrep", "python"])
async def test_grep_invalid_regex(ctx, search_tree, monkeypatch, engine, request):
    use_engine(engine, request, monkeypatch)
    result = await call(ctx, "grep", pattern="needle(")
    assert failed(result, "invalid_regex")
    assert result.output.startswith("invalid regex 'needle(': ")
    assert "unclosed group" in result.output or "missing )" in result.output
    assert (await call(ctx, "grep", pattern="needle", path="src/util.py")).exit_code == 0


async def test_grep_options(ctx, search_tree, python_grep):
    insensitive = await call(ctx, "grep", pattern="NEEDLE", path="src", case_insensitive="1")
    assert insensitive.output.split("\n")[:2] == [
        "src/app.py:1:def needle():",
        "src/app.py:2:    return 'NEEDLE'",
    ]
    globbed = await call(ctx, "grep", pattern="needle", glob="*.md", case_insensitive="true")
    assert globbed.output == (
        "README.md:1:Needle in readme\ndocs/guide.md:1:Needle docs\n"
        "docs/guide.md:2:[line over 300 bytes omitted]"
    )
    assert failed(await call(ctx, "grep", pattern="x", max_results="1001"), "bad_argument")
    assert failed(await call(ctx, "grep", pattern="x", case_insensitive="maybe"), "bad_argument")
    assert failed(await call(ctx, "grep", pattern="x", path="nope"), "not_found")


@pytest.mark.parametrize("engine", ["ripgrep", "python"])
async def test_grep_caps_results(ctx, workspace, monkeypatch, engine, request):
    use_engine(engine, request, monkeypatch)
    write(workspace, {"many.txt": "hit\n" * 250})
    result = await call(ctx, "grep", pattern="hit")
    lines = result.output.split("\n")
    assert len(lines) == 201 and lines[199] == "many.txt:200:hit"
    assert lines[200] == (
        "… 50 more matches not shown (250 in total); narrow the search with path or glob, "
        "or raise max_results (at most 1000)."
    )
    assert result.truncated
    assert (
        len((await call(ctx, "grep", pattern="hit", max_results="1000")).output.split("\n")) == 250
    )


@pytest.mark.parametrize("engine", ["ripgrep", "python"])
async def test_grep_timeout_is_an_error_result(ctx, search_tree, monkeypatch, engine, request):
    use_engine(engine, request, monkeypatch)
    ctx.limits["grep_timeout_s"] = 0
    result = await call(ctx, "grep", pattern="needle")
    assert failed(result, "timeout")
    assert result.output.startswith("grep stopped after 0 s")


# --- file_search --------------------------------------------------------------------------------


async def test_file_search(ctx, workspace):
    write(workspace, TREE | {"src/pkg/b_test.py": "", "src/a_test.py": "", "build/c_test.py": ""})
    by_name = await call(ctx, "file_search", glob="*_test.py")
    assert by_name.output == "src/a_test.py\nsrc/pkg/b_test.py"
    anchored = await call(ctx, "file_search", glob="src/**/*.py")
    assert anchored.output == (
        "src/a_test.py\nsrc/main.py\nsrc/pkg/b_test.py\nsrc/pkg/deep/leaf.py"
    )
    assert (await call(ctx, "file_search", glob="*.log")).output == "keep.log"
    assert (await call(ctx, "file_search", glob="*.rs")).output == "No files match '*.rs'."
    assert failed(await call(ctx, "file_search", glob="  "), "bad_argument")


async def test_file_search_caps_at_100(ctx, workspace):
    write(workspace, {f"d/f{n:03}.py": "" for n in range(130)})
    result = await call(ctx, "file_search", glob="**/*.py")
    lines = result.output.split("\n")
    assert lines[0] == "d/f000.py" and lines[99] == "d/f099.py"
    assert lines[100] == "… 30 more files not shown; use a narrower glob."


# --- codebase_search ----------------------------------------------------------------------------


async def test_codebase_search_forwards_and_renders(ctx, workspace):
    write(workspace, {"src/a.py": "", "tests/t.py": "", "lib/x.py": ""})
    (workspace / "alias").symlink_to("lib")
    hit = SearchHit("src/a.py", 3, 9, 0.87654, "def retry():\n    pass\n")
    ctx.search = FakeSearch([hit, SearchHit("lib/x.py", 1, 1, 0.5, "x = 1")])
    result = await call(
        ctx, "codebase_search", query="retries", k="5", target_directories="src, tests\nalias"
    )
    assert result.output == (
        "src/a.py:3-9 (0.877)\ndef retry():\n    pass\n\nlib/x.py:1-1 (0.500)\nx = 1"
    )
    assert ctx.search.queries == [("session-1", "retries", 5, ["src", "tests", "lib"])]


async def test_codebase_search_unavailable(ctx, workspace):
    result = await call(ctx, "codebase_search", query="retries")
    assert failed(result, "search_unavailable") and "grep" in result.output
    ctx.search = FakeSearch(fail=True)
    assert failed(await call(ctx, "codebase_search", query="retries"), "search_unavailable")
    ctx.search = FakeSearch()
    assert (await call(ctx, "codebase_search", query="retries")).output == "No results."
    escape = await call(ctx, "codebase_search", query="q", target_directories="../outside")
    assert failed(escape, "outside_workspace")
    assert failed(await call(ctx, "codebase_search", query="q", k="0"), "bad_argument")


# --- edit_file, write_file, delete_file ---------------------------------------------------------

EDITABLE = "".join(f"line {n}\n" for n in range(1, 11)) + "dup\nx\ndup\n"


async def test_edit_file_replaces_once_and_shows_context(ctx, workspace, changes):
    write(workspace, {"a.txt": EDITABLE})
    result = await call(ctx, "edit_file", path="a.txt", old_string="line 5\n", new_string="five\n")
    assert result.output == (
        "Replaced 1 occurrence in a.txt. Lines around the first change now read:\n"
        "     2\tline 2\n     3\tline 3\n     4\tline 4\n     5\tfive\n     6\tline 6\n"
        "     7\tline 7\n     8\tline 8"
    )
    assert (workspace / "a.txt").read_text() == EDITABLE.replace("line 5\n", "five\n")
    assert changes.calls == [(["a.txt"], [])]


async def test_edit_file_refusals(ctx, workspace, changes):
    write(workspace, {"a.txt": EDITABLE, "b.bin": b"\0\1\2"})
    missing = await call(ctx, "edit_file", path="a.txt", old_string="line 99", new_string="y")
    assert failed(missing, "no_match") and "read_file" in missing.output
    duplicate = await call(ctx, "edit_file", path="a.txt", old_string="dup", new_string="y")
    assert failed(duplicate, "not_unique")
    assert duplicate.output.startswith("old_string occurs 2 times in a.txt (lines 11, 13).")
    empty = await call(ctx, "edit_file", path="a.txt", old_string="", new_string="y")
    assert failed(empty, "bad_argument")
    assert failed(
        await call(ctx, "edit_file", path="b.bin", old_string="\1", new_string="y"), "binary_file"
    )
    assert failed(
        await call(ctx, "edit_file", path="no.txt", old_string="a", new_string="b"), "not_found"
    )
    assert (workspace / "a.txt").read_text() == EDITABLE
    assert changes.calls == []


async def test_edit_file_replace_all(ctx, workspace):
    write(workspace, {"a.txt": EDITABLE})
    result = await call(
        ctx, "edit_file", path="a.txt", old_string="dup", new_string="one", replace_all="true"
    )
    assert result.output.startswith("Replaced 2 occurrences in a.txt.")
    assert (workspace / "a.txt").read_text().count("one") == 2


async def test_edit_file_keeps_crlf_endings(ctx, workspace):
    write(workspace, {"w.txt": b"a\r\nb\r\nc\r\n"})
    result = await call(ctx, "edit_file", path="w.txt", old_string="a\nb", new_string="A\nB")
    assert result.exit_code == 0
    assert (workspace / "w.txt").read_bytes() == b"A\r\nB\r\nc\r\n"


async def test_write_file_creates_parents_and_notifies(ctx, workspace, changes):
    result = await call(ctx, "write_file", path="new/deep/f.py", content="print('é')\n")
    assert result.output == "Wrote 12 bytes to new/deep/f.py (new file)."
    assert (workspace / "new/deep/f.py").read_text() == "print('é')\n"
    again = await call(ctx, "write_file", path="new/deep/f.py", content="")
    assert again.output == "Wrote 0 bytes to new/deep/f.py (replaced the old content)."
    assert changes.calls == [(["new/deep/f.py"], []), (["new/deep/f.py"], [])]
    assert failed(await call(ctx, "write_file", path="new", content="x"), "is_directory")


async def test_delete_file(ctx, workspace, changes):
    write(workspace, {"a.txt": "x", "d/b.txt": "y"})
    (workspace / "link").symlink_to("d/b.txt")
    assert (await call(ctx, "delete_file", path="a.txt")).output == "Deleted a.txt."
    assert (await call(ctx, "delete_file", path="link")).output == "Deleted link."
    assert (workspace / "d/b.txt").exists() and not (workspace / "a.txt").exists()
    assert failed(await call(ctx, "delete_file", path="d"), "is_directory")
    assert failed(await call(ctx, "delete_file", path="a.txt"), "not_found")
    assert changes.calls == [([], ["a.txt"]), ([], ["link"])]


# --- run_terminal_command, submit ---------------------------------------------------------------


async def test_run_terminal_command_output_and_exit_code(ctx, workspace):
    write(workspace, {"f.txt": "content\n"})
    ok = await call(ctx, "run_terminal_command", command="cat f.txt")
    assert ok == ToolOutput("content\n[exit code: 0]")
    failing = await call(ctx, "run_terminal_command", command="echo oops >&2; exit 3")
    assert failing == ToolOutput("oops\n[exit code: 3]", exit_code=3)
    long = await call(ctx, "run_terminal_command", command="seq 1 1000")
    assert (
        long.truncated
        and long.truncated_chars == len("\n".join(map(str, range(1, 1001)))) + 1 - 100
    )


async def test_run_terminal_command_timeouts(ctx):
    refused = await call(ctx, "run_terminal_command", command="true", timeout_s="601")
    assert failed(refused, "bad_argument") and "at most 600" in refused.output
    killed = await call(ctx, "run_terminal_command", command="sleep 30", timeout_s="1")
    assert failed(killed, "timeout")
    assert killed.output == "[command killed after 1 s: timeout]"


async def test_submit_ends_the_episode(ctx):
    result = await call(ctx, "submit", message="fixed the bug\n")
    assert result == ToolOutput("Submitted: fixed the bug", ends_episode=True)


# --- paths: escapes refused, links inside the workspace followed --------------------------------


@pytest.fixture
def links(workspace: Path) -> Path:
    outside = workspace.parent / "outside"
    write(workspace, {"ok.txt": "fine\n", "src/a.py": "A = 1\n"})
    (workspace / "to_root").symlink_to("/")
    (workspace / "to_outside").symlink_to(outside)
    (workspace / "up").symlink_to("../..")
    (workspace / "sideways").symlink_to("../outside")
    (workspace / "src" / "mid").symlink_to("../../outside")
    (workspace / "chain1").symlink_to("chain2")
    (workspace / "chain2").symlink_to("src/chain3")
    (workspace / "src" / "chain3").symlink_to("../sideways/secret.txt")
    (workspace / "loop1").symlink_to("loop2")
    (workspace / "loop2").symlink_to("loop1")
    (workspace / "self").symlink_to("self")
    (workspace / "victim_abs").symlink_to(outside / "secret.txt")
    (workspace / "victim_rel").symlink_to("../outside/secret.txt")
    return workspace


ESCAPES = [
    ("../../etc/passwd", "outside_workspace"),
    ("/etc/passwd", "outside_workspace"),
    ("to_root/etc/passwd", "outside_workspace"),
    ("to_outside/secret.txt", "outside_workspace"),
    ("up/etc/passwd", "outside_workspace"),
    ("sideways/secret.txt", "outside_workspace"),
    ("src/mid/secret.txt", "outside_workspace"),
    ("src/../../outside/secret.txt", "outside_workspace"),
    ("chain1", "outside_workspace"),
    ("loop1", "too_many_symlinks"),
    ("self/x", "too_many_symlinks"),
    ("victim_abs", "outside_workspace"),
    ("victim_rel", "outside_workspace"),
]


@pytest.mark.parametrize(("path", "reason"), ESCAPES)
async def test_escapes_are_refused_by_every_path_tool(ctx, links, path, reason):
    secret = links.parent / "outside" / "secret.txt"
    attempts = [
        ("read_file", {"path": path}),
        ("edit_file", {"path": path, "old_string": "needle", "new_string": "pwned"}),
        ("write_file", {"path": path, "content": "pwned"}),
        ("write_file", {"path": f"{path}/new.txt", "content": "pwned"}),
        ("list_dir", {"path": path}),
        ("grep", {"pattern": "needle", "path": path}),
        ("delete_file", {"path": f"{path}/secret.txt"}),
    ]
    for name, arguments in attempts:
        result = await call(ctx, name, **arguments)
        assert result.exit_code != 0, (name, arguments)
        assert result.error_reason == reason, (name, result)
        assert (await call(ctx, "read_file", path="ok.txt")).output == "     1\tfine"
    assert secret.read_text() == "needle: top secret\n"
    assert sorted(p.name for p in (links.parent / "outside").iterdir()) == ["secret.txt"]


async def test_escape_messages_explain_the_rule(ctx, links):
    absolute = await call(ctx, "read_file", path="/etc/passwd")
    assert absolute.output.startswith("Refused: absolute paths are not accepted (/etc/passwd).")
    climb = await call(ctx, "read_file", path="../../etc/passwd")
    assert climb.output == "Refused: ../../etc/passwd climbs above the workspace root with '..'."
    link = await call(ctx, "list_dir", path="to_root")
    assert link.output.startswith("Refused: to_root goes through the symlink to_root -> /")
    loop = await call(ctx, "read_file", path="loop1")
    assert loop.output == "loop1: too many symlinks (more than 40; a loop?)"


@pytest.mark.parametrize("engine", ["ripgrep", "python"])
async def test_grep_never_follows_links_out(ctx, links, monkeypatch, engine, request):
    use_engine(engine, request, monkeypatch)
    result = await call(ctx, "grep", pattern="needle|fine")
    assert result.output == "ok.txt:1:fine"


async def test_links_inside_the_workspace_work(ctx, links, changes):
    (links / "alias").symlink_to("src")
    (links / "a_link.py").symlink_to("src/a.py")
    (links / "src" / "back").symlink_to("../ok.txt")
    assert (await call(ctx, "read_file", path="alias/a.py")).output == "     1\tA = 1"
    assert (await call(ctx, "read_file", path="src/back")).output == "     1\tfine"
    assert (await call(ctx, "read_file", path="src/../ok.txt")).output == "     1\tfine"
    edited = await call(ctx, "edit_file", path="a_link.py", old_string="1", new_string="2")
    assert edited.exit_code == 0 and (links / "src/a.py").read_text() == "A = 2\n"
    assert (await call(ctx, "write_file", path="alias/new.py", content="n")).exit_code == 0
    assert (links / "src/new.py").read_text() == "n"
    assert changes.calls == [(["src/a.py"], []), (["src/new.py"], [])]
    listing = await call(ctx, "list_dir", path="alias", depth="1")
    assert listing.output.startswith("src/\n  a.py\n  back -> ../ok.txt\n")


async def test_a_root_reached_through_proc_resolves_links_itself(ctx, links):
    # /proc/<pid>/root/... is how the host sees a sandbox's files; "/" must still mean refused.
    ctx.root = Path(f"/proc/{os.getpid()}/root{links}")
    assert (await call(ctx, "read_file", path="ok.txt")).output == "     1\tfine"
    assert failed(await call(ctx, "read_file", path="to_root/etc/hostname"), "outside_workspace")


def test_a_link_swapped_in_after_resolving_is_not_followed(links):
    resolved = resolve(links, "src/a.py")
    (links.parent / "outside" / "a.py").write_text("host file\n")
    (links / "src").rename(links / "old_src")
    (links / "src").symlink_to(links.parent / "outside")
    assert (links / "src" / "a.py").read_text() == "host file\n"  # the kernel would follow
    with pytest.raises(NotADirectoryError):
        resolved.open_read()
    resolved_dir = resolve(links, "old_src")
    (links / "old_src").rename(links / "older")
    (links / "old_src").symlink_to("/")
    with pytest.raises(OSError):
        os.close(resolved_dir.open_dir())
    assert resolve(links, "older/a.py").open_read().read() == b"A = 1\n"
