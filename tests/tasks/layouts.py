"""Tiny projects in the layouts real ones use, for synthesizing from `--path` sources.

- `textbits`: a src layout, tests in `tests/` (an empty `__init__.py`, a conftest), a
  pyproject whose `addopts` need plugins the sandbox lacks (`--cov`, `-n auto`, `-p xdist`)
  beside pytest's own (`--strict-markers`, `-ra`); shipped as a `.tar.gz` sdist.
- `colorparse`: tests in `test/` with a helper module they import, a skipped and an
  xfailed test, setup.cfg configuration that asks for doctests; a plain directory.
- `unitconv`: tests inside the package (`unitconv/tests/`), a module that cannot be
  collected (a dependency that is not installed), named only by PKG-INFO; a `.zip`.
- `dateparts` (as python-dateutil 2.9 has it): `filterwarnings = error`, a parametrize
  argument pytest deprecates, and a conftest that marks every test with pytest-cov's
  `no_cover` (a mark pytest does not know without the plugin).
- `statbits`: a test module imports `tinydep`, a package etude's own Python lacks, which
  the project declares (tests/tasks/tiny_projects.py builds it and its wheelhouse).
- Suites pytest cannot start: a conftest.py with a hook of an older pytest
  (`pytest_ignore_collect(path, config)`, as boltons 25.0 has it), a conftest.py that
  imports what is not installed; a package that reads its own installed metadata.

Each is written from the dicts below (a file here per file there would be collected as
this repository's own tests).
"""

from __future__ import annotations

import tarfile
import zipfile
from pathlib import Path

TEXTBITS = {
    "pyproject.toml": """\
[project]
name = "textbits"
version = "1.2.0"

[tool.pytest.ini_options]
testpaths = ["tests"]
addopts = "--cov=textbits --cov-report=term-missing -n auto -p xdist --strict-markers -ra"
markers = ["slow: takes a while"]
""",
    "src/textbits/__init__.py": """\
from textbits.core import slugify, truncate, word_count

__all__ = ["slugify", "truncate", "word_count"]
""",
    "src/textbits/core.py": '''\
"""Small text helpers."""


def slugify(text, sep="-"):
    words = [w for w in text.lower().split() if w.isalnum()]
    return sep.join(words)


def truncate(text, limit, ellipsis="..."):
    if len(text) <= limit:
        return text
    return text[: limit - len(ellipsis)] + ellipsis


def word_count(text):
    count = 0
    for word in text.split():
        if word.strip(".,;:!?"):
            count += 1
    return count
''',
    "tests/__init__.py": "",
    "tests/conftest.py": """\
import pytest


@pytest.fixture
def sentence():
    return "The quick brown fox"
""",
    "tests/test_core.py": """\
import pytest

from textbits import slugify, truncate, word_count


def test_slugify(sentence):
    assert slugify(sentence) == "the-quick-brown-fox"


def test_slugify_separator():
    assert slugify("A b", sep="_") == "a_b"


def test_slugify_drops_punctuation():
    assert slugify("hello , world") == "hello-world"


def test_truncate_short_text_is_kept():
    assert truncate("abc", 3) == "abc"


def test_truncate_long_text():
    assert truncate("abcdefgh", 6) == "abc..."


def test_word_count(sentence):
    assert word_count(sentence) == 4


@pytest.mark.slow
def test_word_count_ignores_lone_punctuation():
    assert word_count("one , two !") == 2
""",
}

COLORPARSE = {
    "setup.cfg": """\
[metadata]
name = colorparse
version = 0.4

[tool:pytest]
addopts = --doctest-modules -p no:randomly
""",
    "colorparse/__init__.py": """\
from colorparse.parse import clamp_channel, parse_hex, to_hex
""",
    "colorparse/parse.py": '''\
"""CSS-style hex colours.

>>> parse_hex("#fff")
(255, 255, 255)
"""


def clamp_channel(value):
    if value < 0:
        return 0
    if value > 255:
        return 255
    return value


def parse_hex(text):
    text = text.lstrip("#")
    if len(text) == 3:
        text = "".join(c * 2 for c in text)
    if len(text) != 6:
        raise ValueError(f"not a colour: {text!r}")
    return tuple(int(text[i : i + 2], 16) for i in range(0, 6, 2))


def to_hex(red, green, blue):
    return "#" + "".join(f"{clamp_channel(c):02x}" for c in (red, green, blue))
''',
    "test/helpers.py": """\
WHITE = (255, 255, 255)
""",
    "test/test_parse.py": """\
import pytest
from helpers import WHITE

from colorparse import clamp_channel, parse_hex, to_hex


def test_parse_long_form():
    assert parse_hex("#102030") == (16, 32, 48)


def test_parse_short_form():
    assert parse_hex("#fff") == WHITE


def test_parse_rejects_bad_length():
    with pytest.raises(ValueError):
        parse_hex("#12345")


def test_to_hex():
    assert to_hex(16, 32, 48) == "#102030"


def test_to_hex_clamps():
    assert to_hex(-5, 300, 0) == "#00ff00"


def test_clamp_inside():
    assert clamp_channel(7) == 7


@pytest.mark.skip(reason="needs a display")
def test_preview_swatch():
    raise AssertionError("never runs")


@pytest.mark.xfail(reason="named colours are not supported")
def test_named_colour():
    assert parse_hex("red") == (255, 0, 0)
""",
}

UNITCONV = {
    "PKG-INFO": "Metadata-Version: 2.1\nName: unitconv\nVersion: 0.1\n",
    "setup.py": 'from setuptools import setup\n\nsetup(name="unitconv", packages=["unitconv"])\n',
    "unitconv/__init__.py": "from unitconv.convert import convert, to_fahrenheit\n",
    "unitconv/convert.py": '''\
"""Length and temperature conversions."""

FACTORS = {"m": 1.0, "km": 1000.0, "cm": 0.01}


def convert(value, source, target):
    if source not in FACTORS or target not in FACTORS:
        raise KeyError(f"unknown unit: {source} or {target}")
    return value * FACTORS[source] / FACTORS[target]


def to_fahrenheit(celsius):
    return celsius * 9 / 5 + 32
''',
    "unitconv/tests/__init__.py": "",
    "unitconv/tests/test_convert.py": """\
import pytest

from unitconv import convert, to_fahrenheit


def test_km_to_m():
    assert convert(2, "km", "m") == 2000


def test_cm_to_m():
    assert convert(250, "cm", "m") == 2.5


def test_unknown_unit():
    with pytest.raises(KeyError):
        convert(1, "mile", "m")


def test_freezing():
    assert to_fahrenheit(0) == 32


def test_boiling():
    assert to_fahrenheit(100) == 212
""",
    "unitconv/tests/test_arrays.py": """\
import not_an_installed_module  # an optional dependency the sandbox lacks


def test_arrays():
    assert not_an_installed_module
""",
}


DATEPARTS = {
    "setup.cfg": """\
[metadata]
name = dateparts

[tool:pytest]
pythonpath = .
filterwarnings =
    error
""",
    "dateparts/__init__.py": '''\
"""Splitting ISO dates."""


def split_date(text):
    year, month, day = (int(part) for part in text.split("-"))
    if not 1 <= month <= 12:
        raise ValueError(f"no month {month}")
    return year, month, day


def is_leap(year):
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
''',
    "tests/conftest.py": """\
import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.no_cover)  # pytest-cov's mark
""",
    "tests/test_parts.py": """\
import pytest

from dateparts import is_leap, split_date

DATES = {"2024-01-02": (2024, 1, 2), "1999-12-31": (1999, 12, 31)}


# A generator: pytest deprecates parametrizing with an iterable that is not a collection.
@pytest.mark.parametrize("text", (text for text in DATES))
def test_split(text):
    assert split_date(text) == DATES[text]


def test_bad_month():
    with pytest.raises(ValueError):
        split_date("2024-13-01")


def test_leap_years():
    assert is_leap(2024) and is_leap(2000)
    assert not is_leap(1900) and not is_leap(2023)
""",
}

STATBITS = {
    "statbits/__init__.py": "",
    "statbits/core.py": """\
def mean(values):
    if not values:
        return 0
    return sum(values) / len(values)


def spread(values):
    low, high = min(values), max(values)
    return high - low
""",
    "statbits/doubling.py": """\
from tinydep import double


def doubled_total(values, start=0):
    total = start
    for value in values:
        total += value
    return double(total)
""",
    "tests/test_core.py": """\
from statbits.core import mean, spread


def test_mean():
    assert mean([1, 2, 6]) == 3


def test_mean_of_nothing():
    assert mean([]) == 0


def test_spread():
    assert spread([4, 1, 9]) == 8
""",
    "tests/test_doubling.py": """\
from statbits.doubling import doubled_total


def test_doubled_total():
    assert doubled_total([1, 2, 3]) == 12


def test_doubled_total_of_nothing():
    assert doubled_total([]) == 0
""",
}
STATBITS_CONFIG = """
[project]
name = "statbits"
version = "1.0"
dependencies = ["tinydep>=1.0"]

[tool.pytest.ini_options]
pythonpath = ["."]
"""
"""Added to the pyproject.toml tests/tasks/tiny_projects.py writes (it builds the project)."""

OLD_HOOK_CONFTEST = {
    "pytest.ini": "[pytest]\npythonpath = .\n",
    "lib.py": "def answer():\n    return 42\n",
    "tests/conftest.py": "def pytest_ignore_collect(path, config):\n    return False\n",
    "tests/test_lib.py": "from lib import answer\n\n\ndef test_it():\n    assert answer() == 42\n",
}
BROKEN_CONFTEST = {**OLD_HOOK_CONFTEST, "tests/conftest.py": "import not_an_installed_module\n"}
# Reads its version from its installed metadata at import, as humanize 4.9 (and many a
# hatch or setuptools-scm project) does: its suite, run on its source, cannot import it.
SELF_VERSIONED = {
    "pyproject.toml": '[project]\nname = "selfversion"\nversion = "1.0"\n',
    "selfversion/__init__.py": (
        "import importlib.metadata\n\n__version__ = importlib.metadata.version(__name__)\n"
    ),
    "tests/test_version.py": "import selfversion\n\n\ndef test_it():\n    assert selfversion\n",
}


def write_statbits(root: Path) -> Path:
    """`statbits` at `root`, which pip builds offline (tests/tasks/tiny_backend.py)."""
    from tests.tasks.tiny_projects import make_project

    make_project(root, "statbits", "tinydep>=1.0", STATBITS, ".")
    with (root / "pyproject.toml").open("a") as pyproject:
        pyproject.write(STATBITS_CONFIG)
    return root


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def tar_sdist(directory: Path, top: str, files: dict[str, str]) -> Path:
    """`<top>.tar.gz` in `directory`, its files under `<top>/` as an sdist has them."""
    tree = write(directory / "tree" / top, files)
    archive = directory / f"{top}.tar.gz"
    with tarfile.open(archive, "w:gz") as out:
        out.add(tree, arcname=top)
    return archive


def zip_sdist(directory: Path, top: str, files: dict[str, str]) -> Path:
    archive = directory / f"{top}.zip"
    with zipfile.ZipFile(archive, "w") as out:
        for name, text in files.items():
            out.writestr(f"{top}/{name}", text)
    return archive
