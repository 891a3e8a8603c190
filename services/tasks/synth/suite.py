"""Where a project's tests are, and the pytest options its suite runs with.

Projects keep their tests in many places: a root `tests/` or `test/` folder, the folders
named by `testpaths`, `tests/` inside the package, `test_*.py` modules beside the code.
`discover` finds them the way pytest would (the project's `testpaths` and
`python_files`, else everything under the root) and decides which files are hidden from
the agent: the test modules, every `conftest.py`, and every text file under a test folder
(helpers and data the tests read).

The project's `addopts` are not applied by the graded run (it ignores the tree's own
configuration, `etude.tasks.grading_config`); the options of pytest itself that it holds
(`--import-mode`, `-m`, `-W`, `--ignore`, …) go into the task's test command instead,
and those that need a plugin the sandbox does not load (`--cov`, `-n auto`,
`--timeout`) are dropped and listed, so the suite runs without them.
"""

from __future__ import annotations

import fnmatch
import shlex
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path, PurePosixPath

from etude.tasks.grading_config import read_options

TEST_DIR_NAMES = frozenset({"tests", "test"})
# pytest's own warnings that say more of the pytest running the suite than of the project:
# a deprecation (a feature a later pytest refuses), a mark of a plugin not loaded here.
PYTEST_OWN_WARNINGS = ("ignore::pytest.PytestDeprecationWarning",
                       "ignore::pytest.PytestUnknownMarkWarning")  # fmt: skip
DEFAULT_PYTHON_FILES = ("test_*.py", "*_test.py")
# Doctests live in the sources and docs the agent sees and edits: they are not hidden
# tests, so a task never depends on them.
DOCTEST_OPTIONS = frozenset({
    "--doctest-modules", "--doctest-glob", "--doctest-report", "--doctest-continue-on-failure",
    "--doctest-ignore-import-errors",
})  # fmt: skip


class NoTestsError(ValueError):
    """The project has no test module pytest would collect."""


@dataclass(frozen=True, slots=True)
class Suite:
    test_files: tuple[str, ...]
    """Files hidden from the agent and installed only when grading (the test patch)."""
    args: tuple[str, ...] = ()
    """pytest options the task's test command adds (the project's usable `addopts`, and
    where its code lives when the configuration does not say)."""
    dropped: tuple[str, ...] = ()
    """`addopts` left out: they need a plugin the sandbox does not load, or run doctests."""

    @property
    def notes(self) -> list[str]:
        notes = []
        if self.dropped:
            notes.append(
                f"addopts left out (plugins the sandbox does not load, or doctests): "
                f"{shlex.join(self.dropped)}"
            )
        return notes


@dataclass(frozen=True, slots=True)
class _Layout:
    patterns: tuple[str, ...]
    roots: tuple[str, ...]
    """Folders (or files) tests are collected from, relative; empty: the whole project."""


def _words(value: object) -> list[str]:
    if value is None:
        return []
    return shlex.split(value) if isinstance(value, str) else [str(v) for v in value]  # type: ignore[union-attr]


def _under(path: str, root: str) -> bool:
    return root in ("", ".") or path == root or path.startswith(root.rstrip("/") + "/")


def _layout(root: Path, options: dict[str, object]) -> _Layout:
    patterns = tuple(_words(options.get("python_files"))) or DEFAULT_PYTHON_FILES
    roots: list[str] = []
    for entry in _words(options.get("testpaths")):
        # pytest expands globs in testpaths; an entry that names nothing is skipped as it
        # does when others exist.
        matches = sorted(root.glob(entry)) if any(c in entry for c in "*?[") else [root / entry]
        roots += [str(m.relative_to(root)) for m in matches if m.exists()]
    return _Layout(patterns, tuple(roots))


def discover(root: Path, files: list[str]) -> Suite:
    """The suite of the project at `root` whose files (relative) are `files`."""
    options = read_options(root)
    layout = _layout(root, options)
    modules = [
        f for f in files
        if any(_under(f, r) for r in layout.roots or ("",))
        and any(fnmatch.fnmatch(PurePosixPath(f).name, p) for p in layout.patterns)
        and f.endswith(".py")
    ]  # fmt: skip
    if not modules:
        where = ", ".join(layout.roots) if layout.roots else "anywhere in the project"
        raise NoTestsError(
            f"{root}: no test modules ({' or '.join(layout.patterns)}) {where}: "
            "the synthesizer needs a pytest suite"
        )
    test_dirs = {str(parent) for m in modules for parent in PurePosixPath(m).parents
                 if parent.name in TEST_DIR_NAMES}  # fmt: skip
    test_dirs |= {r for r in layout.roots if r not in ("", ".") and (root / r).is_dir()
                  and any(_under(m, r) for m in modules)}  # fmt: skip
    hidden = {
        f for f in files
        if f in modules or PurePosixPath(f).name == "conftest.py"
        or any(_under(f, d) for d in test_dirs)
    }  # fmt: skip
    args, dropped = usable_addopts(_words(options.get("addopts")))
    if (path := _missing_pythonpath(root, files, options)) is not None:
        args += ["-o", f"pythonpath={path}"]
    if _warnings_are_errors(options):
        # `filterwarnings = error` in a suite written for an older pytest, or with plugins:
        # pytest's own warnings (a parametrize argument it will refuse later, a plugin's
        # mark such as pytest-cov's `no_cover`) become errors that stop the whole run here,
        # about the pytest etude runs rather than the project. A -W given on the command
        # line is applied after the configuration's filters, so it wins.
        args += [word for warning in PYTEST_OWN_WARNINGS for word in ("-W", warning)]
    return Suite(tuple(sorted(f for f in hidden if _is_text(root / f))), tuple(args),
                 tuple(dropped))  # fmt: skip


def _warnings_are_errors(options: dict[str, object]) -> bool:
    value = options.get("filterwarnings")
    lines = value.splitlines() if isinstance(value, str) else _words(value)
    return any(line.strip().split(":")[0] == "error" for line in lines)


def _is_text(path: Path) -> bool:
    """Hidden files travel in a text diff: binary data (and anything not UTF-8) stays in
    the repository, visible but harmless."""
    try:
        path.read_bytes().decode("utf-8")
    except (UnicodeDecodeError, OSError):
        return False
    return True


def _missing_pythonpath(root: Path, files: list[str], options: dict[str, object]) -> str | None:
    """`src` plus the configured `pythonpath`, for a src layout whose configuration does
    not put `src` on the path (such projects count on being installed, and nothing is
    installed in the sandbox); None when nothing is missing."""
    configured = _words(options.get("pythonpath"))
    if any(p.strip("./") == "src" for p in configured):
        return None
    in_src = [f for f in files if f.startswith("src/") and f.endswith(".py")]
    if not in_src:
        return None
    return shlex.join([*configured, "src"])


@lru_cache(maxsize=1)
def _pytest_options() -> dict[str, bool]:
    """pytest's own command-line options (no plugin loaded) → whether one takes a value."""
    from _pytest.config import get_config

    parser = get_config()._parser.optparser  # private, hence the fallback in usable_addopts
    return {
        name: action.nargs not in (0, "?") for name, action in parser._option_string_actions.items()
    }


def usable_addopts(words: list[str]) -> tuple[list[str], list[str]]:
    """(kept, dropped): the `addopts` words pytest itself understands, and the rest.

    An unknown option's value is guessed: the word after it, unless that is an option
    itself (`--cov src` drops both, `--no-cov-on-fail -v` only the first)."""
    try:
        known = _pytest_options()
    except Exception:  # a pytest whose internals moved: run without the project's addopts
        return [], list(words)
    kept: list[str] = []
    dropped: list[str] = []
    index = 0
    while index < len(words):
        word = words[index]
        index += 1
        name, has_inline, value = word.partition("=")
        if not word.startswith("-"):
            dropped.append(word)  # a path or a stray value: the graded run picks its paths
            continue
        if not word.startswith("--") and len(word) > 2 and not has_inline:
            name, value, has_inline = word[:2], word[2:], "attached"  # -ra, -pno:x
        takes_value = known.get(name)
        unknown = takes_value is None
        if unknown:
            takes_value = not has_inline and index < len(words) and not words[index].startswith("-")
        consumed = [word]
        if takes_value and not has_inline:
            value = words[index] if index < len(words) else ""
            consumed.append(value)
            index += 1
        if name == "-p" and not value.startswith("no:"):
            unknown = True  # loads a plugin: plugins are not loaded in the sandbox
        if unknown or name in DOCTEST_OPTIONS:
            dropped += consumed
        else:
            kept += consumed
    return kept, dropped
