"""A kernel-side record of the calls that wait for writeback or drop pages, for tests whose
subject is that a code path makes none: page-cache residency cannot tell, since any other
process's `echo 3 > /proc/sys/vm/drop_caches` drops every clean page on the machine (a test's
own, once written back) whatever the code did.

`forbid_waits()` installs a seccomp filter on the calling thread (irreversible: call it in a
child process) that stops, with SIGSYS, fsync, fdatasync, sync, syncfs, msync, openat2, a
posix_fadvise(DONTNEED), a sync_file_range that waits (WAIT_BEFORE or WAIT_AFTER; a plain
SYNC_FILE_RANGE_WRITE only starts writeback) and an open with O_SYNC, O_DSYNC or O_DIRECT. A
stopped call is not made (the kernel skips it; what it returns is meaningless), and the SIGSYS
handler, which Python runs at the next bytecode boundary, writes `STOPPED <where the code was>`
to stderr and ends the process with exit status STOPPED_EXIT: nothing the code does after the
call (ignore an error, swallow an exception) can hide it.
Standard library only; x86_64 and aarch64 (`unsupported()` says why not elsewhere).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import signal
import traceback

# <linux/filter.h>, <linux/seccomp.h>, <linux/prctl.h>
LD_W_ABS, JEQ_K, JSET_K, RET_K = 0x20, 0x15, 0x45, 0x06
RET_ALLOW, RET_TRAP = 0x7FFF0000, 0x00030000
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
NR, ARCH = 0, 4  # struct seccomp_data: nr, arch, instruction_pointer, args[6] (low half at 16 + 8 i)
SYNC_FILE_RANGE_WAITS = 1 | 4
POSIX_FADV_DONTNEED = 4
STOPPED_EXIT = 75
O_DSYNC = 0o10000  # O_SYNC is __O_SYNC | O_DSYNC: this bit catches both
# per machine: audit arch, O_DIRECT, the calls always stopped, and the numbers of the ones inspected
ARCHES = {
    "x86_64": {"audit": 0xC000003E, "o_direct": 0o40000,
               "always": {"fsync": 74, "fdatasync": 75, "msync": 26, "sync": 162, "syncfs": 306, "openat2": 437},
               "fadvise64": 221, "sync_file_range": 277, "openat": 257, "open": 2},
    "aarch64": {"audit": 0xC00000B7, "o_direct": 0o200000,
                "always": {"fsync": 82, "fdatasync": 83, "msync": 227, "sync": 81, "syncfs": 267, "openat2": 437},
                "fadvise64": 223, "sync_file_range": 84, "openat": 56},
}


class SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]


def unsupported() -> str:
    """Why this machine cannot guard a test ('' where it can)."""
    if platform.system() != "Linux":
        return "seccomp is Linux's"
    if platform.machine() not in ARCHES:
        return f"no syscall table here for {platform.machine()}"
    return ""


def arg(i: int) -> int:
    return 16 + 8 * i


def program(machine: str) -> list[tuple[int, int, int, int]]:
    """The filter: (code, jt, jf, k) with jumps resolved (BPF jumps only forward)."""
    a = ARCHES[machine]
    opens = O_DSYNC | a["o_direct"]
    code: list = [(LD_W_ABS, 0, 0, ARCH), (JEQ_K, 0, "allow", a["audit"]), (LD_W_ABS, 0, 0, NR)]
    code += [(JEQ_K, "trap", 0, nr) for nr in a["always"].values()]
    code += [(JEQ_K, "sfr", 0, a["sync_file_range"]), (JEQ_K, "fadvise", 0, a["fadvise64"]),
             (JEQ_K, "openat", 0, a["openat"])]
    if "open" in a:
        code.append((JEQ_K, "open", 0, a["open"]))
    code += [(RET_K, 0, 0, RET_ALLOW),
             "sfr", (LD_W_ABS, 0, 0, arg(3)), (JSET_K, "trap", "allow", SYNC_FILE_RANGE_WAITS),
             "fadvise", (LD_W_ABS, 0, 0, arg(3)), (JEQ_K, "trap", "allow", POSIX_FADV_DONTNEED),
             "openat", (LD_W_ABS, 0, 0, arg(2)), (JSET_K, "trap", "allow", opens),
             "open", (LD_W_ABS, 0, 0, arg(1)), (JSET_K, "trap", "allow", opens),
             "trap", (RET_K, 0, 0, RET_TRAP),
             "allow", (RET_K, 0, 0, RET_ALLOW)]
    labels, out = {}, []
    for item in code:
        if isinstance(item, str):
            labels[item] = len(out)
        else:
            out.append(item)
    resolved = []
    for at, (op, jt, jf, k) in enumerate(out):
        jt, jf = (labels[j] - at - 1 if isinstance(j, str) else j for j in (jt, jf))
        assert 0 <= jt < 256 and 0 <= jf < 256, "a jump out of range"
        resolved.append((op, jt, jf, k))
    return resolved


def forbid_waits() -> None:
    """Install the filter on this thread (the main one: Python runs signal handlers there); the
    first call it stops ends the process (see the module's docstring). Raises OSError where the
    kernel refuses a filter."""

    def on_sigsys(_signo: int, frame) -> None:
        where = " <- ".join(f"{os.path.basename(f.filename)}:{f.lineno} {f.name}"
                            for f in reversed(traceback.extract_stack(frame)[-3:]))
        os.write(2, f"STOPPED {where}\n".encode())
        os._exit(STOPPED_EXIT)

    signal.signal(signal.SIGSYS, on_sigsys)
    instructions = program(platform.machine())
    table = (SockFilter * len(instructions))(*(SockFilter(*i) for i in instructions))
    prog = SockFprog(len(instructions), table)
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong)
    for option, value, pointer in ((PR_SET_NO_NEW_PRIVS, 1, None), (PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(prog))):
        if libc.prctl(option, value, pointer, 0, 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"prctl({option}): {os.strerror(err)}")
