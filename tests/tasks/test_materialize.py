"""A task's repository holds its base commit and nothing of the fix: the agent runs git in
it, and whatever git can reach there (branches, tags, reflogs, stray objects) it will read."""

from __future__ import annotations

import tempfile
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from etude.tasks.materialize import (
    TASKS_FILE,
    MaterializeError,
    build_buggy_repository,
    materialize,
)
from etude.tasks.repo import apply_patch
from etude.tasks.sources import RepositorySources
from etude.tasks.synth.sources import opened
from etude.tasks.synth.synthesize import Kept, SynthOptions, candidates, load_project, to_task
from etude.tasks.task import Task, read_jsonl
from tests.tasks.layouts import COLORPARSE, TEXTBITS, tar_sdist, write
from tests.tasks.upstream import FIX_MARKER, STRAY_MARKER, Upstream, git, make_upstream


@pytest.fixture
def upstream(tmp_path: Path) -> Upstream:
    return make_upstream(tmp_path / "checkouts" / "acme__widget")


def test_the_repository_holds_the_base_commit_and_nothing_of_the_fix(tmp_path, upstream):
    repository = materialize(
        upstream.task(), tmp_path / "cache", checkouts_dir=upstream.root.parent
    )

    assert git(repository, "rev-parse", "HEAD").stdout.strip() == upstream.base  # id kept
    for leaked in (upstream.fix_commit, upstream.fix_blob, upstream.stray_blob):
        assert git(repository, "cat-file", "-e", leaked, check=False).returncode != 0
    assert git(repository, "log", "--all", "--format=%H").stdout.split() == [upstream.base]
    assert git(repository, "for-each-ref", "--format=%(refname)").stdout.split() == [
        "refs/heads/main"
    ]
    assert git(repository, "reflog", "--all").stdout == ""
    assert git(repository, "stash", "list").stdout == ""
    assert git(repository, "remote").stdout == ""
    fsck = git(repository, "fsck", "--lost-found", "--no-progress")
    assert "dangling" not in fsck.stdout + fsck.stderr
    assert not list((repository / ".git").glob("lost-found/*/*"))
    # Every object's content, as `git cat-file --batch-all-objects` hands it out.
    everything = git(repository, "cat-file", "--batch-all-objects", "--batch").stdout
    assert FIX_MARKER not in everything and STRAY_MARKER not in everything
    # Nothing names the source (FETCH_HEAD, a remote, an alternates file).
    for path in (repository / ".git").rglob("*"):
        if path.is_file():
            assert str(upstream.root).encode() not in path.read_bytes(), path


def test_git_works_as_usual_in_the_repository(tmp_path, upstream):
    repository = materialize(
        upstream.task(), tmp_path / "cache", checkouts_dir=upstream.root.parent
    )

    assert git(repository, "status", "--porcelain").stdout == ""
    assert "readme" in git(repository, "log", "--oneline").stdout
    assert "return sum(xs) / len(xs)" in git(repository, "blame", "widget.py").stdout
    (repository / "widget.py").write_text("def mean(xs):\n    return 0\n")
    assert "+    return 0" in git(repository, "diff").stdout
    git(repository, "stash", "-q")  # an identity of its own: the agent's HOME has none
    git(repository, "stash", "pop", "-q")


def test_a_bare_mirror_and_a_named_checkout_give_the_same_repository(tmp_path, upstream):
    mirrors = tmp_path / "mirrors"
    git(tmp_path, "clone", "-q", "--mirror", str(upstream.root), str(mirrors / "acme__widget.git"))
    from_mirror = materialize(
        upstream.task(), tmp_path / "a", sources=RepositorySources(checkouts=(mirrors,))
    )
    own = RepositorySources(repositories={"acme/widget": upstream.root})
    from_checkout = materialize(upstream.task(), tmp_path / "b", sources=own)
    for repository in (from_mirror, from_checkout):
        assert git(repository, "rev-parse", "HEAD").stdout.strip() == upstream.base
        assert git(repository, "cat-file", "-e", upstream.fix_commit, check=False).returncode
        assert git(repository, "log", "--all", "--format=%H").stdout.split() == [upstream.base]


def test_tasks_on_one_commit_share_a_repository_built_once(tmp_path, upstream):
    cache = tmp_path / "cache"
    tasks = [upstream.task(f"acme__widget-{i}") for i in range(6)]
    built: list[Path] = []

    def build(task: Task) -> None:
        built.append(materialize(task, cache, checkouts_dir=upstream.root.parent))

    threads = [threading.Thread(target=build, args=(task,)) for task in tasks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(built) == 6 and len(set(built)) == 1
    assert [p.name for p in cache.iterdir()] == [built[0].name]  # no staging left behind
    assert git(built[0], "status", "--porcelain").stdout == ""


def test_a_missing_source_or_commit_is_a_clear_error(tmp_path, upstream):
    cache = tmp_path / "cache"
    with pytest.raises(
        MaterializeError, match=r"acme__widget-1: acme/widget: no repository sources"
    ):
        materialize(upstream.task(), cache)
    with pytest.raises(MaterializeError, match=r"no acme__widget or acme/widget.* in "):
        materialize(upstream.task(), cache, checkouts_dir=tmp_path / "elsewhere")
    absent = "0123456789abcdef0123456789abcdef01234567"
    with pytest.raises(MaterializeError, match=f"commit {absent} is not in"):
        materialize(upstream.task(base_commit=absent), cache, checkouts_dir=upstream.root.parent)
    with pytest.raises(MaterializeError, match="is not a commit id"):
        materialize(upstream.task(base_commit="--upload-pack=touch pwned"), cache)
    assert not cache.exists() or not list(cache.iterdir())


def test_a_bundled_repository_holds_neither_hidden_tests_nor_the_fix(tmp_path):
    task = next(read_jsonl(TASKS_FILE))
    repository = materialize(task, tmp_path / "cache")
    name = task.repo.removeprefix("etude-mini/")
    project = load_project(TASKS_FILE.parent / "projects" / name, name)

    assert git(repository, "rev-parse", "HEAD").stdout.strip() == task.base_commit
    assert git(repository, "for-each-ref", "--format=%(refname)").stdout.split() == [
        "refs/heads/main"
    ]
    assert git(repository, "reflog", "--all").stdout == ""
    present = set(
        git(repository, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)")
        .stdout.split()
    )  # fmt: skip
    # The project as it was before the bug (the fix), and its tests, as blobs.
    originals = {
        git(repository, "hash-object", str(project.root / f)).stdout.strip(): f
        for f in project.files
    }
    buggy = set(task.metadata["bug_patch"].split("+++ b/")[1:])
    changed = {p.split("\n")[0] for p in buggy}
    for blob, path in originals.items():
        if path in project.test_files or path in changed:
            assert blob not in present, path


def test_a_stale_entry_is_rebuilt(tmp_path, upstream):
    cache = tmp_path / "cache"
    repository = materialize(upstream.task(), cache, checkouts_dir=upstream.root.parent)
    (repository / ".git" / "HEAD").write_text("ref: refs/heads/nothing\n")  # a broken build
    again = materialize(upstream.task(), cache, checkouts_dir=upstream.root.parent)
    assert again == repository
    assert git(again, "rev-parse", "HEAD").stdout.strip() == upstream.base


def test_sources_parse_named_repositories_and_directories(tmp_path):
    sources = RepositorySources.parse(["acme/widget=/src/widget", str(tmp_path)])
    assert sources.repositories == {"acme/widget": Path("/src/widget")}
    assert sources.checkouts == (tmp_path,)
    with pytest.raises(ValueError, match="owner/name=PATH"):
        RepositorySources.parse(["../x=/src"])


def test_a_repository_name_cannot_leave_the_checkouts_directory(tmp_path, upstream):
    outside = replace(upstream.task(), repo="../checkouts/acme__widget")
    with pytest.raises(MaterializeError, match="not an owner/name repository name"):
        materialize(outside, tmp_path / "cache", checkouts_dir=tmp_path / "empty")


def test_a_checkouts_directory_may_nest_owner_and_name(tmp_path, upstream):
    nested = tmp_path / "src"
    (nested / "acme").mkdir(parents=True)
    git(tmp_path, "clone", "-q", str(upstream.root), str(nested / "acme" / "widget"))
    repository = materialize(upstream.task(), tmp_path / "cache", checkouts_dir=nested)
    assert git(repository, "rev-parse", "HEAD").stdout.strip() == upstream.base


def test_a_named_source_that_is_no_repository_is_a_clear_error(tmp_path, upstream):
    (tmp_path / "plain").mkdir()
    sources = RepositorySources(repositories={"acme/widget": tmp_path / "plain"})
    with pytest.raises(MaterializeError, match="plain is not a git repository"):
        materialize(upstream.task(), tmp_path / "cache", sources=sources)


def synthesized(path: Path) -> Task:
    """A task of the project at `path` as `etude tasks synth --path` records it (its first
    candidate bug; which tests catch it does not matter to its repository)."""
    options = SynthOptions()
    with opened(path) as project, tempfile.TemporaryDirectory() as scratch:
        kept = Kept(candidates(project, 0)[0], [], [], {})
        bug_patch = to_task(project, kept, options, "").metadata["bug_patch"]
        commit = build_buggy_repository(project, bug_patch, Path(scratch))
        return to_task(project, kept, options, commit)


def test_a_task_synthesized_from_an_sdist_is_rebuilt_from_it_anywhere(tmp_path):
    sdist = tar_sdist(tmp_path, "tb-1.2.0", TEXTBITS)
    task = synthesized(sdist)
    assert task.repo == "textbits" and task.metadata["origin"]["kind"] == "sdist"
    # Another machine: the same sdist, somewhere else, among other projects' sources.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    moved = sdist.rename(elsewhere / sdist.name)
    other = write(tmp_path / "my-colours", COLORPARSE)
    sources = RepositorySources(projects=(other, moved))
    repository = materialize(task, tmp_path / "cache", sources=sources)

    assert git(repository, "rev-parse", "HEAD").stdout.strip() == task.base_commit
    assert git(repository, "log", "--all", "--format=%H").stdout.split() == [task.base_commit]
    assert not (repository / "tests").exists()  # the hidden tests come from the record
    apply_patch(repository, task.gold_patch)  # the bug is there: its fix applies
    mutated = task.metadata["bug_patch"].split("+++ b/")[1].split("\n")[0]
    assert (repository / mutated).read_text() == TEXTBITS[mutated]
    # Built once: a later call finds it without the source.
    assert materialize(task, tmp_path / "cache") == repository


def test_a_task_synthesized_from_a_directory_is_rebuilt_from_it(tmp_path):
    root = write(tmp_path / "my-colours", COLORPARSE)
    task = synthesized(root)
    sources = RepositorySources(projects=(root,))
    repository = materialize(task, tmp_path / "cache", sources=sources)
    assert git(repository, "rev-parse", "HEAD").stdout.strip() == task.base_commit


def test_a_missing_or_changed_project_source_is_a_clear_error(tmp_path):
    task = synthesized(tar_sdist(tmp_path, "tb-1.2.0", TEXTBITS))
    cache = tmp_path / "cache"
    with pytest.raises(MaterializeError, match=r"textbits\.\S+: synthesized from tb-1.2.0.tar.gz"
                       r", and no project source of textbits is given"):  # fmt: skip
        materialize(task, cache)
    colours = write(tmp_path / "my-colours", COLORPARSE)
    with pytest.raises(MaterializeError, match="no project source of textbits"):
        materialize(task, cache, sources=RepositorySources(projects=(colours,)))
    core = "src/textbits/core.py"
    edited = tar_sdist(tmp_path / "v2", "tb-1.2.1", {**TEXTBITS, core: TEXTBITS[core] + "\n"})
    with pytest.raises(
        MaterializeError, match=r"the given textbits differs .* \(tb-1.2.0.tar.gz, hash \w+\): "
    ):
        materialize(task, cache, sources=RepositorySources(projects=(edited,)))
    assert not cache.exists() or not list(cache.iterdir())  # no staging left behind
