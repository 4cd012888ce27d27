"""The POSIX store's page-cache footprint: buffered reads and durable writes drop their pages
behind them (storage/posix.py), every byte still moved, and a non-durable write keeps its pages.

The page cache is the machine's: any other process's `echo 3 > /proc/sys/vm/drop_caches` (and
mlpstorage drops caches itself before reads) drops every clean page, a test's own once written
back. So no test here fails because pages are missing: "no pages left" holds whatever another
process drops; "pages kept" is asserted only where no cache drop ran meanwhile (the kernel counts
each finished drop in /proc/vmstat drop_pagecache), and the non-durable write's promise, that it
waits for no writeback and drops nothing, is checked on its calls (tests/syscall_guard.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

from syscall_guard import STOPPED_EXIT, unsupported

from mlpstorage_py.storage.posix import DROP_BEHIND, PosixStore

SIZE = 4 * DROP_BEHIND + 12345  # several dropped ranges and an unaligned tail
BLOCK = 1 << 20


def resident(path: Path) -> int:
    """Bytes of ``path`` in the page cache, by util-linux fincore."""
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--raw", "--output", "RES", str(path)],
                         capture_output=True, text=True, check=True).stdout
    return int(out.split()[0])


def cache_drops() -> int | None:
    """Cache drops finished on this machine since boot, by any process (None: not counted here)."""
    for line in Path("/proc/vmstat").read_text(encoding="ascii").splitlines():
        name, _, value = line.partition(" ")
        if name == "drop_pagecache":
            return int(value)
    return None


def assert_kept(path: Path, at_least: int, drops_before: int | None, settle_s: float = 5.0) -> None:
    """At least `at_least` bytes of ``path`` are in the page cache, unless another process dropped
    the caches since `drops_before` was read: the count moves once a drop finishes, so a drop
    still running when the pages were found missing is waited for (settle_s)."""
    held = resident(path)
    if held >= at_least:
        return
    deadline = time.monotonic() + settle_s
    while drops_before is not None and time.monotonic() < deadline:
        if cache_drops() != drops_before:
            print(f"{path.name}: {held} bytes resident; another process dropped the page cache meanwhile")
            return
        time.sleep(0.05)
    raise AssertionError(f"{path.name}: {held} bytes resident, expected >= {at_least}, and no cache drop ran meanwhile")


# The store's write in a child process whose calls that wait for writeback or drop pages are
# stopped by a seccomp filter (tests/syscall_guard.py): exit 0 and the bytes written, or
# STOPPED_EXIT and where the first such call was made.
GUARDED_WRITE = """
import json, sys
sys.path.insert(0, sys.argv[5])
from syscall_guard import forbid_waits
from mlpstorage_py.storage.posix import PosixStore
store = PosixStore()
forbid_waits()
done = store.write(sys.argv[1], int(sys.argv[2]), block_size=int(sys.argv[3]), fsync=sys.argv[4] == "1")
print(json.dumps({"bytes": done.bytes, "fsync_calls": done.fsync_calls}))
"""


def guarded_write(path: Path, fsync: bool) -> subprocess.CompletedProcess:
    reason = unsupported()
    if reason:
        pytest.skip(f"cannot guard the write's calls: {reason}")
    done = subprocess.run([sys.executable, "-c", GUARDED_WRITE, str(path), str(SIZE), str(BLOCK), "1" if fsync else "0",
                           str(Path(__file__).parent)], capture_output=True, text=True, timeout=120)
    if "prctl(" in done.stderr:
        pytest.skip(f"the kernel refuses a seccomp filter here: {done.stderr.strip().splitlines()[-1]}")
    return done


def filesystem(path: Path) -> str:
    """Type of the mount holding ``path`` (the longest mount point that is a prefix of it)."""
    best, kind = "", ""
    for line in Path("/proc/mounts").read_text(encoding="utf-8").splitlines():
        point, fstype = line.split()[1:3]
        if str(path).startswith(point) and len(point) > len(best):
            best, kind = point, fstype
    return kind


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    if shutil.which("fincore") is None:
        pytest.skip("needs fincore (util-linux) to see page-cache residency")
    if filesystem(tmp_path.resolve()) in ("tmpfs", "ramfs"):
        pytest.skip("tmp_path is in memory: its pages are the file, nothing can evict them")
    return tmp_path


def test_durable_write_leaves_no_pages_and_moves_every_byte(folder):
    path = folder / "shard.pt"
    result = PosixStore().write(str(path), SIZE, block_size=BLOCK, fsync=True)
    assert result.bytes == SIZE and result.fsync_calls == 1
    assert path.stat().st_size == SIZE and path.stat().st_blocks * 512 >= SIZE  # written, not sparse
    assert resident(path) == 0
    data = path.read_bytes()
    assert len(zlib.compress(data, 1)) > 0.99 * SIZE  # still incompressible


def test_write_without_fsync_keeps_its_dirty_pages(folder):
    """Eviction waits for writeback; without fsync nothing is waited for, so nothing is dropped:
    the write makes no call that waits for writeback or drops pages (fsync, a waiting
    sync_file_range, fadvise DONTNEED, an O_SYNC/O_DIRECT open: each would stop it), and its
    pages are in the page cache after it unless another process dropped the caches meanwhile."""
    path = folder / "shard.pt"
    drops_before = cache_drops()
    done = guarded_write(path, fsync=False)
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr.strip()[-600:]}"
    assert json.loads(done.stdout) == {"bytes": SIZE, "fsync_calls": 0} and path.stat().st_size == SIZE
    assert_kept(path, SIZE // 2, drops_before)
    os.sync()


def test_the_write_guard_stops_a_durable_write(folder):
    """The guard above is live: the same write with fsync is stopped at its first wait."""
    done = guarded_write(folder / "shard.pt", fsync=True)
    assert done.returncode == STOPPED_EXIT and "STOPPED" in done.stderr, done.stderr[-600:]
    assert "posix.py" in done.stderr  # stopped inside the store, where it waits for writeback
    os.sync()


def test_read_reads_every_byte_and_leaves_no_pages(folder):
    path = folder / "shard.pt"
    drops_before = cache_drops()
    with open(path, "wb") as fh:  # resident: a plain write keeps its pages, clean once fsync'd
        fh.write(os.urandom(SIZE))
        os.fsync(fh.fileno())
    assert_kept(path, 1, drops_before)  # (the read brings the file in either way: its own pages are what it drops)
    assert PosixStore().read(str(path), block_size=BLOCK) == SIZE
    assert resident(path) == 0


def test_o_direct_read_and_write_keep_whole_sizes(folder):
    path = folder / "shard.pt"
    store = PosixStore(direct=True)
    assert store.write(str(path), SIZE, block_size=BLOCK, fsync=True).bytes == SIZE
    assert store.read(str(path), block_size=BLOCK) == SIZE == path.stat().st_size
