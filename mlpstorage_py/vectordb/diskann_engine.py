"""The embedded DiskANN engine (`--vdb-engine diskann`, OPEN): Microsoft DiskANN's SSD-resident
Vamana index through diskannpy, the index family Milvus's DISKANN (Knowhere) wraps.

What lives where (ManPage, vectordb, `--vdb-engine diskann`):
  <storage-root>/diskann/<collection>/vectors.bin      the generated vectors (DiskANN .bin: n, d, rows)
  <storage-root>/diskann/<collection>/ann_disk.index   graph + full vectors, packed in 4 KiB sectors
  <storage-root>/diskann/<collection>/ann_pq_*.bin     PQ pivots and codes: loaded into memory
  <storage-root>/diskann/<collection>/build.json       what built it, and its fingerprint

The parameter mapping (Milvus name -> diskannpy) is MAPPING. Nothing here imports diskannpy or
numpy at module import: only the build child and the query ranks do, from the engine's own prefix
(site_packages(), activate()).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlpstorage_py.errors import NotAvailable, NotFoundError

ENGINE = "diskann"
PREFIX = "ann"
DISK_INDEX = f"{PREFIX}_disk.index"
PQ_CODES = f"{PREFIX}_pq_compressed.bin"
PQ_PIVOTS = f"{PREFIX}_pq_pivots.bin"
VECTORS = "vectors.bin"
BUILD_RECORD = "build.json"
SECTOR = 4096
O_DIRECT = 0o40000  # x86-64 and arm64 value of the open(2) flag, as /proc/<pid>/fdinfo shows it
# A query rank beside its index parts: the interpreter, mpi4py, numpy and diskannpy, and DiskANN's
# per-context scratch (sector buffers, PQ tables). Measured here (summary.json memory.rss_bytes_max):
# 65-66 MiB of resident memory with 0.07-0.7 MiB of index parts; the plan counts 128 MiB a client.
PROCESS_BYTES = 128 * 2**20
# DiskANN keeps 0.25 GiB of a search budget above 1 GiB for its node cache (disk_utils
# get_memory_budget); the PQ budget we pass is raised by that much so the codes get what we ask.
CACHE_SLACK_GB, CACHE_SLACK_THRESHOLD_GB = 0.25, 1.0
MAX_PQ_CHUNKS = 512
# Search contexts a query client opens its index with: diskannpy 0.7.0 hangs opening an index
# with one (its loader borrows the only context twice while it reads the medoid:
# microsoft/DiskANN#462, fixed after 0.7.0 by #556). A client still searches one query at a time.
SEARCH_CONTEXTS = 2
# Workload metric -> diskannpy metric. Cosine is not implemented for disk indexes in diskannpy
# 0.7.0; every generated row and query is L2-normalised (vectordb.generate), and on unit vectors
# |q - x|^2 = 2 - 2 cos(q, x), so L2 ranks neighbours exactly as cosine does.
METRICS = {"L2": "l2", "IP": "mips", "COSINE": "l2"}
MAPPING = {
    "max_degree": "graph_degree (R)",
    "search_list_size": "complexity (L at build)",
    "pq_code_budget_ratio": "search_memory_maximum = ratio x raw vector GiB (PQ bytes per vector = ratio x 4d)",
    "search_list": "complexity (L at search)",
    "beam_width": "beam_width (W: sector reads per search round)",
    "search_cache_budget_ratio": "num_nodes_to_cache = ratio x raw vector bytes / node bytes",
}


def site_packages() -> Path:
    """Where diskannpy and its numpy live: a prefix of their own inside the environment (the
    Makefile's `diskann` target), since diskannpy 0.7.0 is built against numpy 1.x and its results
    are garbage under numpy 2 (its pybind11 reads the old array descriptor: every returned id is
    the same one), while the other engines need numpy 2."""
    return Path(sys.prefix) / ENGINE / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"


def activate() -> None:
    """Put the engine's prefix first on sys.path, in a build child or query rank, before anything
    imports numpy (a numpy already loaded from elsewhere would be the one diskannpy gets)."""
    loaded = sys.modules.get("numpy")
    if loaded is not None and not str(getattr(loaded, "__file__", "")).startswith(str(site_packages())):
        raise RuntimeError(f"numpy {loaded.__version__} was imported before the DiskANN engine's own numpy")
    path = str(site_packages())
    if path not in sys.path:
        sys.path.insert(0, path)


def version() -> str | None:
    """diskannpy's version in the engine's prefix, None when it is not installed there."""
    for dist in importlib.metadata.distributions(path=[str(site_packages())]):
        if dist.metadata["Name"] == "diskannpy":
            return dist.version
    return None


def require() -> str:
    """diskannpy's version, or a one-line refusal naming the install."""
    found = version()
    if found is None:
        raise NotAvailable(f"--vdb-engine diskann needs diskannpy 0.7.0 and numpy 1.25.0 in {site_packages().parents[2]}: "
                           "`make install`, or pip install --ignore-installed --prefix "
                           f"{site_packages().parents[2]} numpy==1.25.0 diskannpy==0.7.0")
    return found


def label() -> str:
    return f"diskannpy {version() or '?'} (Microsoft DiskANN, embedded; not Milvus)"


def index_dir(storage_root: str | Path, collection: str) -> Path:
    return Path(storage_root) / ENGINE / collection


# -- build parameters ------------------------------------------------------------------------
def pq_chunks(dim: int, ratio: float) -> int:
    """PQ bytes per vector kept in memory: the ratio of the raw 4d bytes (Milvus's
    pq_code_budget_gb_ratio), at least 1, at most d and DiskANN's 512."""
    return max(1, min(dim, MAX_PQ_CHUNKS, int(ratio * 4 * dim)))


def budget_gb(chunks: int, num_vectors: int) -> float:
    """The search memory budget (GiB) that makes DiskANN keep `chunks` PQ bytes per vector: it
    takes floor(budget x 2^30 / n), after diskannpy passes the budget on as text with six
    decimals; half a byte per vector above the wanted chunks, on that six-decimal grid."""
    want = (chunks + 0.5) * num_vectors / 2**30
    for candidate in (round(want, 6), math.ceil(want * 1e6) / 1e6, math.floor(want * 1e6) / 1e6):
        if candidate > 0 and int(candidate * 2**30 // num_vectors) == chunks:
            return candidate
    return max(round(want, 6), 1e-6)


@dataclass(frozen=True)
class BuildParams:
    """A build as Milvus names it, and the diskannpy call it becomes (native())."""

    metric: str
    max_degree: int
    search_list_size: int
    pq_code_budget_ratio: float
    build_memory_gb: float
    threads: int

    def native(self, num_vectors: int, dim: int) -> dict[str, Any]:
        chunks = pq_chunks(dim, self.pq_code_budget_ratio)
        budget = budget_gb(chunks, num_vectors)
        if budget > CACHE_SLACK_THRESHOLD_GB:
            budget += CACHE_SLACK_GB
        return {"distance_metric": METRICS[self.metric], "graph_degree": self.max_degree,
                "complexity": self.search_list_size, "search_memory_maximum": budget,
                "build_memory_maximum": self.build_memory_gb, "num_threads": self.threads, "pq_disk_bytes": 0,
                "vector_dtype": "float32", "index_prefix": PREFIX, "expected_pq_bytes": chunks}


# -- the vectors file ------------------------------------------------------------------------
def write_vectors_header(fh: Any, num_vectors: int, dim: int) -> None:
    import numpy as np

    fh.write(np.array([num_vectors, dim], dtype=np.int32).tobytes())


def read_vectors(path: Path, batch_rows: int) -> Any:
    """(ids, rows) chunks of a DiskANN .bin vectors file, read back from storage."""
    import numpy as np

    with open(path, "rb") as fh:
        n, dim = (int(v) for v in np.frombuffer(fh.read(8), dtype=np.int32))
        for lo in range(0, n, batch_rows):
            count = min(batch_rows, n - lo)
            rows = np.frombuffer(fh.read(count * dim * 4), dtype=np.float32)
            if rows.size != count * dim:
                raise NotFoundError(f"{path} ends at row {lo + rows.size // dim:,} of the {n:,} its header says")
            yield np.arange(lo, lo + count, dtype=np.int64), rows.reshape(count, dim)


# -- a built index ---------------------------------------------------------------------------
def describe(directory: Path) -> dict[str, Any]:
    """What the index files say about themselves (headers only): points, dimension, medoid,
    bytes per graph node and nodes per 4 KiB sector of ann_disk.index; PQ bytes per vector."""
    import numpy as np

    disk, codes = directory / DISK_INDEX, directory / PQ_CODES
    for path in (disk, codes, directory / PQ_PIVOTS):
        if not path.is_file():
            raise NotFoundError(f"no DISKANN index at {directory} ({path.name} missing); run datagen first "
                                "(same --storage-root, --num-vectors, --dimension, --collection)")
    with open(disk, "rb") as fh:
        rows, cols = (int(v) for v in np.frombuffer(fh.read(8), dtype=np.int32))
        meta = np.frombuffer(fh.read(8 * rows * cols), dtype=np.uint64).tolist()
    with open(codes, "rb") as fh:
        npts, chunks = (int(v) for v in np.frombuffer(fh.read(8), dtype=np.int32))
    files = {p.name: p.stat().st_size for p in sorted(directory.iterdir()) if p.is_file()}
    index_files = {name: size for name, size in files.items() if name.startswith(PREFIX)}
    return {"num_vectors": int(meta[0]), "dimension": int(meta[1]), "medoid": int(meta[2]),
            "max_node_bytes": int(meta[3]), "nodes_per_sector": int(meta[4]), "pq_bytes_per_vector": chunks,
            "pq_vectors": npts, "files": files, "index_bytes": sum(index_files.values()),
            "disk_index_bytes": files[DISK_INDEX]}


def fingerprint(directory: Path) -> str:
    """Identity of a built index, cheap enough for every rank: the index files' names and sizes,
    the PQ pivots and the first sector of ann_disk.index (its header: points, medoid, layout)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in directory.iterdir() if p.is_file() and p.name.startswith(PREFIX)):
        digest.update(f"{path.name}:{path.stat().st_size};".encode())
    digest.update((directory / PQ_PIVOTS).read_bytes())
    with open(directory / DISK_INDEX, "rb") as fh:
        digest.update(fh.read(SECTOR))
    return digest.hexdigest()


def memory(desc: dict[str, Any], cache_ratio: float) -> dict[str, Any]:
    """The in-memory part of one open index: PQ codes and pivots (fixed by the build) and the node
    cache (search_cache_budget_ratio of the raw vector bytes, in whole nodes, as Milvus sizes it)."""
    n, dim = desc["num_vectors"], desc["dimension"]
    node = desc["max_node_bytes"]
    cache_nodes = min(n, int(cache_ratio * n * 4 * dim) // node) if node else 0
    parts = {"pq_codes_bytes": n * desc["pq_bytes_per_vector"],
             "pq_pivots_bytes": desc["files"].get(PQ_PIVOTS, 0),
             "node_cache_bytes": cache_nodes * node}
    return {**parts, "cache_nodes": cache_nodes, "node_bytes": node, "search_cache_budget_ratio": cache_ratio,
            "in_memory_bytes": sum(parts.values()), "process_allowance_bytes": PROCESS_BYTES,
            "per_client_bytes": sum(parts.values()) + PROCESS_BYTES}


def expected_reads(desc: dict[str, Any], search_list: int, beam_width: int) -> dict[str, Any]:
    """What the graph implies a query reads when nothing is cached: beam search expands about
    search_list nodes (each a sector read of the node's vector and neighbour list), in rounds of
    beam_width; a node wider than a sector reads ceil(node / 4 KiB) sectors."""
    sectors = max(1, math.ceil(desc["max_node_bytes"] / SECTOR))
    return {"model": "about search_list expanded nodes x sectors per node x 4 KiB, in rounds of beam_width",
            "sectors_per_node": sectors, "reads_per_query": search_list * sectors,
            "bytes_per_query": search_list * sectors * SECTOR,
            "rounds_per_query": math.ceil(search_list / max(beam_width, 1))}


def opened_direct(path: Path) -> bool | None:
    """Whether this process holds `path` open with O_DIRECT (from /proc/self/fdinfo); None when
    it does not hold it open at all."""
    target = os.path.realpath(path)
    found = None
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") != target:
                continue
            with open(f"/proc/self/fdinfo/{fd}", encoding="ascii") as fh:
                flags = next(int(line.split()[1], 8) for line in fh if line.startswith("flags:"))
        except (OSError, StopIteration, ValueError):
            continue
        found = bool(flags & O_DIRECT) or bool(found)
    return found
