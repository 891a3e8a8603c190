"""Diff → `git apply` round trips: every shape a session can leave, rebuilt byte for byte.

Each test makes a base tree and a changed tree, diffs them with `diff_trees`, applies the
patch with the grader's own `apply_patch` (real `git apply`) to a fresh copy of the base, and
compares the result with the changed tree: content, executable bit and symlink targets. The
session tests make the changes through a real sandbox (tools and shell) and diff its view.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from etude.common.toolcalls import ToolCall
from etude.environment.diff import _literal, diff_trees, quote_path
from etude.environment.tools.tree_scan import WalkBudget
from etude.environment.types import WalkLimitError
from etude.tasks.repo import apply_patch


def view(root: Path) -> dict[str, tuple]:
    """What git can represent of a tree: files (bytes, executable bit) and symlink targets."""
    found: dict[str, tuple] = {}
    for directory, subdirs, names in os.walk(root):
        subdirs[:] = [d for d in subdirs if d != ".git"]
        for name in names + [d for d in subdirs if os.path.islink(os.path.join(directory, d))]:
            path = os.path.join(directory, name)
            info = os.lstat(path)
            rel = os.path.relpath(path, root)
            if stat.S_ISLNK(info.st_mode):
                found[rel] = ("link", os.readlink(path))
            elif stat.S_ISREG(info.st_mode):
                found[rel] = ("file", bool(info.st_mode & 0o100), Path(path).read_bytes())
    return found


def round_trip(base: Path, changed: Path, tmp: Path) -> str:
    patch = diff_trees(base, changed)
    rebuilt = tmp / "rebuilt"
    shutil.copytree(base, rebuilt, symlinks=True)
    apply_patch(rebuilt, patch.unified_diff)
    assert view(rebuilt) == view(changed)
    return patch.unified_diff


@pytest.fixture
def trees(tmp_path: Path) -> tuple[Path, Path]:
    base = tmp_path / "base"
    for name, data in {
        "mod.txt": b"a\nb\nc\n",
        "nonl.txt": b"x\ny",
        "del.txt": b"gone\n",
        "empty_del": b"",
        "bin.dat": bytes(range(256)) * 10,
        "exe.sh": b"#!/bin/sh\n",
        "file2link": b"f\n",
        "dir/a": b"1\n",
        "dir/b": b"2\n",
        "d2f/x": b"x\n",
        "crlf.txt": b"a\r\nb\r\n\x0cc\x1cd\n",
        "old name.txt": b"renamed\n",
    }.items():
        (base / name).parent.mkdir(parents=True, exist_ok=True)
        (base / name).write_bytes(data)
    (base / "link").symlink_to("mod.txt")
    (base / "link2file").symlink_to("mod.txt")
    changed = tmp_path / "changed"
    shutil.copytree(base, changed, symlinks=True)
    return base, changed


def test_every_shape_round_trips(trees, tmp_path):
    base, cur = trees
    (cur / "mod.txt").write_text("a\nB\nc\n")
    (cur / "nonl.txt").write_text("x\ny\nz")
    (cur / "del.txt").unlink()
    (cur / "empty_del").unlink()
    (cur / "new.txt").write_text("new\n")
    (cur / "empty_new").write_text("")
    (cur / "bin.dat").write_bytes(bytes(range(255, -1, -1)) * 7)
    (cur / "newbin").write_bytes(b"\0\1\2" + os.urandom(3000))
    os.chmod(cur / "exe.sh", 0o755)
    (cur / "newexe").write_text("#!/bin/sh\necho\n")
    os.chmod(cur / "newexe", 0o755)
    (cur / "link").unlink()
    (cur / "link").symlink_to("nonl.txt")
    (cur / "newlink").symlink_to("dir2/../mod.txt")
    (cur / "link2file").unlink()
    (cur / "link2file").write_text("now a file\n")
    (cur / "file2link").unlink()
    (cur / "file2link").symlink_to("dir/a")
    shutil.rmtree(cur / "dir")
    shutil.rmtree(cur / "d2f")
    (cur / "d2f").write_text("a file where a directory was\n")
    odd = cur / "new dir" / "deep é"
    odd.mkdir(parents=True)
    (odd / 'q"uo\\te\tz\n.txt').write_text("q\n")
    (cur / "latin1").write_bytes(b"\xff\xfe not utf-8\n")
    (cur / "crlf.txt").write_bytes(b"a\r\nb\r\n\x0cc\x1cD\n")
    (cur / "old name.txt").rename(cur / "new name.txt")
    (cur / "no_newline_new").write_text("tail")
    patch = round_trip(base, cur, tmp_path)
    assert "new file mode 100755" in patch and "old mode 100644\nnew mode 100755" in patch
    assert "new file mode 120000" in patch and "GIT binary patch" in patch
    assert '"b/new dir/deep \\303\\251/q\\"uo\\\\te\\tz\\n.txt"' in patch


def test_special_files_are_skipped_never_opened(trees, tmp_path):
    base, cur = trees
    os.mkfifo(cur / "fifo")
    os.mkfifo(cur / "mod.txt.fifo")
    (cur / "mod.txt").unlink()
    os.mkfifo(cur / "mod.txt")  # a base file replaced by a FIFO: gone, as git sees it
    (cur / ".git").mkdir()
    (cur / ".git" / "config").write_text("[core]\n")
    result = diff_trees(base, cur)  # would block forever if a FIFO were opened for reading
    assert result.skipped == ["fifo", "mod.txt", "mod.txt.fifo"]
    assert result.changed_paths == ["mod.txt"] and "deleted file mode" in result.unified_diff
    assert ".git" not in result.unified_diff


def test_a_directory_symlinked_out_is_diffed_as_the_link(trees, tmp_path):
    base, cur = trees
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("SECRET-MARKER\n")
    shutil.rmtree(cur / "dir")
    (cur / "dir").symlink_to(outside)
    (cur / "abs").symlink_to("/etc/passwd")
    patch = diff_trees(base, cur)
    assert "SECRET-MARKER" not in patch.unified_diff and "root:" not in patch.unified_diff
    assert patch.changed_paths == ["abs", "dir", "dir/a", "dir/b"]
    assert "+/etc/passwd\n\\ No newline" in patch.unified_diff  # the link, as a link


def test_binary_literal_is_what_git_writes(tmp_path):
    data = bytes(range(256)) * 3 + b"\0tail"
    (tmp_path / "f.bin").write_bytes(data)
    git = subprocess.run(
        ["git", "diff", "--no-index", "--binary", "/dev/null", "f.bin"],
        cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    assert f"literal {len(data)}\n" in git.stdout
    git_lines = git.stdout.split(f"literal {len(data)}\n", 1)[1].split("\n\n", 1)[0]
    ours = _literal(data).split("\n", 1)[1].rstrip("\n")
    # Both decode to the same bytes (git's deflate level may differ, so compare decoded).
    assert _decode_literal(ours) == _decode_literal(git_lines) == data


def _decode_literal(lines: str) -> bytes:
    import base64

    packed = b""
    for line in lines.split("\n"):
        n = ord(line[0]) - (ord("A") - 1 if line[0] <= "Z" else ord("a") - 27)
        packed += base64.b85decode(line[1:])[:n]
    return zlib.decompress(packed)


@pytest.mark.parametrize(
    ("name", "quoted"),
    [("plain/a.py", "plain/a.py"), ("sp ace", '"sp ace"'), ('q"', '"q\\""'), ("é", '"\\303\\251"')],
)
def test_quoting_follows_git(name, quoted):
    assert quote_path(name) == quoted


def test_the_budget_stops_a_huge_walk_with_a_clear_error(trees):
    base, cur = trees
    for i in range(50):
        (cur / f"many{i}").write_text("x")
    with pytest.raises(WalkLimitError, match="more than 20 entries"):
        diff_trees(base, cur, WalkBudget(60, 20, 1 << 30))
    with pytest.raises(WalkLimitError, match="bytes"):
        diff_trees(base, cur, WalkBudget(60, 1000, 10))
    assert diff_trees(base, cur).changed_paths  # the default budget is enough


_names = st.sampled_from(["a", "b", "c d", "é", "x.py", "sub"])
_contents = st.one_of(
    st.binary(max_size=300),
    st.text(alphabet="ab\n\r\t é", max_size=200).map(str.encode),
)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    base_files=st.dictionaries(
        st.lists(_names, min_size=1, max_size=3).map(tuple), _contents, max_size=6
    ),
    new_files=st.dictionaries(
        st.lists(_names, min_size=1, max_size=3).map(tuple), _contents, max_size=6
    ),
    executable=st.booleans(),
)
def test_random_trees_round_trip(tmp_path_factory, base_files, new_files, executable):
    tmp = tmp_path_factory.mktemp("random")
    base, cur = tmp / "base", tmp / "cur"
    for root, files in ((base, base_files), (cur, new_files)):
        root.mkdir()
        for parts, data in files.items():
            path = root.joinpath(*parts)
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
            except (FileExistsError, NotADirectoryError, IsADirectoryError):
                continue  # a file where another path needs a directory: not a tree
            if executable and len(data) % 2:
                path.chmod(0o755)
    round_trip(base, cur, tmp)


# --- through a real session ---------------------------------------------------------------


def shell(command: str) -> ToolCall:
    return ToolCall("run_terminal_command", {"command": command}, id="c0")


def tool(name: str, **arguments: str) -> ToolCall:
    return ToolCall(name, arguments, id="c0")


async def test_shapes_made_in_a_session_round_trip(manager, repo, tmp_path):
    session = await manager.create("t", repo)
    calls = [
        tool("edit_file", path="pkg/calc.py", old_string="a + b", new_string="a - b"),
        tool("write_file", path="docs/new dir/NOTES é.md", content="notes\n"),
        tool("delete_file", path="notes.txt"),
        shell("printf '\\000\\001bin' > blob.bin && printf '#!/bin/sh\\n' > run.sh"),
        shell("chmod +x run.sh && ln -s pkg/calc.py calc_link"),
        shell("mv README.md README.rst && : > empty && printf 'no newline' > tail.txt"),
        shell("mkfifo pipe && rm -r pkg/__init__.py"),
    ]
    for call in calls:
        [executed] = await manager.execute(session.id, [call])
        assert executed.result.exit_code == 0, executed.result.output
    sandbox = await session.ready()
    patch = await manager.diff(session.id)
    rebuilt = tmp_path / "rebuilt"
    shutil.copytree(repo, rebuilt, symlinks=True)
    apply_patch(rebuilt, patch.unified_diff)
    assert view(rebuilt) == view(sandbox.root)
    assert "pipe" in patch.skipped and "pkg/calc.py" in patch.changed_paths
