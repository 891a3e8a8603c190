"""The static check of a patch's code, the test-infrastructure policy, and confined paths."""

from __future__ import annotations

import os

import pytest

from etude.reward.changes import changed_paths, restore
from etude.reward.tamper import added_lines, is_reverted, runner_access
from etude.tasks.repo import PatchError, apply_patch, unified_diff

FLAGGED = {
    "import pytest": "import pytest\n",
    "from _pytest": "from _pytest import runner\n",
    "sys.modules by alias": "import sys as s\nm = s.modules\n",
    "getattr with a computed name": "import sys\nm = getattr(sys, 'mod' + 'ules')\n",
    "getattr with a constant": "import sys as s\nm = getattr(s, 'modules')\n",
    "__import__": "x = __import__('_py' + 'test')\n",
    "import_module": "import importlib\nimportlib.import_module('x')\n",
    "gc.get_objects": "import gc\nobjects = gc.get_objects()\n",
    "frames": "import sys\nf = sys._getframe(1).f_globals\n",
    "inspect frames": "from inspect import currentframe\n",
    "exec": "exec('print(1)')\n",
    "os._exit": "import os\nos._exit(0)\n",
    "__builtins__": "__builtins__['x'] = 1\n",
    "a hook by name": "def pytest_runtest_makereport(item, call):\n    pass\n",
    "subclasses": "x = ().__class__.__base__.__subclasses__()\n",
    "mock.patch of _pytest": "from unittest import mock\nmock.patch('_pytest.runner.x')\n",
    "ctypes": "import ctypes\n",
    "atexit": "import atexit\n",
    "settrace": "import threading\nthreading.settrace(print)\n",
    "meta_path": "import sys\nsys.meta_path.insert(0, object())\n",
}
CLEAN = {
    "arithmetic": "def f(x):\n    return x + 1\n",
    "re.compile": "import re\nr = re.compile('x')\n",
    "importlib.metadata": "import importlib.metadata\nv = importlib.metadata.version('x')\n",
    "sys.argv": "import sys\nargs = sys.argv[1:]\n",
    "getattr on an object": "def get(o, n):\n    return getattr(o, n)\n",
}


@pytest.mark.parametrize("name", list(FLAGGED))
def test_runner_access_is_flagged(name):
    assert runner_access("pkg/m.py", None, FLAGGED[name].encode()), name


@pytest.mark.parametrize("name", list(CLEAN))
def test_ordinary_code_is_not_flagged(name):
    assert runner_access("pkg/m.py", None, CLEAN[name].encode()) == []


def test_only_what_the_patch_adds_counts():
    base = b"import importlib\n\n\ndef load(n):\n    return importlib.import_module(n)\n\n\n"
    base += b"def double(x):\n    return x\n"
    fixed = base.replace(b"return x\n", b"return x * 2\n")
    assert runner_access("pkg/m.py", base, fixed) == []
    # Un-guarding existing code changes its header line: flagged.
    guarded = b"if False:\n    import pytest\n"
    assert runner_access("pkg/m.py", guarded, guarded.replace(b"False", b"True"))
    # A second use of a kind the base already has: flagged.
    more = base + b"\n\ndef other(n):\n    return importlib.import_module(n)\n"
    assert runner_access("pkg/m.py", base, more)
    assert runner_access("pkg/_speedups.so", None, b"\x7fELF")


def test_added_lines_come_from_the_files_not_the_patch_text():
    assert added_lines(b"a\nb\nc\n", b"a\nB\nc\nd\n") == {2, 4}
    assert added_lines(None, b"x\ny\n") == {1, 2}


def test_test_files_and_infrastructure_are_reverted():
    for path in (
        "conftest.py", "tests/conftest.py", "src/pkg/conftest.py", "pytest.ini", "tox.ini",
        "setup.cfg", "pyproject.toml", "pytest.toml", "sitecustomize.py", "usercustomize.py",
        "x.pth", "pytest/__init__.py", "_pytest/runner.py", "pluggy.py", "tests/test_new.py",
        "pkg/__pycache__/m.cpython-311.pyc", "tests/__init__.py",
    ):  # fmt: skip
        assert is_reverted(path), path
    for path in ("pkg/__init__.py", "pkg/core.py", "README.md", "NOTES.md", "pkg/testing.py"):
        assert not is_reverted(path), path


def test_a_patch_symlink_out_of_the_tree_is_refused_and_restore_never_follows_one(tmp_path):
    host = tmp_path / "host"
    host.mkdir()
    (host / "keep.txt").write_text("host\n")
    repo = tmp_path / "repo"
    repo.mkdir()
    base = tmp_path / "base"
    base.mkdir()
    escape = f"diff --git a/t b/t\nnew file mode 120000\n--- /dev/null\n+++ b/t\n@@ -0,0 +1 @@\n+{host}\n\\ No newline at end of file\n"  # noqa: E501
    with pytest.raises(PatchError, match="outside the repository"):
        apply_patch(repo, escape)
    # Even a link that is there already is replaced, not followed.
    (repo / "t").unlink(missing_ok=True)
    os.symlink(host, repo / "t")
    restore(base, repo, "t/keep.txt")
    assert (host / "keep.txt").read_text() == "host\n"
    assert (repo / "t").is_dir() and not (repo / "t").is_symlink()
    inside = unified_diff("a.txt", None, "a\n")
    apply_patch(repo, inside)
    assert changed_paths(base, repo) == ["a.txt", "t"]
