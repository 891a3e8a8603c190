"""Tiny projects that build with tests/tasks/tiny_backend.py (offline, this machine has no
setuptools wheel to build with), a wheelhouse of one of them, and a task on a git repository
made here whose project needs a package etude's own environment does not have.

- `tinydep` 1.0: `double(x)`, as a wheel in a wheelhouse;
- a wheel of a package installed where etude runs (setuptools, for projects built with a
  `setup.py`), made from its installed files, offline;
- `acme/stats`: `twice_sum(xs)` built on `tinydep.double`, its bug at the base commit (the
  first value is dropped) and the fix with its test in the commit after, as an upstream
  repository has them; its task is a SWE-bench record of those two commits.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from etude.tasks.task import Task
from tests.tasks.upstream import git

# Each tiny project builds with tests/tasks/tiny_backend.py, in its own tree.
PYPROJECT = """[build-system]
requires = []
build-backend = "backend"
backend-path = ["."]
"""
DEPENDENCY = "tinydep"
"""Not installed where etude runs: only a task's Python environment has it."""


def make_project(root: Path, name: str, requires: str, modules: dict[str, str], src: str):
    root.mkdir(parents=True)
    (root / "pyproject.toml").write_text(PYPROJECT)
    shutil.copy(Path(__file__).with_name("tiny_backend.py"), root / "backend.py")
    (root / "PROJECT").write_text(f"{name}|1.0|{requires}|{src}")
    for path, text in modules.items():
        (root / src / path).parent.mkdir(parents=True, exist_ok=True)
        (root / src / path).write_text(text)


def tinydep_wheelhouse(directory: Path) -> Path:
    """`directory/wheelhouse` holding tinydep 1.0 as a wheel, built with `pip wheel`."""
    project = directory / DEPENDENCY
    make_project(
        project, DEPENDENCY, "", {"tinydep/__init__.py": "def double(x):\n    return 2 * x\n"}, "."
    )
    house = directory / "wheelhouse"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-index", "--no-deps", "-q",
         "-w", str(house), str(project)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return house


def wheel_of_installed(name: str, directory: Path) -> Path:
    """A wheel of the pure-Python distribution `name` installed here, made from its files
    (what pip installed, less bytecode and the installer's own records), in `directory`."""
    dist = importlib.metadata.distribution(name)
    info = f"{dist.metadata['Name']}-{dist.version}.dist-info"
    skipped = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}
    files = {}
    for file in dist.files or []:
        path = str(file)
        if path.startswith("..") or path.endswith(".pyc") or "__pycache__" in path:
            continue
        if path.startswith(info + "/") and path.split("/", 1)[1] in skipped:
            continue
        files[path] = Path(file.locate()).read_bytes()
    digest = {p: base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b"=").decode()
              for p, d in files.items()}  # fmt: skip
    record = [f"{p},sha256={digest[p]},{len(d)}" for p, d in files.items()]
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,", ""]).encode()
    directory.mkdir(parents=True, exist_ok=True)
    wheel = directory / f"{dist.metadata['Name']}-{dist.version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as out:
        for path, data in files.items():
            out.writestr(path, data)
    return wheel


BUGGY_STATS = "from tinydep import double\n\n\ndef twice_sum(xs):\n    return double(sum(xs[1:]))\n"
FIXED_STATS = "from tinydep import double\n\n\ndef twice_sum(xs):\n    return double(sum(xs))\n"
OLD_TESTS = "from stats import twice_sum\n\n\ndef test_empty():\n    assert twice_sum([]) == 0\n"
NEW_TESTS = OLD_TESTS + "\n\ndef test_one_value():\n    assert twice_sum([3]) == 6\n"


def make_stats_task(root: Path) -> Task:
    """acme/stats at `root` (a working checkout whose history holds the fix) and its task."""
    modules = {"stats/__init__.py": BUGGY_STATS, "tests/test_stats.py": OLD_TESTS}
    make_project(root, "stats", "tinydep>=1.0", modules, ".")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "twice_sum")
    base = git(root, "rev-parse", "HEAD").stdout.strip()
    (root / "stats" / "__init__.py").write_text(FIXED_STATS)
    (root / "tests" / "test_stats.py").write_text(NEW_TESTS)
    git(root, "commit", "-q", "-am", "twice_sum counts the first value")
    return Task.from_swe(
        {
            "instance_id": "acme__stats-1",
            "repo": "acme/stats",
            "base_commit": base,
            "problem_statement": "twice_sum([3]) returns 0; it should be 6.",
            "patch": git(root, "diff", base, "HEAD", "--", "stats").stdout,
            "test_patch": git(root, "diff", base, "HEAD", "--", "tests").stdout,
            "FAIL_TO_PASS": json.dumps(["tests/test_stats.py::test_one_value"]),
            "PASS_TO_PASS": json.dumps(["tests/test_stats.py::test_empty"]),
        }
    )
