"""The program that runs a graded pytest session: started as `python -I -c <this file's
source> <spec>` inside the sandbox, it imports the real pytest from the grader's own
environment, then reports every result over a sealed channel.

Why this shape:
- `-I` (isolated mode) leaves the working directory off `sys.path` and ignores
  `PYTHON*` variables and the user site, so nothing in the repository (a `pytest/`
  package, `sitecustomize.py`, `usercustomize.py`, a `.pth` file) is imported before
  pytest is. The repository goes on `sys.path` only once pytest and every module it
  needs are imported, as `python -m pytest` would put it there.
- Plugin autoloading is off and `PYTEST_ADDOPTS`/`PYTEST_PLUGINS` are dropped; the
  command line (built by the grader) names the configuration (`-c /dev/null` plus
  `-o` options read from the task's base repository).
- Results go to a file descriptor inherited from the grader (a pipe whose other end only
  the grader reads), each record sealed with an HMAC under a key read once from a second
  descriptor and then closed. The code under test runs in this same process and could
  in principle dig the key out of memory; that is why the grader also plants canary
  tests and statically checks the patch: this channel stops the cheap forgeries
  (printing results, rewriting a file), the canaries catch the rest by outcome.

This file imports nothing from `etude`: it runs where only the interpreter's own
environment is visible.
"""

import contextlib
import hashlib
import hmac
import json
import os
import pkgutil
import shutil
import sys


def _read_key(fd):
    chunks = []
    while chunk := os.read(fd, 4096):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


class _Channel:
    """Numbered, HMAC-sealed JSON lines to the grader."""

    def __init__(self, fd, key):
        self._fd, self._key, self._seq = fd, key, 0

    def send(self, record):
        record = {**record, "seq": self._seq}
        self._seq += 1
        body = json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
        seal = hmac.new(self._key, body, hashlib.sha256).hexdigest().encode()
        line = body + b"\t" + seal + b"\n"
        while line:
            line = line[os.write(self._fd, line) :]


def _message(report):
    crash = getattr(report.longrepr, "reprcrash", None)
    text = (crash.message if crash is not None else str(report.longrepr or "")).strip()
    # A module that fails to import says why on its last line (`E   ModuleNotFoundError:
    # …`), after a traceback of any length: keep the start and that end.
    return text if len(text) <= 500 else f"{text[:200]}\n…\n{text[-300:]}"


class Reporter:
    """A pytest plugin: every test phase and every failed collection, as it happens, with
    what a failed test's call raised (the class names of its MRO: canaries must fail for
    the reason their site expects)."""

    def __init__(self, channel):
        self.channel = channel
        self.raised = {}

    def pytest_runtest_makereport(self, item, call):
        if call.when == "call" and call.excinfo is not None:
            self.raised[item.nodeid] = [c.__name__ for c in call.excinfo.type.__mro__]
        # None: pytest's own implementation makes the report.

    def pytest_runtest_logreport(self, report):
        raised = self.raised.pop(report.nodeid, []) if report.when == "call" else []
        self.channel.send(
            {
                "kind": "test",
                "nodeid": report.nodeid,
                "when": report.when,
                "outcome": report.outcome,
                "xfail": hasattr(report, "wasxfail"),
                "message": _message(report) if report.failed else "",
                "raised": raised if report.failed else [],
            }
        )

    def pytest_collectreport(self, report):
        if report.failed:
            self.channel.send(
                {"kind": "collect", "nodeid": report.nodeid, "message": _message(report)}
            )


def _import_runner():
    """pytest and all of its own modules, so none is looked up once the repository is on
    `sys.path` (a repository module of the same name would shadow it)."""
    import _pytest
    import pluggy
    import pytest

    for package in (_pytest, pluggy):
        for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            with contextlib.suppress(Exception):  # optional parts may not import
                __import__(module.name)
    return pytest


def _add_site_dirs(directories):
    """The task's Python environment (its dependencies): each directory as a site directory
    (its `.pth` files processed: the environment's own names the workspace, `src` of a src
    layout), placed before this interpreter's own site-packages, as the environment's python
    orders them. Called once the runner is imported and bytecode is no longer read, like
    anything that may import the tree; the environment itself is the operator's, built
    before the agent began and read-only to it."""
    import site

    before = list(sys.path)
    for directory in directories:
        site.addsitedir(directory)
    added = [p for p in sys.path if p not in before]
    own = set(site.getsitepackages())
    at = next((i for i, p in enumerate(before) if p in own), len(before))
    sys.path[:] = [*before[:at], *added, *before[at:]]


def main(spec):
    if "copy_from" in spec:
        # The tree to test, copied into the sandbox's own size-limited workspace (links kept
        # as links: one pointing out of the tree points into the sandbox, not the host).
        shutil.copytree(spec["copy_from"], spec["workspace"], symlinks=True, dirs_exist_ok=True)
    key = _read_key(spec["key_fd"])
    channel = _Channel(spec["report_fd"], key)
    for variable in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS"):
        os.environ.pop(variable, None)
    os.environ.update(PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    pytest = _import_runner()
    # Before pytest's own implementation, which answers the hook first.
    Reporter.pytest_runtest_makereport = pytest.hookimpl(tryfirst=True)(
        Reporter.pytest_runtest_makereport
    )
    # From here on, bytecode is looked up under a prefix that cannot exist: the runner came
    # from the read-only system's own caches (compiling it afresh cost most of a grading),
    # but the tree's `__pycache__` may hold planted bytecode, so its modules compile from
    # source.
    sys.pycache_prefix = "/dev/null/pycache"
    _add_site_dirs(spec.get("site_dirs", ()))
    workspace = spec["workspace"]
    os.chdir(workspace)
    sys.path.insert(0, workspace)
    code = pytest.main(spec["args"], plugins=[Reporter(channel)])
    # Sent after pytest returned, from this frame: a run that never gets here (killed,
    # `os._exit`) has no "done" record and the grader trusts none of it.
    channel.send({"kind": "done", "exit_code": int(code)})
    return int(code)


if __name__ == "__main__":
    sys.exit(main(json.loads(sys.argv[1])))
