"""An agent digging through git for the fix of its task, as a policy under RL will: over
gRPC, in a session on a materialized task repository whose upstream holds the fix on a
branch, a tag, in a stash and as a stray blob. Git must work there; the fix must not show."""

from __future__ import annotations

import pytest

from etude.common.toolcalls import ToolCall
from etude.tasks.materialize import materialize
from tests.environment.conftest import serving
from tests.tasks.upstream import FIX_MARKER, STRAY_MARKER, make_upstream

pytestmark = pytest.mark.integration


def shell(command: str, index: int) -> ToolCall:
    return ToolCall("run_terminal_command", {"command": command}, f"call_{index}")


async def test_git_works_in_a_session_and_never_shows_the_fix(tmp_path, manager):
    upstream = make_upstream(tmp_path / "checkouts" / "acme__widget")
    repository = materialize(
        upstream.task(), tmp_path / "tasks", checkouts_dir=upstream.root.parent
    )
    fix, blob, stray = upstream.fix_commit, upstream.fix_blob, upstream.stray_blob
    working = [
        "git status",
        "git log --oneline",
        "git blame widget.py",
        "echo '# edit' >> widget.py && git diff --stat && git stash && git stash pop",
    ]
    attacks = [
        "git log --all --format=%H",
        "git log --all -p",
        f"git show {fix}",
        f"git cat-file -p {blob}",
        f"git cat-file -p {stray}",
        "git cat-file --batch-all-objects --batch",
        "git rev-list --all --objects --reflog --indexed-objects",
        "git fsck --lost-found --unreachable --dangling; cat .git/lost-found/*/* 2>&1",
        "git reflog --all; git stash list; git for-each-ref; git tag; git branch -a",
        "git remote -v; git config --list",
        "cat .git/packed-refs .git/FETCH_HEAD .git/ORIG_HEAD .git/objects/info/alternates",
        "find .git -type f | sort; grep -r -a -o 'FIXED-BY-[A-Z]*' .git",
        # The source it came from, by the path the host knows (not mounted in a sandbox).
        f"git fetch {upstream.root} {fix}; git fetch {upstream.root} refs/tags/v1.1; "
        f"git show {fix}",
        "git fetch --unshallow; git log --all --oneline",
    ]
    async with serving(manager) as (client, _runtime):
        session = (await client.create_session("acme__widget-1", str(repository))).session_id
        results = await client.execute(
            session, [shell(command, i) for i, command in enumerate(working + attacks)]
        )
    outputs = [r.result.output for r in results]
    for command, result in zip(working, results[: len(working)], strict=True):
        assert result.result.exit_code == 0, (command, result.result.output)
    assert "readme" in outputs[1] and "return sum(xs) / len(xs)" in outputs[2]
    for command, output in zip(working + attacks, outputs, strict=True):
        assert FIX_MARKER not in output and STRAY_MARKER not in output, (command, output)
    # What the attacks saw of history: the base commit alone, on `main`.
    history = outputs[len(working)].rsplit("[exit code:", 1)[0]
    assert history.split() == [upstream.base]
