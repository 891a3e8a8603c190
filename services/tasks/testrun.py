"""Running a pytest suite in a one-off sandbox and reading its results per test id.

Used to grade (the reward service) and to synthesize tasks. The suite runs under bwrap
with no network and the environment's limits; results come from pytest's JUnit XML
(`junit_family=xunit1`, whose `file` attribute turns a test case back into its node id).
"""

from __future__ import annotations

import subprocess
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from pathlib import Path

from etude.environment.config import EnvironmentConfig
from etude.environment.sandbox.bwrap import Bwrap, bind_args, sandbox_argv
from etude.environment.sandbox.limits import CgroupSupport, SessionCgroup, limited

JUNIT_NAME = ".etude-junit.xml"
PYTEST_ARGS = ("-p", "no:cacheprovider", "-o", "junit_family=xunit1", "-q")


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

    def passed(self, test_id: str) -> bool:
        return self.outcomes.get(test_id) == "passed"

    @property
    def failing(self) -> list[str]:
        return sorted(t for t, o in self.outcomes.items() if o in {"failed", "error"})


def run_pytest(
    workdir: Path,
    command: str,
    *,
    bwrap: Bwrap | None,
    config: EnvironmentConfig,
    timeout_s: float,
) -> TestRun:
    """Run `command` (a pytest invocation) in `workdir`, sandboxed when `bwrap` is given."""
    junit = workdir / JUNIT_NAME
    junit.unlink(missing_ok=True)
    shell = f"{command} {' '.join(PYTEST_ARGS)} --junitxml={JUNIT_NAME}"
    inner = ["/bin/bash", "-c", shell]
    if bwrap is not None:
        inner = sandbox_argv(
            bwrap, workspace_args=bind_args(workdir), ro_binds=config.ro_binds, info_fd=None,
            command=inner,
        )  # fmt: skip
    no_cgroup = SessionCgroup(CgroupSupport(0, {}), "", config)
    argv = limited(inner, config, no_cgroup)
    started = time.perf_counter()
    try:
        done = subprocess.run(
            argv, cwd=workdir, capture_output=True, timeout=timeout_s, start_new_session=True
        )
    except subprocess.TimeoutExpired as expired:
        output = (expired.stdout or b"").decode(errors="replace")
        return TestRun(timed_out=True, seconds=time.perf_counter() - started, output=output)
    seconds = time.perf_counter() - started
    output = (done.stdout + done.stderr).decode(errors="replace")
    outcomes, messages = parse_junit(junit) if junit.exists() else ({}, {})
    return TestRun(outcomes, messages, done.returncode, False, seconds, output)


def parse_junit(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    outcomes: dict[str, str] = {}
    messages: dict[str, str] = {}
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        test_id = node_id(case.get("file", ""), case.get("classname", ""), case.get("name", ""))
        outcome = "passed"
        for child in case:
            if child.tag in {"failure", "error", "skipped"}:
                outcome = {"failure": "failed"}.get(child.tag, child.tag)
                if outcome != "skipped":
                    messages[test_id] = (child.get("message") or "").strip()
                break
        outcomes[test_id] = outcome
    return outcomes, messages


def node_id(file: str, classname: str, name: str) -> str:
    """pytest's node id from a JUnit test case: `tests/test_x.py::TestY::test_z[1]`."""
    module = file.removesuffix(".py").replace("/", ".")
    inner = classname.removeprefix(module).strip(".") if module else ""
    parts = [file or classname, *([inner] if inner else []), name]
    return "::".join(parts)
