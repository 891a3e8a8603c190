"""The task format, and SWE-bench-style JSONL in and out.

A task is a repository at a commit, an instruction (the "issue"), hidden tests the agent
never sees (a test patch, applied only when grading), the command that runs them, and the
test ids that must pass: FAIL_TO_PASS (fail before the fix, pass after) and PASS_TO_PASS
(pass before and after). Records load from SWE-bench / SWE-Gym / SWE-smith / SWE-rebench
exports unchanged (see `Task.from_swe` for the fields read; every other field is kept and
written back), given where their repositories are (etude.tasks.sources).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_TEST_COMMAND = "python -m pytest -q -p no:cacheprovider"

# Keys of a SWE-bench record this module maps to Task fields; every other key is kept
# in `extra` and written back unchanged.
_SWE_KEYS = {
    "instance_id", "repo", "base_commit", "problem_statement", "test_patch", "patch",
    "FAIL_TO_PASS", "PASS_TO_PASS", "test_cmd", "test_command", "metadata",
    "environment_setup_commit",
}  # fmt: skip
# SWE-bench's install specification (its per-version table) as datasets inline it: at the
# top level of a record, or in `install_config` (SWE-rebench), which wins. Both stay in
# `extra`; `install_config` is written back with `Task.setup` over it.
_SETUP_KEYS = ("python", "packages", "reqs_path", "pip_packages", "pre_install", "install")
_COMMIT = re.compile(r"[0-9a-fA-F]{40}(?:[0-9a-fA-F]{24})?")


class TaskRecordError(ValueError):
    """A record that is not a task; the message names the record and the field."""


@dataclass(frozen=True, slots=True)
class Setup:
    """How the Python environment of a task's tests is built (SWE-bench's install
    specification, SWE-rebench's `install_config`); names as those datasets spell them.
    All empty: the project as it stands (etude.tasks.pyenv decides what that means)."""

    environment_setup_commit: str = ""
    """The commit whose dependency files define the environment; empty: the base commit.
    Tasks sharing it share one environment."""
    python: str = ""
    """The Python version the dataset names, `3.9`; advisory: environments are built with
    the Python that grades the tests (etude.tasks.pyenv warns when it differs)."""
    packages: str = ""
    """SWE-bench's `packages`: `requirements.txt`, `environment.yml`, or package names."""
    reqs_path: tuple[str, ...] = ()
    """Requirements files in the repository."""
    pip_packages: tuple[str, ...] = ()
    """Requirement specifiers installed besides, `pytest==7.4.0`."""
    pre_install: tuple[str, ...] = ()
    """Shell commands run before installing (recorded; not run by etude)."""
    install: str = ""
    """The command that installs the project, `python -m pip install -e .` (recorded; the
    project is imported from the workspace, never installed)."""

    def to_install_config(self) -> dict[str, Any]:
        """The non-empty fields but the commit, as `install_config` holds them."""
        fields = {k: getattr(self, k) for k in _SETUP_KEYS}
        return {k: list(v) if isinstance(v, tuple) else v for k, v in fields.items() if v}


@dataclass(frozen=True, slots=True)
class Task:
    id: str
    repo: str
    """Where the repository comes from: `owner/name` (found through
    etude.tasks.sources: a named repository, a directory of checkouts or mirrors), or
    `etude-mini/<project>` for the bundled suite."""
    base_commit: str
    instruction: str
    test_patch: str
    """A unified diff that adds the hidden tests; applied only when grading."""
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    test_command: str = DEFAULT_TEST_COMMAND
    gold_patch: str = ""
    """A fix known to work (SWE-bench's `patch`); empty when none is known."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """source, project, difficulty, split, and for synthesized tasks the bug as a patch."""
    extra: dict[str, Any] = field(default_factory=dict)
    """The record's other fields (`version`, `hints_text`, …), written back unchanged."""
    setup: Setup = Setup()

    @property
    def split(self) -> str:
        return str(self.metadata.get("split", "train"))

    def to_swe(self) -> dict[str, Any]:
        record = {
            **self.extra,
            "instance_id": self.id,
            "repo": self.repo,
            "base_commit": self.base_commit,
            "problem_statement": self.instruction,
            "test_patch": self.test_patch,
            "patch": self.gold_patch,
            "FAIL_TO_PASS": list(self.fail_to_pass),
            "PASS_TO_PASS": list(self.pass_to_pass),
            "test_cmd": self.test_command,
            "metadata": self.metadata,
        }
        if self.setup.environment_setup_commit:
            record["environment_setup_commit"] = self.setup.environment_setup_commit
        if _setup_of(record) != self.setup:  # set in code, not read from these fields
            given = record.get("install_config")
            record["install_config"] = {
                **(given if isinstance(given, dict) else {}),
                **self.setup.to_install_config(),
            }
        return record

    @classmethod
    def from_swe(cls, record: dict[str, Any]) -> Task:
        """A task from a SWE-bench-layout record: `instance_id`, `repo`, `base_commit`,
        `problem_statement` (required), `test_patch`, `patch`, `FAIL_TO_PASS` and
        `PASS_TO_PASS` (lists, or lists as JSON text), `test_cmd` (or `test_command`, or
        `install_config.test_cmd`), `environment_setup_commit` and an install
        specification (`Setup`); TaskRecordError names the record and the field at fault."""
        if not isinstance(record, dict):
            raise TaskRecordError(f"a task record is a JSON object, not {type(record).__name__}")
        name = record.get("instance_id")
        fields = _Fields(record, f"task {name!r}" if isinstance(name, str) else "task record")
        required = {"instance_id", "repo", "base_commit", "problem_statement"}
        if missing := sorted(required - record.keys()):
            raise TaskRecordError(f"{fields.where} lacks {missing}")
        install_config = _Fields(
            fields.mapping("install_config"), f"{fields.where}: install_config"
        )
        base_commit = fields.text("base_commit", required=True)
        if not _COMMIT.fullmatch(base_commit):
            raise fields.fail("base_commit", f"{base_commit!r} is not a full commit id")
        test_command = (
            fields.command("test_cmd") or fields.command("test_command")
            or install_config.command("test_cmd")
        )  # fmt: skip
        return cls(
            id=fields.text("instance_id", required=True),
            repo=fields.text("repo", required=True),
            base_commit=base_commit.lower(),
            instruction=fields.text("problem_statement", required=True),
            test_patch=fields.text("test_patch"),
            fail_to_pass=fields.test_ids("FAIL_TO_PASS"),
            pass_to_pass=fields.test_ids("PASS_TO_PASS"),
            test_command=test_command or DEFAULT_TEST_COMMAND,
            gold_patch=fields.text("patch"),
            metadata=fields.mapping("metadata"),
            extra={k: v for k, v in record.items() if k not in _SWE_KEYS},
            setup=_setup(fields, install_config),
        )


def _setup_of(record: dict[str, Any]) -> Setup | None:
    """The setup a record's own fields give; None where they give none (broken)."""
    fields = _Fields(record, "task")
    try:
        return _setup(fields, _Fields(fields.mapping("install_config"), "install_config"))
    except TaskRecordError:
        return None


def _setup(fields: _Fields, install_config: _Fields) -> Setup:
    commit = fields.text("environment_setup_commit")
    if commit and not _COMMIT.fullmatch(commit):
        raise fields.fail("environment_setup_commit", f"{commit!r} is not a full commit id")
    # A key of `install_config` wins over the same key at the top level.
    at = {k: install_config if k in install_config.record else fields for k in _SETUP_KEYS}
    python = at["python"].record.get("python")
    if isinstance(python, int | float) and not isinstance(python, bool):
        python = str(python)  # `3.9` written as a number
    return Setup(
        environment_setup_commit=commit.lower(),
        python=python if isinstance(python, str) else at["python"].text("python"),
        packages=at["packages"].text("packages"),
        reqs_path=at["reqs_path"].strings("reqs_path"),
        pip_packages=at["pip_packages"].strings("pip_packages"),
        pre_install=at["pre_install"].strings("pre_install"),
        install=at["install"].command("install"),
    )


class _Fields:
    """Typed reads of a record's fields; an error names the record and the field."""

    def __init__(self, record: dict[str, Any], where: str) -> None:
        self.record = record
        self.where = where

    def fail(self, key: str, problem: str) -> TaskRecordError:
        return TaskRecordError(f"{self.where}: {key}: {problem}")

    def text(self, key: str, *, required: bool = False) -> str:
        value = self.record.get(key)
        if value is None and not required:
            return ""
        if not isinstance(value, str) or (required and not value):
            wanted = "non-empty text" if required else "text"
            raise self.fail(key, f"expected {wanted}, got {value!r:.80}")
        return value

    def mapping(self, key: str) -> dict[str, Any]:
        value = self.record.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(key, f"expected an object, got {value!r:.80}")
        return dict(value)

    def strings(self, key: str) -> tuple[str, ...]:
        """A list of strings; one string is a list of one (but older SWE-bench specs wrote
        `pip_packages` as one string of names: split on whitespace)."""
        value = self.record.get(key)
        if value is None or value == "":
            return ()
        if isinstance(value, str):
            return tuple(value.split()) if key == "pip_packages" else (value,)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(key, f"expected a list of strings, got {value!r:.80}")
        return tuple(value)

    def command(self, key: str) -> str:
        """A shell command; SWE-bench's specs sometimes list several, run in turn."""
        if isinstance(self.record.get(key), list):
            return " && ".join(self.strings(key))
        return self.text(key)

    def test_ids(self, key: str) -> tuple[str, ...]:
        """SWE-bench stores the lists as JSON text; later exports store them as lists."""
        value = self.record.get(key)
        if value is None or value == "":
            return ()
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as error:
                raise self.fail(key, f"not a JSON list of test ids ({error})") from None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(key, f"test ids must be a list of strings, got {value!r:.80}")
        return tuple(value)


def read_jsonl(path: Path) -> Iterator[Task]:
    with path.open() as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise TaskRecordError(f"{path}:{number}: not JSON: {error}") from None
            try:
                yield Task.from_swe(record)
            except TaskRecordError as error:
                raise TaskRecordError(f"{path}:{number}: {error}") from None


def write_jsonl(path: Path, tasks: Iterable[Task]) -> int:
    count = 0
    with path.open("w") as out:
        for task in tasks:
            out.write(json.dumps(task.to_swe(), sort_keys=True) + "\n")
            count += 1
    return count


def as_dict(task: Task) -> dict[str, Any]:
    return asdict(task)
