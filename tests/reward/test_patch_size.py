"""What a patch writes when applied, counted before it is: binary literals and deltas as
git declares them, copies of files, text lines; real patches made by git."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

from etude.reward.patch_size import PatchTooLarge, check_expansion
from etude.tasks.repo import apply_patch

MIB = 1024**2


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=repo, check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip


@pytest.fixture
def repo(tmp_path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    (root / "random.bin").write_bytes(random.Random(0).randbytes(MIB))
    (root / "big.txt").write_text("x" * (3 * MIB))
    git(root, "add", ".")
    git(root, "commit", "-qm", "base")
    return root


def diff_of(repo: Path, change) -> str:
    """The binary diff of `change` made to `repo`, which is then put back."""
    change(repo)
    git(repo, "add", "-A")
    patch = git(repo, "diff", "--cached", "--binary", "-M", "-C", "--find-copies-harder")
    git(repo, "reset", "-q", "--hard")
    git(repo, "clean", "-qfd")
    return patch


def test_a_small_literal_that_inflates_past_the_limit_is_refused_before_it_is_written(repo):
    patch = diff_of(repo, lambda r: (r / "zeros.bin").write_bytes(bytes(8 * MIB)))
    assert len(patch) < 64 * 1024  # deflated zeros: a few KB of text
    with pytest.raises(PatchTooLarge, match="more than 4194304 bytes"):
        check_expansion(patch, repo, 4 * MIB)
    assert check_expansion(patch, repo, 32 * MIB) >= 8 * MIB  # both hunks are inflated
    apply_patch(repo, patch)  # what was counted is what git writes
    assert (repo / "zeros.bin").stat().st_size == 8 * MIB


def test_a_delta_counts_what_it_rebuilds(repo):
    def touch(r: Path) -> None:  # one byte changed: a delta of a few bytes rebuilds a MiB
        data = bytearray((r / "random.bin").read_bytes())
        data[1000] ^= 0xFF
        (r / "random.bin").write_bytes(bytes(data))

    patch = diff_of(repo, touch)
    assert "\ndelta " in patch and "\nliteral " not in patch and len(patch) < 4096
    assert check_expansion(patch, repo, 64 * MIB) >= 2 * MIB  # both directions rebuilt
    with pytest.raises(PatchTooLarge):
        check_expansion(patch, repo, MIB)


def test_a_copy_of_a_large_file_counts_its_size(repo):
    def copy(r: Path) -> None:
        for n in range(3):
            (r / f"copy{n}.txt").write_text((r / "big.txt").read_text())

    patch = diff_of(repo, copy)
    assert "copy from big.txt" in patch
    with pytest.raises(PatchTooLarge):
        check_expansion(patch, repo, 8 * MIB)


def test_an_ordinary_patch_counts_its_own_length(repo):
    patch = diff_of(repo, lambda r: (r / "new.py").write_text("print('hi')\n"))
    assert check_expansion(patch, repo, MIB) == len(patch.encode())
