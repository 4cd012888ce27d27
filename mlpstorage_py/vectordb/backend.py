"""Milvus through pymilvus: the embedded Milvus Lite (a database directory under --storage-root)
or a Milvus server over gRPC (--host/--port).

Every call has a deadline. pymilvus' own timeouts are passed, and each call also runs in a
helper thread the caller stops waiting for at the deadline: pymilvus' index wait ignores a float
timeout, and a server whose index node crashed answers "in progress" forever.

What serves the queries (read from Milvus Lite 3.2's source, engine/collection.py and
search/executor_indexed.py): rows still in the memtable, and flushed segments whose index has
not been built yet, are searched by brute force; only segments with an attached index use it.
After a flush Milvus Lite builds segment indexes on a background thread, so the first searches
after a load can be exact. Its DescribeIndex always answers Finished with every row indexed, so
for Lite the serving state is read from the engine itself (it runs in this process). A server
reports indexed rows in describe_index and the index of each loaded segment in
get_query_segment_info.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlpstorage_py.errors import BenchmarkFailed, ConfigurationError, TimeoutExpired
from mlpstorage_py.results.io import iso_from_epoch
from mlpstorage_py.results.logs import log
from mlpstorage_py.vectordb import ID_FIELD, VECTOR_FIELD
from mlpstorage_py.vectordb.families import family, parse_version

DEFAULT_PORT = 19530
INDEX_NAME = VECTOR_FIELD
GRACE_S = 15.0


@dataclass
class Timeouts:
    connect: float = 60
    call: float = 120
    insert: float = 300
    flush: float = 1800
    load: float = 1800
    search: float = 120
    read_back: float = 600
    index_stall: float = 900
    compaction_stall: float = 900

    @classmethod
    def from_config(cls, table: dict[str, Any]) -> Timeouts:
        return cls(**{k: float(v) for k, v in table.items() if k in cls.__dataclass_fields__})


def package_version(name: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


class Milvus:
    """One collection on one Milvus (Lite or server)."""

    def __init__(self, *, collection: str, host: str | None = None, port: int | None = None,
                 lite_path: Path | None = None, timeouts: Timeouts | None = None) -> None:
        self.collection = collection
        self.host = host
        self.port = int(port or DEFAULT_PORT)
        self.lite_path = lite_path
        self.timeouts = timeouts or Timeouts()
        self.client: Any = None
        self.uri: str | None = None
        self.version = "unknown"
        if host is None and lite_path is None:
            raise ConfigurationError("Milvus Lite needs a database path (--storage-root)")

    # -- identity --------------------------------------------------------------------------
    @property
    def lite(self) -> bool:
        return self.host is None

    @property
    def kind(self) -> str:
        return "milvus-lite" if self.lite else "milvus-server"

    def describe(self) -> str:
        if self.lite:
            return f"Milvus Lite {package_version('milvus-lite')} at {self.lite_path}"
        version = "" if self.version == "unknown" else f" {self.version}"
        return f"Milvus server{version} at {self.host}:{self.port}"

    def engine_label(self) -> str:
        base = f"pymilvus {package_version('pymilvus')}"
        if self.lite:
            return f"{base} / Milvus Lite {package_version('milvus-lite')}"
        return f"{base} / Milvus server {self.version}"

    def record(self) -> dict[str, Any]:
        """The `database` block of summary.json (database.database is what Rules 5.6.2 reads)."""
        out: dict[str, Any] = {"database": "milvus", "backend": self.kind, "version": self.version,
                               "client": f"pymilvus {package_version('pymilvus')}"}
        if self.lite:
            out.update(path=str(self.lite_path), milvus_lite=package_version("milvus-lite"))
        else:
            out.update(host=self.host, port=self.port)
        return out

    # -- deadlines -------------------------------------------------------------------------
    def call(self, what: str, fn: Callable[..., Any], *args: Any, timeout: float | None = None, **kwargs: Any) -> Any:
        """fn(*args, timeout=..., **kwargs) with a hard deadline; pymilvus errors become one line."""
        limit = float(timeout if timeout is not None else self.timeouts.call)
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["value"] = fn(*args, timeout=limit, **kwargs)
            except BaseException as exc:  # re-raised in the caller's thread
                box["error"] = exc

        thread = threading.Thread(target=target, name=f"milvus-{what}", daemon=True)
        thread.start()
        thread.join(limit + GRACE_S)
        if thread.is_alive():
            raise TimeoutExpired(f"{what}: {self.describe()} did not answer within {limit:.0f} s")
        if "error" in box:
            exc = box["error"]
            if isinstance(exc, (BenchmarkFailed, ConfigurationError, TimeoutExpired)):
                raise exc
            raise BenchmarkFailed(f"{what} failed on {self.describe()}: {_one_line(exc)}") from exc
        return box.get("value")

    # -- connection ------------------------------------------------------------------------
    def open(self) -> None:
        from pymilvus import MilvusClient

        if self.lite:
            assert self.lite_path is not None, "a Milvus Lite backend is made with its storage path"
            path = Path(self.lite_path)
            if not path.parent.is_dir():
                raise ConfigurationError(f"storage root {path.parent} does not exist")
            def connect(timeout: float) -> Any:
                return MilvusClient(str(path), timeout=timeout)
            try:
                self.client = self.call("open Milvus Lite", connect, timeout=self.timeouts.connect)
            except BenchmarkFailed as exc:
                if "lock" in str(exc).lower():
                    raise ConfigurationError(f"{path} is in use by another process (Milvus Lite allows one): {exc}") from None
                raise
            from milvus_lite.server_manager import server_manager_instance

            self.uri = server_manager_instance.start_and_get_uri(str(path))
        else:
            self.uri = f"http://{self.host}:{self.port}"
            self.client = self.call(f"connect to {self.uri}", lambda timeout: MilvusClient(uri=self.uri, timeout=timeout),
                                    timeout=self.timeouts.connect)
        self.version = str(self.call("get_server_version", self.client.get_server_version))
        log.info(f"connected to {self.describe()} (server version {self.version})")

    def close(self) -> None:
        try:
            if self.client is not None:
                self.client.close()
        except Exception as exc:  # closing must not hide the real outcome
            log.debug(f"closing the Milvus client: {exc}")
        self.client = None
        if self.lite and self.lite_path is not None:
            try:
                from milvus_lite.server_manager import server_manager_instance

                server_manager_instance.release_server(str(self.lite_path))
            except Exception as exc:
                log.debug(f"releasing Milvus Lite: {exc}")

    def require_index_support(self, index_type: str) -> None:
        """Refuse up front what this database cannot build; never substitute another index."""
        fam = family(index_type)
        if self.lite:
            if not fam.lite_kinds:
                raise ConfigurationError(lite_refusal(index_type))
            return
        version = parse_version(self.version)
        if version is not None and version[:2] < fam.min_server:
            need = ".".join(map(str, fam.min_server))
            raise ConfigurationError(f"{index_type} needs a Milvus {need}+ server; {self.host}:{self.port} runs "
                                     f"{self.version} (Milvus 2.3 crashes building DISKANN, AISAQ arrived in 2.6)")

    # -- collection ------------------------------------------------------------------------
    def exists(self) -> bool:
        return bool(self.call("has_collection", self.client.has_collection, self.collection))

    def drop(self) -> None:
        self.call("drop_collection", self.client.drop_collection, self.collection)

    def create(self, dim: int, num_shards: int) -> None:
        from pymilvus import DataType

        schema = self.client.create_schema(auto_id=False, enable_dynamic_field=False,
                                           description="mlpstorage vector_database benchmark collection")
        schema.add_field(ID_FIELD, DataType.INT64, is_primary=True)
        schema.add_field(VECTOR_FIELD, DataType.FLOAT_VECTOR, dim=int(dim))
        kwargs: dict[str, Any] = {"schema": schema}
        if not self.lite:
            kwargs["num_shards"] = int(num_shards)
        self.call("create_collection", self.client.create_collection, self.collection, **kwargs)

    def dimension(self) -> int | None:
        info = self.call("describe_collection", self.client.describe_collection, self.collection)
        for fld in info.get("fields", []):
            if fld.get("name") == VECTOR_FIELD or str(fld.get("type")).endswith("FLOAT_VECTOR"):
                dim = (fld.get("params") or {}).get("dim")
                return int(dim) if dim is not None else None
        return None

    def insert(self, ids: Any, rows: Any) -> int:
        data = [{ID_FIELD: int(i), VECTOR_FIELD: row} for i, row in zip(ids.tolist(), rows, strict=True)]
        result = self.call("insert", self.client.insert, self.collection, data, timeout=self.timeouts.insert)
        return int((result or {}).get("insert_count", len(data)))

    def flush(self) -> None:
        self.call("flush", self.client.flush, self.collection, timeout=self.timeouts.flush)

    def load(self) -> None:
        self.call("load_collection", self.client.load_collection, self.collection, timeout=self.timeouts.load)

    def count(self) -> int:
        rows = self.call("count(*)", self.client.query, self.collection, filter="", output_fields=["count(*)"])
        return int(rows[0]["count(*)"])

    # -- index -----------------------------------------------------------------------------
    def describe_index(self) -> dict[str, Any] | None:
        names = self.call("list_indexes", self.client.list_indexes, self.collection)
        if not names:
            return None
        return dict(self.call("describe_index", self.client.describe_index, self.collection, names[0]))

    def create_index(self, index_type: str, metric: str, params: dict[str, Any]) -> None:
        """The nested `params` form: Milvus Lite 3.2 reads build parameters only from it (the
        flattened form pymilvus 3 sends by default is silently ignored there), and servers accept
        it. The build is not waited for here; wait_index does that with a progress bound."""
        index_params = self.client.prepare_index_params()
        index_params.add_index(field_name=VECTOR_FIELD, index_name=INDEX_NAME, index_type=index_type,
                               metric_type=metric, params={"params": dict(params)})
        self.call("create_index", self.client.create_index, self.collection, index_params,
                  timeout=self.timeouts.flush, sync=False)

    def wait_index(self, *, stall_s: float, poll_s: float, progress: Callable[[str], None],
                   rows: Callable[[int, int], None] | None = None) -> dict[str, Any]:
        """Poll describe_index until every row is indexed; fail when indexed rows stop moving
        for stall_s seconds, quoting the server's last answer. rows(indexed, total) hears every poll."""
        start = time.time()
        last_rows, last_move, last_said, info = -1, time.monotonic(), 0.0, None
        while True:
            info = self.describe_index() or {}
            state = str(info.get("state", "unknown"))
            indexed, total = int(info.get("indexed_rows", 0) or 0), int(info.get("total_rows", 0) or 0)
            pending = int(info.get("pending_index_rows", 0) or 0)
            if rows is not None:
                rows(indexed, total)
            if state == "Failed":
                raise BenchmarkFailed(f"the index build failed on {self.describe()}: {_server_state(info)}")
            if state == "Finished" and indexed >= total and pending == 0:
                break
            now = time.monotonic()
            if indexed != last_rows:
                last_rows, last_move = indexed, now
            elif now - last_move > stall_s:
                raise TimeoutExpired(f"the index build made no progress for {stall_s:.0f} s on {self.describe()}: "
                                     f"{_server_state(info)}")
            if now - last_said >= max(poll_s, 5.0):
                progress(f"index build: {indexed:,} of {total:,} rows indexed ({state})")
                last_said = now
            time.sleep(poll_s)
        return {"start": iso_from_epoch(start), "end": iso_from_epoch(time.time()), "seconds": time.time() - start, "state": state,
                "indexed_rows": indexed, "total_rows": total, "pending_index_rows": pending}

    def compact(self, *, stall_s: float, poll_s: float, progress: Callable[[str], None]) -> dict[str, Any]:
        start = time.time()
        job = self.call("compact", self.client.compact, self.collection)
        state, last_said = "unknown", 0.0
        while True:
            state = str(self.call("get_compaction_state", self.client.get_compaction_state, job))
            if state == "Completed":
                break
            if time.time() - start > stall_s:
                raise TimeoutExpired(f"compaction job {job} still {state} after {stall_s:.0f} s on {self.describe()}")
            if time.monotonic() - last_said >= 5.0:
                progress(f"compaction job {job}: {state}")
                last_said = time.monotonic()
            time.sleep(poll_s)
        record = {"requested": True, "job_id": job, "start": iso_from_epoch(start), "end": iso_from_epoch(time.time()),
                  "seconds": time.time() - start, "state": state}
        if self.lite:
            record["note"] = ("Milvus Lite compacts on its own after each flush; its ManualCompaction answers "
                              "Completed without doing anything")
        return record

    # -- what serves the queries -----------------------------------------------------------
    def serving(self, index_type: str) -> dict[str, Any]:
        """Rows a search would send through the named index, and rows it would brute-force."""
        return self._lite_serving(index_type) if self.lite else self._server_serving(index_type)

    def _lite_collection(self) -> Any:
        from milvus_lite.server_manager import server_manager_instance

        entry = server_manager_instance._servers.get(os.path.abspath(str(self.lite_path)))
        if entry is None:
            raise BenchmarkFailed("cannot inspect Milvus Lite: its server is not running in this process")
        return entry[1].get_collection(self.collection)

    def _lite_serving(self, index_type: str) -> dict[str, Any]:
        kinds = family(index_type).lite_kinds
        try:
            col = self._lite_collection()
            segments = col._segments_snapshot() if hasattr(col, "_segments_snapshot") else tuple(col._segment_cache.values())
            memtable = int(col._memtable.size())
            rows: list[dict[str, Any]] = []
            for seg in segments:
                idx = seg.indexes.get(VECTOR_FIELD)
                rows.append({"rows": int(seg.num_rows), "index": getattr(idx, "index_type", None) if idx is not None else None,
                             "index_class": type(idx).__name__ if idx is not None else None})
            spec = col._index_specs.get(VECTOR_FIELD)
        except BenchmarkFailed:
            raise
        except Exception as exc:  # a Milvus Lite whose internals moved
            raise BenchmarkFailed(f"cannot tell what serves the queries in this Milvus Lite "
                                  f"({package_version('milvus-lite')}): {_one_line(exc)}") from exc
        by_index = sum(r["rows"] for r in rows if r["index"] in kinds)
        total = sum(r["rows"] for r in rows) + memtable
        return {
            "method": "Milvus Lite engine state, read in-process (its describe_index always reports every row indexed)",
            "segments": rows,
            "memtable_rows": memtable,
            "rows_total": total,
            "rows_served_by_index": by_index,
            "rows_brute_force": total - by_index,
            "index_spec": None if spec is None else {"index_type": spec.index_type, "metric_type": spec.metric_type,
                                                     "params": dict(spec.build_params)},
            "served_by_named_index": total > 0 and by_index == total,
        }

    def _server_serving(self, index_type: str) -> dict[str, Any]:
        from pymilvus.grpc_gen import common_pb2

        handler = self.client._get_connection()  # MilvusClient has no public segment info
        infos = self.call("get_query_segment_info", handler.get_query_segment_info, self.collection)
        rows = []
        for seg in infos:
            rows.append({"segment_id": int(seg.segmentID), "rows": int(seg.num_rows),
                         "state": common_pb2.SegmentState.Name(seg.state), "index_name": seg.index_name or None,
                         "index_id": int(seg.indexID)})
        by_index = sum(r["rows"] for r in rows if r["index_id"] and r["state"] != "Growing")
        total = sum(r["rows"] for r in rows)
        info = self.describe_index() or {}
        return {
            "method": "server describe_index and get_query_segment_info (loaded segments and their index)",
            "segments": rows,
            "rows_total": total,
            "rows_served_by_index": by_index,
            "rows_brute_force": total - by_index,
            "describe_index": _jsonable(info),
            "served_by_named_index": total > 0 and by_index == total and str(info.get("index_type")) == index_type,
        }

    def wait_served(self, index_type: str, *, stall_s: float, poll_s: float,
                    progress: Callable[[str], None]) -> dict[str, Any]:
        """Wait (bounded) until every row is served by the named index; the last state either way."""
        start = time.monotonic()
        if self.lite:
            try:
                self._lite_collection()._wait_for_bg(timeout=stall_s)  # drain background index builds
            except Exception as exc:  # the polling below still decides
                log.debug(f"Milvus Lite background drain: {exc}")
        state = self.serving(index_type)
        last_said = 0.0
        while not state["served_by_named_index"] and time.monotonic() - start < stall_s:
            if time.monotonic() - last_said >= 5.0:
                progress(f"waiting for the index to serve every row: {state['rows_served_by_index']:,} of "
                         f"{state['rows_total']:,}")
                last_said = time.monotonic()
            time.sleep(poll_s)
            state = self.serving(index_type)
        return state

    # -- data back ---------------------------------------------------------------------------
    def read_back(self, id_stop: int, batch_rows: int) -> tuple[str, Iterator[tuple[Any, Any]]]:
        """Every stored (ids, vectors) of the collection, in chunks, and how they are read.

        Milvus Lite evaluates a query filter over the whole collection in Python, so reading it
        back in id ranges costs O(N^2 / batch); its segments (this process hosts the engine) are
        read directly instead. A server is queried in id ranges [0, id_stop) (datagen numbers
        rows 0..N-1; a row outside the range shows up as missing coverage)."""
        if self.lite:
            col = self._lite_collection()
            segments = col._segments_snapshot() if hasattr(col, "_segments_snapshot") else tuple(col._segment_cache.values())
            if int(col._memtable.size()):
                raise BenchmarkFailed("Milvus Lite still holds unflushed rows; the ground truth would miss them")
            return "Milvus Lite segments, read in-process", self._lite_chunks(segments, batch_rows)
        return "id-range queries", (self.read_range(lo, min(lo + batch_rows, id_stop)) for lo in range(0, id_stop, batch_rows))

    @staticmethod
    def _lite_chunks(segments: Any, batch_rows: int) -> Iterator[tuple[Any, Any]]:
        import numpy as np

        for seg in segments:
            vectors, valid = seg.vector_data(VECTOR_FIELD)
            ids = np.asarray(list(seg.pks), dtype=np.int64)
            if valid is not None:
                ids, vectors = ids[valid], vectors[valid]
            for lo in range(0, len(ids), batch_rows):
                yield ids[lo:lo + batch_rows], np.asarray(vectors[lo:lo + batch_rows], dtype=np.float32)

    def read_range(self, lo: int, hi: int) -> tuple[Any, Any]:
        import numpy as np

        rows = self.call("query (read back)", self.client.query, self.collection,
                         filter=f"{ID_FIELD} >= {int(lo)} and {ID_FIELD} < {int(hi)}",
                         output_fields=[ID_FIELD, VECTOR_FIELD], limit=int(hi - lo), timeout=self.timeouts.read_back)
        fast = _columnar(rows)
        if fast is not None:
            return fast
        ids = np.fromiter((r[ID_FIELD] for r in rows), dtype=np.int64, count=len(rows))
        vecs = np.asarray([r[VECTOR_FIELD] for r in rows], dtype=np.float32)
        return ids, vecs


def _columnar(rows: Any) -> tuple[Any, Any] | None:
    """pymilvus 3 decodes a vector row by row on access (about 0.15 ms a row); its result list
    still holds the response's FloatVector column, which numpy reads in one go. None when the
    result does not have that shape (another pymilvus), and the caller decodes rows instead."""
    import numpy as np

    try:
        lazy = getattr(rows, "_lazy_field_data", None)
        column = next((f for f in lazy or () if f.field_name == VECTOR_FIELD), None)
        if column is None or len(column.valid_data):
            return None
        dim = int(column.vectors.dim)
        vecs = np.asarray(column.vectors.float_vector.data, dtype=np.float32).reshape(-1, dim)
        ids = np.fromiter((list.__getitem__(rows, i)[ID_FIELD] for i in range(len(rows))), dtype=np.int64,
                          count=len(rows))
    except Exception:  # fall back to the public row access
        return None
    return (ids, vecs) if len(vecs) == len(ids) else None


def lite_refusal(index_type: str) -> str:
    fam = family(index_type)
    need = ".".join(map(str, fam.min_server))
    return (f"{index_type} is not implemented by Milvus Lite (the embedded default: it builds HNSW, IVF_FLAT, IVF_SQ8 "
            f"and FLAT, and rejects {index_type}); point --host/--port at a Milvus {need}+ server "
            f"(the server of the storage system under test). No other index is substituted.")




def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:400]}"


def _jsonable(info: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(info, default=str))


def _server_state(info: dict[str, Any]) -> str:
    keys = ("index_type", "state", "indexed_rows", "total_rows", "pending_index_rows", "index_state_fail_reason")
    return ", ".join(f"{k}={info[k]}" for k in keys if k in info) or "no index description"


def reported_params(info: dict[str, Any]) -> dict[str, Any]:
    """Build parameters as the server describes them (nested `params` or flattened keys), typed."""
    skip = {"index_type", "metric_type", "field_name", "index_name", "total_rows", "indexed_rows",
            "pending_index_rows", "state", "index_state_fail_reason", "params", "search_params", "mmap.enabled"}
    out = dict(info.get("params") or {}) if isinstance(info.get("params"), dict) else {}
    for key, value in info.items():
        if key not in skip:
            out[key] = value
    return {k: _typed(v) for k, v in out.items()}


def _typed(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            try:
                return float(value)
            except ValueError:
                return value
    return value
