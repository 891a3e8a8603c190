"""The pytest configuration a graded run uses, and the command line that carries it.

A graded run ignores every configuration file of the tree it tests (`-c /dev/null`):
the options come from the repository as the task built it (its base, before any patch),
read here with the same precedence pytest uses (`pytest.toml`, `.pytest.toml`,
`pytest.ini`, `.pytest.ini`, `pyproject.toml`, `tox.ini`, `setup.cfg`), and only the
options that shape collection and outcomes are kept. Dropped on purpose: `addopts`
(it can load plugins with `-p`), `required_plugins`, `minversion`, `confcutdir`,
`cache_dir` and anything a plugin would read (plugins are not loaded).
"""

from __future__ import annotations

import configparser
import shlex
import tomllib
from pathlib import Path

# Kept option → how pytest types it (`args`: shell words, `linelist`: one per line,
# `paths`: shell words relative to the config file, `bool`, `string`).
KEPT_OPTIONS = {
    "pythonpath": "paths",
    "testpaths": "args",
    "python_files": "args",
    "python_classes": "args",
    "python_functions": "args",
    "norecursedirs": "args",
    "usefixtures": "args",
    "doctest_optionflags": "args",
    "markers": "linelist",
    "filterwarnings": "linelist",
    "xfail_strict": "bool",
    "consider_namespace_packages": "bool",
    "empty_parameter_set_mark": "string",
    "doctest_encoding": "string",
    "log_level": "string",
    "log_format": "string",
    "log_date_format": "string",
}

# Flags of a task's test command that would stop the run early or select from a cache;
# the grader needs every test (the canaries included) to run.
_DROPPED_FLAGS = {"-x", "--exitfirst", "--lf", "--last-failed", "--ff", "--failed-first",
                  "--sw", "--stepwise", "--pdb", "--trace", "--nf", "--new-first"}  # fmt: skip
_DROPPED_WITH_VALUE = {"--maxfail", "--junitxml", "--junit-xml", "--basetemp", "--rootdir",
                       "-c", "--config-file", "--confcutdir", "--inifile"}  # fmt: skip


class UnsupportedTestCommand(ValueError):
    """A task's test command that is not a pytest invocation the grader can take over."""


def _ini_section(path: Path, section: str) -> dict[str, str] | None:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(path.read_text(errors="replace"), source=str(path))
    except configparser.Error:
        return None
    return dict(parser[section]) if parser.has_section(section) else None


def _toml(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text(errors="replace"))
    except tomllib.TOMLDecodeError:
        return {}


def read_options(root: Path) -> dict[str, object]:
    """The pytest options of the repository at `root` (its own config file only)."""
    for name in ("pytest.toml", ".pytest.toml"):
        if (root / name).is_file():
            return dict(_toml(root / name).get("pytest", {}))
    for name in ("pytest.ini", ".pytest.ini"):
        if (root / name).is_file():
            return _ini_section(root / name, "pytest") or {}
    if (root / "pyproject.toml").is_file():
        tool = _toml(root / "pyproject.toml").get("tool", {}).get("pytest")
        if isinstance(tool, dict):
            inline = {k: v for k, v in tool.items() if k != "ini_options"}
            return inline or dict(tool.get("ini_options") or {})
    for name, section in (("tox.ini", "pytest"), ("setup.cfg", "tool:pytest")):
        if (root / name).is_file() and (found := _ini_section(root / name, section)):
            return found
    return {}


def _words(value: object) -> list[str]:
    return shlex.split(value) if isinstance(value, str) else [str(v) for v in value]  # type: ignore[union-attr]


def override_args(options: dict[str, object], workspace: str) -> list[str]:
    """`-o name=value` for each kept option; paths made absolute under `workspace` (the
    config file they were relative to is not used)."""
    args: list[str] = []
    for name, kind in KEPT_OPTIONS.items():
        if name not in options:
            continue
        value = options[name]
        if kind == "paths":
            text = shlex.join(str(Path(workspace, p)) for p in _words(value))
        elif kind == "args":
            text = shlex.join(_words(value))
        elif kind == "linelist":
            text = value if isinstance(value, str) else "\n".join(map(str, value))  # type: ignore[arg-type]
        elif kind == "bool":
            text = str(value).lower()
        else:
            text = str(value)
        args += ["-o", f"{name}={text}"]
    return args


def command_args(command: str) -> list[str]:
    """The pytest arguments of a task's test command (`[VAR=x ...] python -m pytest ARGS`
    or `pytest ARGS`), without the flags the grader owns."""
    words = shlex.split(command)
    while words and "=" in words[0] and not words[0].startswith("-"):
        words.pop(0)  # VAR=value prefixes: the grader sets the environment itself
    if words[:1] in (["pytest"], ["py.test"]):
        rest = words[1:]
    elif (
        len(words) >= 3
        and Path(words[0]).name.startswith("python")
        and words[1:3]
        == [
            "-m",
            "pytest",
        ]
    ):
        rest = words[3:]
    else:
        raise UnsupportedTestCommand(f"not a pytest command: {command!r}")
    kept: list[str] = []
    skip = False
    for word in rest:
        if skip:
            skip = False
            continue
        flag = word.split("=", 1)[0]
        if word in _DROPPED_FLAGS or flag in {"--maxfail"} | _DROPPED_WITH_VALUE:
            skip = "=" not in word and flag in _DROPPED_WITH_VALUE | {"--maxfail"}
            continue
        kept.append(word)
    return kept
