"""Running a pytest suite in a one-off sandbox and reading its results per test id.

Used to grade (the reward service) and to synthesize tasks. The run is built so the tree
under test cannot steer it (see `grading_plugin.py` for the in-sandbox half):
- the real pytest of this interpreter, started in isolated mode, with plugin autoloading
  off and no configuration file of the tree (`-c /dev/null`): the options come from
  `options_from`, the repository as the task built it, before any patch;
- the results come over a pipe the grader alone reads, as HMAC-sealed records; nothing
  is read back from the tree (no JUnit file in it);
- the sandbox joins a fresh cgroup (memory + pids, the limits of `config`: for grading,
  `SandboxConfig.for_grading()`) that is emptied and removed at the end and on timeout, so
  no process outlives the run.

A run in which the suite itself could not run (a usage error, nothing collected, a test
module that fails to import) is not a run where every test failed: `TestRun.suite_error`
says what went wrong, for the synthesizer, verification and grading alike.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import secrets
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from etude.sandbox.bwrap import (
    SANDBOX_PATH,
    SOURCE,
    WORKSPACE,
    Bwrap,
    bind_args,
    copied_workspace_args,
    sandbox_argv,
)
from etude.sandbox.config import SandboxConfig
from etude.sandbox.limits import CgroupSupport, SessionCgroup, limited
from etude.sandbox.output import file_tail
from etude.tasks.grading_config import command_args, override_args, read_options
from etude.tasks.pyenv_marker import RUNNING_PYTHON, NotAnEnvironmentError, read_environment

PLUGIN_SOURCE = Path(__file__).with_name("grading_plugin.py")
# Options the grader always sets; they come after the task's own so they win.
FIXED_ARGS = ("-p", "no:cacheprovider", "-c", "/dev/null", "--color=no", "-q")
MAX_CHANNEL_BYTES = 64 * 1024**2
GRADING_CGROUPS = "etude-grade-"
"""Prefix of a run's cgroup, `etude-grade-<pid>-<random>`: the pid of the process that ran
it, so what a killed one left is found (etude.sandbox.reclaim)."""
OUTPUT_TAIL_CHARS = 20_000
# pytest's exit codes for a suite that did not run its tests: interrupted (a module that
# failed to collect stops the session), internal error, usage error, nothing collected.
SUITE_NOT_RUN = {2: "interrupted", 3: "pytest's internal error", 4: "usage error",
                 5: "no tests collected"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class TestRun:
    outcomes: dict[str, str] = field(default_factory=dict)
    """node id → passed, failed, error or skipped."""
    messages: dict[str, str] = field(default_factory=dict)
    """node id → the failure message pytest reported (first lines), for failed tests."""
    exit_code: int | None = None
    timed_out: bool = False
    seconds: float = 0.0
    output: str = ""
    collection_errors: dict[str, str] = field(default_factory=dict)
    """node id of a file or directory that failed to collect → its message."""
    complete: bool = False
    """Whether pytest returned and said so over the channel (not killed, not `os._exit`)."""
    problem: str = ""
    """Why the channel cannot be trusted (a record with a bad seal, out of order, too
    much data), else empty."""
    raised: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """node id of a failed test → the class names of what its call raised (its MRO)."""

    def passed(self, test_id: str) -> bool:
        return self.outcomes.get(test_id) == "passed"

    @property
    def failing(self) -> list[str]:
        return sorted(t for t, o in self.outcomes.items() if o in {"failed", "error"})

    @property
    def suite_error(self) -> str:
        """Why the suite could not run at all, for the user (empty when it ran: tests that
        failed, a timeout, a distrusted channel are not this). Only a run that reported its
        end counts: a tree that kills pytest early cannot pass for a broken suite."""
        if self.timed_out or self.problem or not self.complete or self.exit_code is None:
            return ""
        collection = "; ".join(
            f"{where or 'collection'}: {error_line(message)}"
            for where, message in list(self.collection_errors.items())[:3]
        )
        if self.exit_code in SUITE_NOT_RUN:
            detail = collection or _pytest_errors(self.output) or SUITE_NOT_RUN[self.exit_code]
            return f"{detail} (pytest exit code {self.exit_code})"
        if collection and not self.outcomes:
            return collection
        return ""


@lru_cache(maxsize=1)
def host_cgroups() -> CgroupSupport:
    return CgroupSupport.detect()


def run_pytest(
    workdir: Path,
    command: str,
    *,
    bwrap: Bwrap | None,
    config: SandboxConfig,
    timeout_s: float,
    test_paths: tuple[str, ...] = (),
    options_from: Path | None = None,
    cgroups: CgroupSupport | None = None,
    python_environment: Path | None = None,
    workspace_bytes: int | None = None,
) -> TestRun:
    """Run the pytest arguments of `command` on `workdir`, sandboxed when `bwrap` is given.

    `test_paths` (relative to `workdir`) are what to collect (empty: the configured
    `testpaths`); `options_from` is the tree whose pytest configuration applies
    (default: `workdir` itself, for trusted trees); `cgroups` defaults to what the host
    offers; `python_environment`, the root of the task's environment (etude.tasks.pyenv),
    whose packages the tests import. `workspace_bytes` (sandboxed runs): the tests run on a
    copy of `workdir` in the sandbox's memory, of that size, and `workdir` stays read-only
    (grading: what the code under test writes never reaches the host); unset, `workdir`
    itself is the writable workspace. Raises `UnsupportedTestCommand` for a command that is
    not pytest, NotAnEnvironmentError for an environment that is not one of this Python."""
    site_dirs = _site_dirs(python_environment) if python_environment is not None else []
    workspace = WORKSPACE if bwrap is not None else str(workdir.resolve())
    args = [
        *override_args(read_options(options_from or workdir), workspace),
        # After the configuration's: an option the task's command sets on purpose (a
        # `pythonpath` the project's configuration lacks) wins over it.
        *_absolute_paths(command_args(command), workspace),
        *FIXED_ARGS,
        f"--rootdir={workspace}",
        f"--confcutdir={workspace}",
        *test_paths,
    ]
    key = secrets.token_bytes(32)
    key_read, key_write = _high_pipe()
    os.write(key_write, key.hex().encode())
    os.close(key_write)
    report_read, report_write = _high_pipe()
    spec = {
        "workspace": workspace, "key_fd": key_read, "report_fd": report_write, "args": args,
        "site_dirs": site_dirs,
    }  # fmt: skip
    workspace_args = bind_args(workdir)
    if bwrap is not None and workspace_bytes is not None:
        workspace_args = copied_workspace_args(bwrap, workdir, workspace_bytes)
        spec["copy_from"] = SOURCE
    python = [
        # -B: no bytecode is written. The program points the bytecode cache at nowhere
        # before the tree's first import, so none planted there is read instead of source.
        sys.executable, "-I", "-B",
        "-c", PLUGIN_SOURCE.read_text(), json.dumps(spec),
    ]  # fmt: skip
    if bwrap is not None:
        python = sandbox_argv(
            bwrap, workspace_args=workspace_args, ro_binds=config.ro_binds, info_fd=None,
            command=python, uid=config.uid, gid=config.uid, tmp_bytes=config.tmp_bytes,
            python_environment=python_environment,
        )  # fmt: skip
    cgroup = SessionCgroup(
        cgroups or host_cgroups(), f"{GRADING_CGROUPS}{os.getpid()}-{secrets.token_hex(6)}", config
    )
    reader = _ChannelReader(report_read, key.hex().encode())
    started = time.perf_counter()
    try:
        with tempfile.TemporaryFile() as output:
            process = subprocess.Popen(
                limited(python, config, cgroup), cwd=workdir, stdin=subprocess.DEVNULL,
                stdout=output, stderr=subprocess.STDOUT, pass_fds=(key_read, report_write),
                start_new_session=True, env=_host_env(),
            )  # fmt: skip
            os.close(key_read)
            os.close(report_write)
            reader.start()
            timed_out = False
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            cgroup.kill_run(process)
            process.wait()
            seconds = time.perf_counter() - started
            reader.join(5)
            text = file_tail(output, OUTPUT_TAIL_CHARS)
    finally:
        cgroup.remove()
        reader.close()
    if timed_out:
        return TestRun(timed_out=True, seconds=seconds, output=text)
    return TestRun(
        reader.outcomes(), reader.messages, process.returncode, False, seconds, text,
        reader.collection_errors, reader.done, reader.problem, reader.raised,
    )  # fmt: skip


def _site_dirs(python_environment: Path) -> list[str]:
    """The environment's site-packages, for the runner to add once pytest is imported.

    The tests run on this interpreter, not the environment's own python: the runner must be
    the real pytest, imported before anything of the tree, and the environment's python
    puts the workspace on its path at startup (its `.pth`), where a planted `pytest/` or
    `sitecustomize.py` would load first. Its site-packages are added as a site directory
    instead (its `.pth` files processed), ahead of this interpreter's own, as its python
    would have them. That needs the same Python version (compiled packages are per version)."""
    environment = read_environment(python_environment)
    if environment.python_version != RUNNING_PYTHON:
        raise NotAnEnvironmentError(
            f"{python_environment} is an environment of Python {environment.python_version}; "
            f"the tests run on Python {RUNNING_PYTHON}"
        )
    return [str(environment.purelib)]


def _absolute_paths(args: list[str], workspace: str) -> list[str]:
    """`-o pythonpath=a b` of a task's command with its paths under `workspace`: pytest
    would read them relative to the configuration file, which is /dev/null here."""
    fixed = list(args)
    for index, word in enumerate(fixed):
        if word in ("-o", "--override-ini") and index + 1 < len(fixed):
            fixed[index + 1] = _absolute_pythonpath(fixed[index + 1], workspace)
        for prefix in ("--override-ini=", "-o"):
            if word.startswith(prefix) and len(word) > len(prefix) and word != "-o":
                fixed[index] = prefix + _absolute_pythonpath(word[len(prefix) :], workspace)
                break
    return fixed


def _absolute_pythonpath(setting: str, workspace: str) -> str:
    name, _, value = setting.partition("=")
    if name != "pythonpath":
        return setting
    return "pythonpath=" + shlex.join(str(Path(workspace, p)) for p in shlex.split(value))


def error_line(message: str) -> str:
    """The line of a pytest message that says what went wrong: the exception (`E   …`)
    that ends a collection error's traceback, else the first line."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    raised = [line.removeprefix("E").strip() for line in lines if line.startswith("E ")]
    return (raised[-1] if raised else lines[0] if lines else "")[:300]


def _pytest_errors(output: str) -> str:
    """pytest's own `ERROR: …` lines (a usage error, a missing file), shortened."""
    errors = [line.strip() for line in output.splitlines() if line.startswith("ERROR")]
    return "; ".join(errors[:3])[:600]


def _high_pipe() -> tuple[int, int]:
    """A pipe whose ends are numbered above the descriptors the sandbox's launcher uses
    for itself (it redirects 10 and 11), so passing them cannot collide."""
    ends = []
    for fd in os.pipe():
        ends.append(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 64))
        os.close(fd)
    return ends[0], ends[1]


def _host_env() -> dict[str, str]:
    """What the process backend sees (bwrap clears it anyway): no PYTHON*/PYTEST* of the
    service's own environment."""
    return {"PATH": SANDBOX_PATH, "LANG": "C.UTF-8"}


class _ChannelReader(threading.Thread):
    """Reads and verifies the records of one run, in a thread (a full pipe would block
    the run)."""

    def __init__(self, fd: int, key: bytes) -> None:
        super().__init__(daemon=True)
        self.fd, self.key = fd, key
        self.phases: dict[str, dict[str, dict]] = {}
        self.messages: dict[str, str] = {}
        self.collection_errors: dict[str, str] = {}
        self.raised: dict[str, tuple[str, ...]] = {}
        self.done = False
        self.problem = ""
        self._expected_seq = 0

    def run(self) -> None:
        buffered, total = b"", 0
        with contextlib.suppress(OSError):
            while chunk := os.read(self.fd, 65536):
                total += len(chunk)
                if total > MAX_CHANNEL_BYTES:
                    self._distrust("more results than any suite produces")
                    return
                buffered += chunk
                *lines, buffered = buffered.split(b"\n")
                for line in lines:
                    self._record(line)
        if buffered:
            self._distrust("a partial record")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)

    def _distrust(self, why: str) -> None:
        self.problem = self.problem or why

    def _record(self, line: bytes) -> None:
        body, _, seal = line.rpartition(b"\t")
        expected = hmac.new(self.key, body, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected.encode(), seal):
            return self._distrust("a result record with a bad seal")
        record = json.loads(body)
        if record.get("seq") != self._expected_seq or self.done:
            return self._distrust("result records out of order")
        self._expected_seq += 1
        if record["kind"] == "test":
            self.phases.setdefault(record["nodeid"], {})[record["when"]] = record
            if record["when"] == "call" and record.get("raised"):
                self.raised[record["nodeid"]] = tuple(map(str, record["raised"]))
        elif record["kind"] == "collect":
            self.collection_errors[record["nodeid"]] = record["message"]
        elif record["kind"] == "done":
            self.done = True

    def outcomes(self) -> dict[str, str]:
        """Per test: error (setup or teardown failed), failed, skipped or passed."""
        found = {}
        for test_id, phases in self.phases.items():
            setup, call, teardown = (phases.get(w) for w in ("setup", "call", "teardown"))
            if setup and setup["outcome"] == "failed":
                outcome, failed = "error", setup
            elif call and call["outcome"] == "failed":
                outcome, failed = "failed", call
            elif teardown and teardown["outcome"] == "failed":
                outcome, failed = "error", teardown
            elif any(p and p["outcome"] == "skipped" for p in (setup, call)):
                outcome, failed = "skipped", None  # skipped, or xfailed as expected
            elif call and call["outcome"] == "passed":
                outcome, failed = "passed", None
            else:
                outcome, failed = "error", None  # no call phase: never ran
            found[test_id] = outcome
            if failed is not None:
                self.messages[test_id] = failed["message"]
        return found
