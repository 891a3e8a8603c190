"""A tiny project with a pytest suite, for synthesizing tasks quickly in tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from etude.sandbox.bwrap import find_bwrap
from tests.conftest import skip_without_sandboxes

SOURCE = '''\
"""Small numeric helpers."""


def clamp(value, low, high):
    # Keep value inside [low, high].
    if value < low:
        return low
    if value > high:
        return high
    return value


def mean(values):
    total = 0
    for value in values:
        total += value
    return total / len(values)


def window(items, size):
    return [items[i : i + size] for i in range(len(items) - size + 1)]


def minutes_and_seconds(seconds):
    return divmod(seconds, 60)
'''

TESTS = """\
from mathbits.core import clamp, mean, minutes_and_seconds, window


def test_clamp_below():
    assert clamp(-5, 0, 10) == 0


def test_clamp_above():
    assert clamp(15, 0, 10) == 10


def test_clamp_inside():
    assert clamp(5, 0, 10) == 5


def test_clamp_at_bounds():
    assert clamp(0, 0, 10) == 0
    assert clamp(10, 0, 10) == 10


def test_mean():
    assert mean([1, 2, 3, 6]) == 3


def test_window():
    assert window([1, 2, 3, 4], 2) == [[1, 2], [2, 3], [3, 4]]


def test_window_whole():
    assert window([1, 2], 2) == [[1, 2]]


def test_minutes_and_seconds():
    assert minutes_and_seconds(125) == (2, 5)
"""


@pytest.fixture(scope="session")
def bwrap():
    with skip_without_sandboxes():
        return find_bwrap(None)


def write_tiny_project(root: Path) -> Path:
    """The `mathbits` project, with its suite, under `root`."""
    (root / "mathbits").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "mathbits" / "__init__.py").write_text("")
    (root / "mathbits" / "core.py").write_text(SOURCE)
    (root / "tests" / "test_core.py").write_text(TESTS)
    (root / "pyproject.toml").write_text('[tool.pytest.ini_options]\npythonpath = ["."]\n')
    return root


@pytest.fixture
def tiny_project(tmp_path: Path) -> Path:
    return write_tiny_project(tmp_path / "mathbits")
