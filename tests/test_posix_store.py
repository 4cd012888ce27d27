"""The POSIX store's page-cache footprint: buffered reads and durable writes drop their pages
behind them (storage/posix.py), every byte still moved, and a non-durable write keeps its pages."""

from __future__ import annotations

import os
import shutil
import subprocess
import zlib
from pathlib import Path

import pytest

from mlpstorage_py.storage.posix import DROP_BEHIND, PosixStore

SIZE = 4 * DROP_BEHIND + 12345  # several dropped ranges and an unaligned tail
BLOCK = 1 << 20


def resident(path: Path) -> int:
    """Bytes of ``path`` in the page cache, by util-linux fincore."""
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--raw", "--output", "RES", str(path)],
                         capture_output=True, text=True, check=True).stdout
    return int(out.split()[0])


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
    """Eviction waits for writeback; without fsync nothing is waited for, so nothing is dropped."""
    path = folder / "shard.pt"
    PosixStore().write(str(path), SIZE, block_size=BLOCK, fsync=False)
    assert resident(path) > SIZE // 2
    os.sync()


def test_read_reads_every_byte_and_leaves_no_pages(folder):
    path = folder / "shard.pt"
    with open(path, "wb") as fh:  # resident: a plain write keeps its pages, clean once fsync'd
        fh.write(os.urandom(SIZE))
        os.fsync(fh.fileno())
    assert resident(path) > 0
    assert PosixStore().read(str(path), block_size=BLOCK) == SIZE
    assert resident(path) == 0


def test_o_direct_read_and_write_keep_whole_sizes(folder):
    path = folder / "shard.pt"
    store = PosixStore(direct=True)
    assert store.write(str(path), SIZE, block_size=BLOCK, fsync=True).bytes == SIZE
    assert store.read(str(path), block_size=BLOCK) == SIZE == path.stat().st_size
