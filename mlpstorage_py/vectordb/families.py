"""What each index family builds with, searches with, needs from the server, and occupies.

Parameter names on the left are the workload keys (`index.*`, Rules 5.6.4 / params.yaml); on
the right the names Milvus reads. No pymilvus or numpy here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

SECTOR = 4096  # DiskANN-style indexes pack graph nodes into 4 KiB sectors
ID_BYTES = 8   # int64 primary key per row
PQ_RATIO = 0.125  # Milvus DiskANN default pq_code_budget_gb_ratio: PQ codes = 1/8 of the raw vectors


@dataclass(frozen=True)
class Family:
    name: str
    build: dict[str, str]                 # workload key under index. -> Milvus build parameter
    search_key: str | None                # Milvus search parameter the --search-ef flag sets
    default_search: int | None
    search_at_least_k: bool               # Milvus refuses a search list shorter than top-K
    lite_kinds: frozenset[str] = field(default_factory=frozenset)  # Milvus Lite index classes that implement it
    min_server: tuple[int, int] = (2, 0)  # oldest Milvus server that builds it reliably


FAMILIES: dict[str, Family] = {
    "HNSW": Family("HNSW", {"M": "M", "ef_construction": "efConstruction"}, "ef", 200, True,
                   frozenset({"HNSW"})),
    "DISKANN": Family("DISKANN", {"max_degree": "max_degree", "search_list_size": "search_list_size"},
                      "search_list", 200, True, frozenset(), (2, 4)),
    "AISAQ": Family("AISAQ", {"max_degree": "max_degree", "search_list_size": "search_list_size",
                              "inline_pq": "inline_pq"}, "search_list", 200, True, frozenset(), (2, 6)),
    "IVF_FLAT": Family("IVF_FLAT", {"nlist": "nlist"}, "nprobe", 16, False, frozenset({"IVF_FLAT"})),
    "IVF_SQ8": Family("IVF_SQ8", {"nlist": "nlist"}, "nprobe", 16, False, frozenset({"IVF_SQ8"})),
    "FLAT": Family("FLAT", {}, None, None, False, frozenset({"FLAT", "BRUTE_FORCE"})),
}
# Index keys a family does not use (so an override of them is reported, not silently kept).
ALL_BUILD_KEYS = sorted({key for fam in FAMILIES.values() for key in fam.build})


def family(index_type: str) -> Family:
    try:
        return FAMILIES[index_type]
    except KeyError:
        raise ValueError(f"unknown index type {index_type!r}; known: {', '.join(FAMILIES)}") from None


def default_nlist(num_vectors: int) -> int:
    """About 4 x sqrt(N) cells, but at least 39 training points per cell (faiss' k-means floor)."""
    return max(1, min(int(4 * math.sqrt(num_vectors)), num_vectors // 39 or 1, 65536))


def build_params(index_type: str, index: dict[str, Any]) -> dict[str, Any]:
    """The Milvus build parameters of a family from the workload's index section."""
    fam = family(index_type)
    return {milvus: int(index[key]) for key, milvus in fam.build.items()}


def search_params(index_type: str, search_ef: int | None) -> dict[str, Any]:
    fam = family(index_type)
    if fam.search_key is None:
        return {}
    search = search_ef if search_ef is not None else fam.default_search
    return {fam.search_key: int(search)} if search is not None else {}


def parse_version(text: str) -> tuple[int, int, int] | None:
    """'v2.3.5-lite' / '2.4.1' -> (2, 3, 5); None when it does not look like a Milvus version."""
    import re

    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    if not match:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


# -- datasize --------------------------------------------------------------------------------
def _sector_packed(nodes: int, node_bytes: int) -> int:
    """Bytes of `nodes` fixed-size records packed whole into 4 KiB sectors (a node never spans
    two sectors unless it is larger than one), plus one metadata sector."""
    if node_bytes <= SECTOR:
        per_sector = SECTOR // node_bytes
        return (math.ceil(nodes / per_sector) + 1) * SECTOR
    return (nodes * math.ceil(node_bytes / SECTOR) + 1) * SECTOR


def index_bytes(index_type: str, n: int, dim: int, index: dict[str, Any]) -> tuple[int, str]:
    """Estimated bytes of the index files a family writes for n vectors, and the model used."""
    vec = 4 * dim
    if index_type == "FLAT":
        return n * vec, "N x 4d (the vectors again)"
    if index_type == "HNSW":
        m = int(index.get("M", 16))
        # level-0 links (2M x 4 B), upper levels (~M x 4 B x 1/(M-1)), the vector, a level byte
        per_node = vec + 8 * m + math.ceil(4 * m / max(m - 1, 1)) + 4
        return n * per_node, f"N x (4d + 8M + 4M/(M-1) + 4), M={m}"
    if index_type in ("DISKANN", "AISAQ"):
        r = int(index.get("max_degree", 64))
        pq_vector = max(1, int(vec * PQ_RATIO))
        node = vec + 4 + 4 * r
        text = f"sectors of (4d + 4 + 4R) per node, R={r}"
        if index_type == "AISAQ":
            inline = min(int(index.get("inline_pq", 16)), r)
            node += inline * pq_vector
            text += f", + inline_pq={inline} neighbour PQ codes of {pq_vector} B each"
        return _sector_packed(n, node) + n * pq_vector, text + f", + PQ codes ({PQ_RATIO:g} x raw)"
    nlist = int(index.get("nlist") or default_nlist(n))
    if index_type == "IVF_FLAT":
        return n * (vec + ID_BYTES) + nlist * vec, f"N x (4d + 8) + nlist x 4d, nlist={nlist}"
    if index_type == "IVF_SQ8":
        return n * (dim + ID_BYTES) + nlist * vec + 2 * vec, f"N x (d + 8) + nlist x 4d + 8d, nlist={nlist}"
    raise ValueError(f"unknown index type {index_type!r}")


def datasize(index_type: str, n: int, dim: int, shards: int, index: dict[str, Any]) -> dict[str, Any]:
    """Raw vector bytes and the estimated on-storage footprint: the inserted rows as Milvus
    persists them (vectors + int64 keys) plus the index files, for every family."""
    raw = n * 4 * dim
    rows = n * (4 * dim + ID_BYTES)
    families: dict[str, dict[str, Any]] = {}
    for name in FAMILIES:
        idx, model = index_bytes(name, n, dim, index)
        families[name] = {"index_bytes": idx, "total_bytes": rows + idx, "index_model": model}
    chosen = families[index_type]
    return {
        "index_type": index_type,
        "num_vectors": n,
        "dimension": dim,
        "num_shards": shards,
        "raw_vector_bytes": raw,
        "row_bytes": rows,
        "index_bytes": chosen["index_bytes"],
        "total_bytes": chosen["total_bytes"],
        "total_bytes_per_shard": math.ceil(chosen["total_bytes"] / shards),
        "families": families,
        "model": "rows persisted by Milvus (N x (4d + 8) B: vectors and int64 keys) plus the index files; "
                 "shards split the rows, they do not copy them",
    }
