"""The seccomp filter of every sandboxed process: a classic-BPF program handed to bwrap.

With no capabilities and a non-root uid inside, most of these calls fail anyway; the filter
is the second layer, for kernel bugs and for whatever a capability check misses. Denied
calls return EPERM (a program sees an ordinary refusal, not a crash), except:

* `clone3` returns ENOSYS: its flags sit in a struct BPF cannot read, and on ENOSYS libc
  falls back to `clone`, whose flags are checked (no new namespaces).
* A syscall of another ABI (i386 via `int 0x80`, x32 numbers ≥ 0x40000000) kills the
  process: the numbers below mean other calls there, so they cannot be filtered by number.

The list follows what container runtimes deny by default (mounts and the new mount API,
namespaces, tracing and other processes' memory, the keyring, eBPF and perf, kernel
modules and kexec, raw I/O ports, swap, clocks, accounting, quotas, io_uring), narrowed to
what a coding task never needs. The program is built here, in Python, for the host's
architecture (x86_64 or aarch64).
"""

from __future__ import annotations

import errno
import fcntl
import os
import platform
import struct
from functools import lru_cache

# Syscall numbers: (x86_64, aarch64); None where the architecture has no such call.
DENIED: dict[str, tuple[int | None, int | None]] = {
    "mount": (165, 40), "umount2": (166, 39), "pivot_root": (155, 41), "chroot": (161, 51),
    "open_tree": (428, 428), "move_mount": (429, 429), "fsopen": (430, 430),
    "fsconfig": (431, 431), "fsmount": (432, 432), "fspick": (433, 433),
    "mount_setattr": (442, 442), "open_tree_attr": (467, 467),
    "unshare": (272, 97), "setns": (308, 268),
    "ptrace": (101, 117), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271),
    "pidfd_getfd": (438, 438), "process_madvise": (440, 440), "kcmp": (312, 272),
    "keyctl": (250, 219), "add_key": (248, 217), "request_key": (249, 218),
    "bpf": (321, 280), "perf_event_open": (298, 241), "userfaultfd": (323, 282),
    "fanotify_init": (300, 262), "lookup_dcookie": (212, 18),
    "kexec_load": (246, 104), "kexec_file_load": (320, 294),
    "init_module": (175, 105), "finit_module": (313, 273), "delete_module": (176, 106),
    "open_by_handle_at": (304, 265), "name_to_handle_at": (303, 264),
    "iopl": (172, None), "ioperm": (173, None), "uselib": (134, None), "_sysctl": (156, None),
    "swapon": (167, 224), "swapoff": (168, 225), "reboot": (169, 142),
    "settimeofday": (164, 170), "clock_settime": (227, 112), "clock_adjtime": (305, 266),
    "adjtimex": (159, 171), "acct": (163, 89), "quotactl": (179, 60),
    "quotactl_fd": (443, 443), "sethostname": (170, 161), "setdomainname": (171, 162),
    "vhangup": (153, 58), "nfsservctl": (180, 42), "syslog": (103, 116),
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427), "move_pages": (279, 239), "migrate_pages": (256, 238),
}  # fmt: skip
CLONE = (56, 220)
CLONE3 = (435, 435)
PERSONALITY = (135, 92)
IOCTL = (16, 29)

# clone() flags that make a namespace: a nested sandbox could remount or map uids.
CLONE_NAMESPACE_FLAGS = (
    0x00020000  # CLONE_NEWNS
    | 0x02000000  # CLONE_NEWCGROUP
    | 0x04000000  # CLONE_NEWUTS
    | 0x08000000  # CLONE_NEWIPC
    | 0x10000000  # CLONE_NEWUSER
    | 0x20000000  # CLONE_NEWPID
    | 0x40000000  # CLONE_NEWNET
)
# personality() values programs really use (as Docker allows): the default, 32-bit
# `linux32`, UNAME26 and the query; others (no ASLR, READ_IMPLIES_EXEC) are refused.
ALLOWED_PERSONALITIES = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)
TIOCSTI = 0x5412  # push bytes into a terminal's input: typing commands as someone else
TIOCLINUX = 0x541C

_ARCHES = {"x86_64": (0, 0xC000003E), "amd64": (0, 0xC000003E), "aarch64": (1, 0xC00000B7)}
_X32_SYSCALL_BIT = 0x40000000

# Classic BPF opcodes and seccomp return values (linux/filter.h, linux/seccomp.h).
_LD_ABS_W = 0x20
_JEQ, _JGE, _JSET = 0x15, 0x35, 0x45
_RET = 0x06
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000
# Offsets in struct seccomp_data; arguments are 64-bit, their low half first (both
# supported architectures are little-endian), and the calls checked take int-sized flags.
_NR, _ARCH = 0, 4


def _arg_low(index: int) -> int:
    return 16 + 8 * index


class UnsupportedArchitectureError(RuntimeError):
    """No syscall table for this machine; the sandbox refuses to run without a filter."""


def _stmt(code: int, k: int) -> tuple[int, int, int, int]:
    return (code, 0, 0, k)


def _jump(code: int, k: int, jt: int, jf: int) -> tuple[int, int, int, int]:
    return (code, jt, jf, k)


def build_filter(machine: str | None = None) -> bytes:
    """The filter for `machine` (default: this host's), as bwrap's `--seccomp` reads it:
    an array of `struct sock_filter`."""
    machine = (machine or platform.machine()).lower()
    if machine not in _ARCHES:
        raise UnsupportedArchitectureError(f"no seccomp syscall table for {machine}")
    column, audit_arch = _ARCHES[machine]
    eperm = RET_ERRNO | errno.EPERM

    prog = [
        _stmt(_LD_ABS_W, _ARCH),
        _jump(_JEQ, audit_arch, 1, 0),
        _stmt(_RET, RET_KILL_PROCESS),
        _stmt(_LD_ABS_W, _NR),
    ]
    if column == 0:  # x32 reuses the x86_64 arch value with this bit set in the number
        prog += [_jump(_JGE, _X32_SYSCALL_BIT, 0, 1), _stmt(_RET, RET_KILL_PROCESS)]
    for numbers in DENIED.values():
        if (number := numbers[column]) is not None:
            prog += [_jump(_JEQ, number, 0, 1), _stmt(_RET, eperm)]
    prog += [_jump(_JEQ, CLONE3[column], 0, 1), _stmt(_RET, RET_ERRNO | errno.ENOSYS)]

    # clone: refused with a namespace flag; either way it falls through to the reload.
    prog += [
        _jump(_JEQ, CLONE[column], 0, 3),
        _stmt(_LD_ABS_W, _arg_low(0)),
        _jump(_JSET, CLONE_NAMESPACE_FLAGS, 0, 1),
        _stmt(_RET, eperm),
        _stmt(_LD_ABS_W, _NR),
    ]
    # personality: allowed only with the values listed.
    allowed = len(ALLOWED_PERSONALITIES)
    prog += [_jump(_JEQ, PERSONALITY[column], 0, allowed + 3), _stmt(_LD_ABS_W, _arg_low(0))]
    for index, value in enumerate(ALLOWED_PERSONALITIES):
        prog.append(_jump(_JEQ, value, allowed - index, 0))  # to the ALLOW past the EPERM
    prog += [_stmt(_RET, eperm), _stmt(_RET, RET_ALLOW)]
    # ioctl: every request but the two that inject terminal input.
    prog += [
        _jump(_JEQ, IOCTL[column], 0, 4),
        _stmt(_LD_ABS_W, _arg_low(1)),
        _jump(_JEQ, TIOCSTI, 1, 0),
        _jump(_JEQ, TIOCLINUX, 0, 1),
        _stmt(_RET, eperm),
        _stmt(_RET, RET_ALLOW),
    ]
    return b"".join(struct.pack("=HBBI", *instruction) for instruction in prog)


@lru_cache(maxsize=1)
def _filter_memfd(pid: int) -> int:
    """A sealed memfd holding the filter, opened once per process (`pid` keys the cache so
    a forked child makes its own)."""
    fd = os.memfd_create("etude-seccomp", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.write(fd, build_filter())
    seals = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    return fd


def filter_path() -> str:
    """A path any child of this process can open to read the filter (bwrap wants an fd;
    a path lets callers that spawn with `close_fds` still hand it over)."""
    pid = os.getpid()
    return f"/proc/{pid}/fd/{_filter_memfd(pid)}"
