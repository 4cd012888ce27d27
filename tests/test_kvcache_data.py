"""kv-cache.py's KV data and its .npy reads: files no compressor shrinks (even with a window far
longer than the data pool) and with no duplicate 512 B block, a fill() that stamps a short last
block too, and a header parser that needs no `ast` (CPython 3.11 builds ASTs thread-unsafely),
so 32+ reader threads at once are safe."""

from __future__ import annotations

import ast
import hashlib
import io
import shutil
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import REPO

KV_DIR = REPO / "kv_cache_benchmark"
sys.path.insert(0, str(KV_DIR))

from kvcache_sim.payload import BLOCK, KVData, chunks  # noqa: E402
from kvcache_sim.storage import BadHeader, StorageTier, npy_header, read_npy_header  # noqa: E402

MIB = 1 << 20
ZSTD = shutil.which("zstd")
# 720 B of KV per token: most entries end in a short block (720 * tokens is rarely a multiple of 512).
TOY = {"toy": {"num_layers": 2, "hidden_size": 90, "num_heads": 2, "kv_heads": 2}}


def zstd_ratio(chunks: list[bytes], window_log: int = 27) -> float:
    """Input / output bytes of `zstd -1 --long=N` over the chunks as one stream (one frame, so
    the window spans every file, as it would over a volume)."""
    done = subprocess.run([ZSTD, "-1", f"--long={window_log}", "-c"], input=b"".join(chunks),
                          capture_output=True, check=True)
    return sum(map(len, chunks)) / len(done.stdout)


def duplicate_blocks(chunks: list[bytes]) -> int:
    """Whole 512 B blocks (at each chunk's own 512 B offsets) whose bytes another block has."""
    seen = Counter(hashlib.blake2b(c[i:i + BLOCK], digest_size=16).digest()
                   for c in chunks for i in range(0, len(c) - BLOCK + 1, BLOCK))
    return sum(seen.values()) - len(seen)


needs_zstd = pytest.mark.skipif(ZSTD is None, reason="the zstd CLI is not installed (apt-get install zstd)")


# -- the files a run writes ----------------------------------------------------------------------
@needs_zstd
def test_cache_files_do_not_compress_or_dedup_with_a_pool_far_smaller_than_the_data(shm, tmp_path):
    """A 1 MiB pool under 10+ MiB of files: a copied pool would repeat 10+ times inside zstd's
    128 MiB window (the old data compressed ~6x here)."""
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({
        "model_configs": TOY, "engine": {"data_pool_mib": 1, "io_chunk_kib": 256},
        "user_templates": {"chatbot": {"context_tokens": [800, 4000], "generation_tokens": [1, 4],
                                       "think_time_s": [0.0, 0.0], "weight": 1},
                           "coding": {"weight": 0}, "document": {"weight": 0}}}))
    out = tmp_path / "run.json"
    argv = [sys.executable, str(KV_DIR / "kv-cache.py"), "--model", "toy", "--num-users", "4", "--duration", "30",
            "--max-requests", "16", "--gpu-mem-gb", "0", "--cpu-mem-gb", "0", "--generation-mode", "none",
            "--seed", "5", "--config", str(config), "--cache-dir", str(shm), "--output", str(out),
            "--keep-cache-files", "--log-level", "WARNING"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    files = [p.read_bytes() for p in sorted(shm.glob("*.npy"))]
    assert sum(map(len, files)) > 10 * MIB
    assert any((len(f) - 128) % BLOCK for f in files)  # short last blocks are in the sample
    assert zstd_ratio(files) <= 1.01
    assert duplicate_blocks(files) == 0
    assert duplicate_blocks([f[128:] for f in files]) == 0  # at the data's own 512 B offsets too


# -- fill() ---------------------------------------------------------------------------------------
def test_fill_of_a_buffer_not_a_multiple_of_512_writes_every_byte_and_stamps_every_block():
    size = 3 * MIB + 2 * BLOCK + 300  # pieces of 512 KiB (half the 1 MiB pool), then a short block
    blocks = -(-size // BLOCK)
    # Two sources with the same seed give the same bytes but for the stamps (a random base):
    # filling a zeroed and a 0xFF buffer shows every byte is written, none left as it was.
    a, b = KVData(1, np.dtype(np.uint8), 1, seed=9), KVData(1, np.dtype(np.uint8), 1, seed=9)
    base_a, base_b = a._stamp, b._stamp
    out_a, out_b = np.zeros(size, np.uint8), np.full(size, 0xFF, np.uint8)
    a.fill(out_a)
    b.fill(out_b)
    assert a.stamps_issued == blocks
    stamp_bytes = np.zeros(size, bool)
    for number in range(blocks):
        stamp_bytes[number * BLOCK:number * BLOCK + 8] = True
    assert np.array_equal(out_a[~stamp_bytes], out_b[~stamp_bytes])
    for out, base in ((out_a, base_a), (out_b, base_b)):
        stamps = out[:(blocks - 1) * BLOCK].view("<u8")[::BLOCK // 8]
        assert np.array_equal(stamps, np.arange(base, base + blocks - 1, dtype=np.uint64))
        last = out[(blocks - 1) * BLOCK:]
        assert last.size == 300 and int.from_bytes(last[:8].tobytes(), "little") == base + blocks - 1
    # a tail shorter than one stamp holds the stamp's first bytes
    tiny = np.zeros(BLOCK + 5, np.uint8)
    first = a._stamp
    a.fill(tiny)
    assert tiny[BLOCK:].tobytes() == (first + 1).to_bytes(8, "little")[:5]


@needs_zstd
def test_fills_of_the_same_pool_share_no_run_of_bytes():
    """8 MiB from a 1 MiB pool (every pool region cut many times): a new key per piece makes each
    cut differ in nearly every byte, so zstd finds nothing to match."""
    data = KVData(1, np.dtype(np.uint8), 1, seed=4)
    out = np.empty(8 * MIB + 100, np.uint8)
    data.fill(out)
    chunk = out.tobytes()
    assert zstd_ratio([chunk]) <= 1.01 and duplicate_blocks([chunk]) == 0


@needs_zstd
def test_an_entrys_later_chunks_refreshed_in_place_share_no_run_of_bytes():
    """chunks() fills an entry's first chunk from the pool and refreshes the same buffer in place
    for the next ones (a fresh key XORed over it, new stamps): 16 chunks of one buffer must not
    compress, repeat a block, or lose a stamp, the last one short of a whole block."""
    data = KVData(1, np.dtype(np.uint8), 1, seed=6)
    buffer = np.empty(MIB, np.uint8)
    data.fill(buffer)
    pieces, first = [buffer.tobytes()], data._stamp
    for number in range(15):
        piece = buffer[:MIB - (300 if number == 14 else 0)]
        data.refresh(piece)
        pieces.append(piece.tobytes())
    assert zstd_ratio(pieces) <= 1.01 and duplicate_blocks(pieces) == 0
    stamps = [int.from_bytes(p[i:i + 8], "little") for p in pieces[1:] for i in range(0, len(p), BLOCK)]
    assert stamps == list(range(first, first + len(stamps)))


def test_a_payload_is_written_through_one_fill_then_refreshes():
    data = KVData(4, np.dtype(np.uint8), 1, seed=2)
    calls = []
    for name in ("fill", "refresh"):
        real = getattr(data, name)
        setattr(data, name, lambda out, real=real, name=name: (calls.append((name, out.size)), real(out))[1])
    buffer = np.empty(64 * BLOCK, np.uint8)
    moved = b"".join(piece.tobytes() for piece in chunks(data.make(2 * 64 * BLOCK // 4 + 10), buffer))
    assert calls == [("fill", 64 * BLOCK), ("refresh", 64 * BLOCK), ("refresh", 40)] and len(moved) == 2 * 64 * BLOCK + 40


# -- the .npy header parser -------------------------------------------------------------------
def saved(array: np.ndarray, version: tuple[int, int] | None = None) -> bytes:
    out = io.BytesIO()
    np.lib.format.write_array(out, array, version=version)
    return out.getvalue()


def saved_header_2_0(shape: tuple[int, int], descr: str) -> bytes:
    out = io.BytesIO()
    np.lib.format.write_array_header_2_0(out, {"descr": descr, "fortran_order": False, "shape": shape})
    return out.getvalue()


@pytest.mark.parametrize("version", [None, (1, 0), (2, 0)])
@pytest.mark.parametrize("dtype", ["<f2", "<f4", "<f8", "<u2", "|i1", "|u1", "<i8", "|b1", "<c8", "<c16", ">f4"])
def test_the_parser_reads_what_np_save_writes(version, dtype):
    for shape in [(0, 3), (1, 1), (7, 5), (3, 1024), (), (9,), (2, 3, 4)]:
        array = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape).astype(dtype)
        fh = io.BytesIO(saved(array, version))
        got_shape, got_dtype = read_npy_header(fh, "x.npy")
        assert got_shape == shape and got_dtype == np.dtype(dtype)
        assert np.array_equal(np.frombuffer(fh.read(), dtype=got_dtype).reshape(got_shape), array)


@pytest.mark.parametrize("shape", [(25000, 65536), (1, 2 ** 40), (2 ** 63, 2)])
def test_the_parser_reads_our_headers_and_large_shapes(shape):
    for header in (npy_header(shape, np.dtype(np.float16)),
                   saved_header_2_0(shape, "<f2")):
        fh = io.BytesIO(header + b"data")
        assert read_npy_header(fh, "big.npy") == (shape, np.dtype(np.float16))
        assert fh.read() == b"data"  # left at the first data byte
    assert len(npy_header(shape, np.dtype(np.float16))) % 64 == 0


def raw_header(text: str, version: bytes = b"\x01\x00") -> bytes:
    body = text.encode("latin1")
    return b"\x93NUMPY" + version + len(body).to_bytes(2 if version == b"\x01\x00" else 4, "little") + body


GOOD = "{'descr': '<f2', 'fortran_order': False, 'shape': (3, 4), }          \n"


@pytest.mark.parametrize("data, message", [
    (b"", "ends inside the .npy magic"),
    (b"\x93NUMP", "ends inside the .npy magic"),
    (b"\x93NUMPX\x01\x00\x10\x00", "not a .npy file"),
    (b"PK\x03\x04\x14\x00\x00\x00\x08\x00", "not a .npy file"),
    (raw_header(GOOD, b"\x03\x00"), "version 3.0"),
    (raw_header(GOOD, b"\x01\x01"), "version 1.1"),
    (b"\x93NUMPY\x02\x00\x10", "ends inside the .npy header length"),
    (raw_header(GOOD)[:-10], "ends inside the .npy header"),
    (b"\x93NUMPY\x02\x00" + (1 << 30).to_bytes(4, "little"), "more than 4096"),
    (raw_header(GOOD.replace("False", "True")), "not a C-order"),
    (raw_header(GOOD.replace("(3, 4)", "(3, 4,)")), "not a C-order"),
    (raw_header(GOOD.replace("(3, 4)", "(,)")), "not a C-order"),
    (raw_header(GOOD.replace("(3, 4)", "(3,4)")), "not a C-order"),
    (raw_header(GOOD.replace("(3, 4)", "[3, 4]")), "not a C-order"),
    (raw_header(GOOD.replace("(3, 4)", "(3L, 4L)")), "not a C-order"),
    (raw_header(GOOD.replace("(3, 4)", "(-3, 4)")), "not a C-order"),
    (raw_header(GOOD.replace("'<f2'", "'|O'")), "not a C-order"),
    (raw_header(GOOD.replace("'<f2'", "'<U3'")), "not a C-order"),
    (raw_header(GOOD.replace("'<f2'", "'<M8[ns]'")), "not a C-order"),
    (raw_header(GOOD.replace("'<f2'", "[('a', '<f2')]")), "not a C-order"),
    (raw_header(GOOD.replace("'<f2'", "__import__('os').getpid()")), "not a C-order"),
    (raw_header(GOOD.replace("'<f2'", "'<f3'")), "unknown dtype '<f3'"),
    (raw_header(GOOD.rstrip("\n")), "not a C-order"),
    (raw_header(GOOD + "x\n"), "not a C-order"),
    (raw_header(GOOD.replace(", }", ", 'extra': 1, }")), "not a C-order"),
    (raw_header(GOOD.replace("'descr'", '"descr"')), "not a C-order"),
])
def test_the_parser_refuses_anything_else_naming_the_file(data, message):
    with pytest.raises(BadHeader, match=message) as caught:
        read_npy_header(io.BytesIO(data), "/cache/kv_7_u1.npy")
    assert isinstance(caught.value, ValueError) and str(caught.value).startswith("/cache/kv_7_u1.npy: ")


def test_storage_reads_and_writes_use_no_ast(tmp_path, monkeypatch):
    """numpy's header readers go through ast.literal_eval -> ast.parse; ours must not. (ast.parse
    is spied on, not broken: pytest itself needs it to report a failure.)"""
    def parses(action) -> int:
        calls: list[int] = []
        real = ast.parse
        with monkeypatch.context() as patch:
            patch.setattr(ast, "parse", lambda *args, **kwargs: calls.append(1) or real(*args, **kwargs))
            action()
        return len(calls)

    store = StorageTier(64 * MIB, tmp_path)
    path = store.directory / "kv_0_k.npy"

    def ours() -> None:
        assert store.write("k", KVData(24, np.dtype(np.float16), 1, seed=2).make(100))[0] == path
        assert store.read(path)[0] == 100 * 24 * 2
        assert store.export(path).shape == (100, 24)

    assert parses(ours) == 0
    assert parses(lambda: np.load(path)) > 0  # the spy sees numpy's reader


# -- many readers at once ----------------------------------------------------------------------
def test_48_threads_read_many_npy_files_at_once_through_the_storage_tier(shm):
    """The run that crashed had hundreds of readers parsing headers at once; here 48 threads
    start together and each reads every file (ours and np.save's, both versions) 4 times."""
    store = StorageTier(1 << 30, shm)
    data = KVData(48, np.dtype(np.float16), 1, seed=3)
    expected: dict[Path, int] = {}
    for number in range(24):
        path, _ = store.write(f"w{number}", data.make(1 + 37 * number))
        expected[path] = (1 + 37 * number) * 48 * 2
    for number, dtype in enumerate(["<f2", "<f4", "|i1", "<u2"] * 6):
        array = np.zeros((5 + number, 300 + 11 * number) if number % 3 else (7 * number + 1,), dtype=dtype)
        path = shm / f"kv_{1000 + number}_saved.npy"
        path.write_bytes(saved(array, (2, 0) if number % 2 else None))
        expected[path] = array.nbytes
    paths = list(expected)
    threads = 48
    start = threading.Barrier(threads)
    errors: list[BaseException] = []
    counts: list[list[int]] = [[] for _ in range(threads)]

    def reader(index: int) -> None:
        try:
            start.wait()
            for _ in range(4):
                for path in paths[index % len(paths):] + paths[:index % len(paths)]:
                    counts[index].append(store.read(path)[0])
        except BaseException as exc:  # noqa: BLE001 - collected and re-raised below
            errors.append(exc)

    workers = [threading.Thread(target=reader, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert not errors, errors[:3]
    for index, got in enumerate(counts):
        order = paths[index % len(paths):] + paths[:index % len(paths)]
        assert got == [expected[p] for p in order] * 4
    assert store.reads == threads * 4 * len(paths)


def test_reads_of_one_entry_take_turns_and_reads_of_two_entries_do_not(shm):
    """Two reads of one entry at once would share the pages the first brings in; the second
    waits its turn (its drop then comes before its own read), while another entry's read goes on."""
    store = StorageTier(1 << 30, shm)
    data = KVData(48, np.dtype(np.float16), 1, seed=3)
    first, _ = store.write("a", data.make(10))
    other, _ = store.write("b", data.make(10))
    inside: list[Path] = []
    entered, release = threading.Semaphore(0), threading.Event()
    real = store._read

    def held(handle: Path):
        inside.append(handle)
        entered.release()
        assert release.wait(60)
        try:
            return real(handle)
        finally:
            inside.remove(handle)

    store._read = held
    readers = [threading.Thread(target=store.read, args=(handle,)) for handle in (first, first, other)]
    for reader in readers:
        reader.start()
    assert entered.acquire(timeout=60) and entered.acquire(timeout=60)
    for _ in range(6000):  # until the third reader has arrived (a phase, not a time margin)
        if store.reads_waited:
            break
        threading.Event().wait(0.01)
    assert store.reads_waited == 1 and sorted(inside) == sorted([first, other])
    assert not entered.acquire(timeout=0.2)  # the second read of `first` is still waiting
    release.set()
    for reader in readers:
        reader.join(60)
    assert store.reads == 3 and not store._readers
