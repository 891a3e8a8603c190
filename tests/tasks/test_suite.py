"""Finding a project's tests where pytest finds them, and the options its suite keeps."""

from __future__ import annotations

import shlex

import pytest

from etude.tasks.repo import project_files
from etude.tasks.synth.suite import NoTestsError, discover, usable_addopts
from tests.tasks.layouts import COLORPARSE, TEXTBITS, UNITCONV, write


def suite_of(root):
    return discover(root, project_files(root))


def test_tests_in_a_tests_folder_with_plugin_addopts_and_a_src_layout(tmp_path):
    suite = suite_of(write(tmp_path, TEXTBITS))
    # The empty __init__.py and the conftest are hidden too: grading puts them back.
    assert suite.test_files == ("tests/__init__.py", "tests/conftest.py", "tests/test_core.py")
    assert suite.args == ("--strict-markers", "-ra", "-o", "pythonpath=src")
    assert suite.dropped == ("--cov=textbits", "--cov-report=term-missing", "-n", "auto",
                             "-p", "xdist")  # fmt: skip
    assert "--cov=textbits" in suite.notes[0]


def test_tests_in_a_test_folder_hide_their_helpers_and_drop_doctests(tmp_path):
    suite = suite_of(write(tmp_path, COLORPARSE))
    assert suite.test_files == ("test/helpers.py", "test/test_parse.py")
    assert suite.args == ("-p", "no:randomly")
    assert suite.dropped == ("--doctest-modules",)


def test_tests_inside_the_package(tmp_path):
    suite = suite_of(write(tmp_path, UNITCONV))
    assert suite.test_files == (
        "unitconv/tests/__init__.py", "unitconv/tests/test_arrays.py",
        "unitconv/tests/test_convert.py",
    )  # fmt: skip
    assert suite.args == () and suite.dropped == ()


def test_testpaths_and_python_files_are_honoured(tmp_path):
    write(tmp_path, {
        "tox.ini": "[pytest]\ntestpaths = checks\npython_files = check_*.py\n",
        "lib.py": "X = 1\n",
        "checks/check_lib.py": "def test_x():\n    pass\n",
        "other/test_ignored.py": "def test_y():\n    pass\n",
    })  # fmt: skip
    assert suite_of(tmp_path).test_files == ("checks/check_lib.py",)


def test_a_project_without_tests_is_a_clear_error(tmp_path):
    write(tmp_path, {"lib.py": "X = 1\n", "pyproject.toml": "[project]\nname = 'lib'\n"})
    with pytest.raises(NoTestsError, match="no test modules"):
        suite_of(tmp_path)


def test_binary_test_data_stays_out_of_the_text_patch(tmp_path):
    write(tmp_path, {"lib.py": "X = 1\n", "tests/test_lib.py": "def test_x():\n    pass\n"})
    (tmp_path / "tests" / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\xff\x00")
    assert suite_of(tmp_path).test_files == ("tests/test_lib.py",)


@pytest.mark.parametrize(
    ("addopts", "kept", "dropped"),
    [
        ("-ra -q --tb=short", ["-ra", "-q", "--tb=short"], []),
        ("--import-mode=importlib -m 'not slow'", ["--import-mode=importlib", "-m", "not slow"],
         []),
        ("-n auto --dist loadfile -v", ["-v"], ["-n", "auto", "--dist", "loadfile"]),
        ("--no-cov-on-fail --cov src -x", ["-x"], ["--no-cov-on-fail", "--cov", "src"]),
        ("-p pytest_cov -p no:warnings -pno:cacheprovider", ["-p", "no:warnings",
         "-pno:cacheprovider"], ["-p", "pytest_cov"]),
        ("--timeout=10 -W error", ["-W", "error"], ["--timeout=10"]),
    ],
)  # fmt: skip
def test_addopts_keep_what_pytest_itself_understands(addopts, kept, dropped):
    assert usable_addopts(shlex.split(addopts)) == (kept, dropped)
