"""Vector database (Milvus): datasize estimates, datagen (load + index build) and query runs
with recall measured against exact ground truth (Rules 5.1-5.6).

The backend is the embedded Milvus Lite (its database under --storage-root) unless --host
names a Milvus server. Nothing is substituted: an index the backend cannot build is refused
before any work, the index type and parameters the server reports are checked against the
request, and a run only reports figures when every row is searched through the named index.
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from typing import Any

import yaml

from mlpstorage_py import progress
from mlpstorage_py.benchmarks import vectordb_run
from mlpstorage_py.benchmarks.base import Benchmark, Plan, Request
from mlpstorage_py.benchmarks.options import VectorDBOptions
from mlpstorage_py.errors import BenchmarkFailed, ConfigurationError, GateRefused, NotAvailable, UsageError
from mlpstorage_py.launch.mpi import MpiOptions
from mlpstorage_py.results.io import iso_from_epoch, read_json
from mlpstorage_py.results.logs import log
from mlpstorage_py.results.tree import layout
from mlpstorage_py.results.vdb import VdbSummary
from mlpstorage_py.rules import configs as workloads
from mlpstorage_py.rules import predicates
from mlpstorage_py.rules.tables import checker
from mlpstorage_py.rules.tables import workloads as rules_workloads
from mlpstorage_py.vectordb import VECTOR_FIELD, families

METRICS = ("COSINE", "L2", "IP")
DISTRIBUTIONS = ("uniform", "normal", "zipfian")
RUN_MODES = ("timed", "query_count")
MAX_DIM = 32768
DEFAULT_RUNTIME = 60
DEFAULT_QUERIES = 1000
# The OPEN-only flags and the value CLOSED runs with are the edition's vdb_closed_fixed
# (rules/predicates.vdb_closed_values): a flag given another value makes the run OPEN, one not
# given takes the CLOSED value. The server endpoint (--host/--port) is where the database under
# test runs, not a workload choice, so it does not make a run OPEN.


def tool_config() -> dict[str, Any]:
    with open(workloads.configs_dir() / "vectordb" / "default.yaml", encoding="utf-8") as fh:
        return yaml.safe_load(fh)["vector_database"]


def scale_name(n: int) -> str:
    for unit, size in (("b", 10**9), ("m", 10**6), ("k", 10**3)):
        if n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


def default_collection(ds: dict[str, Any], index_type: str) -> str:
    return (f"mlps_{scale_name(int(ds['num_vectors']))}_{int(ds['num_shards'])}shards_{int(ds['dimension'])}dim_"
            f"{ds.get('distribution', 'uniform')}_{index_type.lower()}")


def _int(section: dict[str, Any], key: str, where: str, minimum: int = 1) -> int:
    value = section.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise UsageError(f"{where}.{key} must be an integer, got {value!r}")
    try:
        number = int(str(value))
    except ValueError:
        raise UsageError(f"{where}.{key} must be an integer, got {value!r}") from None
    if number < minimum:
        raise UsageError(f"{where}.{key} must be at least {minimum}, got {number}")
    section[key] = number
    return number


class VectorDBBenchmark(Benchmark):
    benchmark_type = "vector_database"
    options_type = VectorDBOptions
    request: Request[VectorDBOptions]
    engine = "pymilvus / Milvus"
    ENGINES: tuple[str, ...] = ("milvus",)  # the database.database values this class runs

    def __new__(cls, request: Request[VectorDBOptions]) -> VectorDBBenchmark:
        """--vdb-engine diskann is the embedded DiskANN engine's class (benchmarks/vectordb_diskann.py)."""
        if cls is VectorDBBenchmark and request.options.vdb_engine == "diskann":
            from mlpstorage_py.benchmarks.vectordb_diskann import DiskANNBenchmark

            cls = DiskANNBenchmark
        return super().__new__(cls)

    def __init__(self, request) -> None:
        super().__init__(request)
        self.config = tool_config()
        from mlpstorage_py.vectordb.backend import package_version

        pymilvus = package_version("pymilvus")
        opts = request.options
        if opts.host or opts.port:
            where = f"{opts.host or '127.0.0.1'}:{opts.port or 19530}"
            self.engine = f"pymilvus {pymilvus} / Milvus server at {where}"
            origin = f"pymilvus of this environment, a client of the Milvus server at {where}"
        else:
            self.engine = f"pymilvus {pymilvus} / Milvus Lite {package_version('milvus-lite')}"
            origin = f"pymilvus of this environment with Milvus Lite {package_version('milvus-lite')}, embedded"
        spec = importlib.util.find_spec("pymilvus")
        self.identity = {"name": "pymilvus", "version": pymilvus, "origin": origin,
                         "path": list(spec.submodule_search_locations or ["unknown"])[0] if spec else "unknown"}


    def works_in_process(self, plan: Plan) -> bool:
        """Milvus Lite is embedded: its reads and writes are this process's."""
        return not (self.request.options.host or self.request.options.port)

    def leaf_tail(self) -> Path:
        req = self.request
        return layout.leaf_tail(self.benchmark_type, engine=req.options.vdb_engine, model=req.model, command=req.command)

    # -- plan ---------------------------------------------------------------------------
    def plan(self) -> Plan:
        req = self.request
        given = req.options.index_type
        if given and given.upper() != req.model:
            raise UsageError(f"--index-type {given} differs from the <INDEX> positional {req.model}")
        overrides, verification = self.overrides()
        parameters = self._resolve(workloads.apply_overrides(self._from_flags(), overrides), overrides)
        if verification == "CLOSED" and self._open_choices(parameters):
            verification = "OPEN"
        storage_root = parameters.get("storage", {}).get("storage_root")
        data_dir = Path(storage_root) if storage_root and req.storage == "file" else None
        processes = parameters["run"]["num_query_processes"] if req.command == "run" else 1
        plan = Plan(parameters=parameters, num_processes=int(processes), override_parameters=overrides,
                    verification=verification, data_dir=data_dir, engine_identity=self.identity)
        plan.engine_parameters = {"engine": self.engine, "backend": self._backend_kind(parameters)}
        if req.command == "run":
            vectordb_run.check_clients(req.launch.hosts, parameters["database"])
            plan.commands = [vectordb_run.client_command(req.launch, plan.num_processes)]
        plan.report = self._report(parameters)
        return plan

    def launch_layout(self, plan: Plan) -> tuple[MpiOptions, int] | None:
        """(MpiOptions, ranks) of the query clients when they run over client hosts (--hosts),
        else None: local workers, on this host only (no host to probe or describe)."""
        if self.request.command != "run":
            return None
        return vectordb_run.layout(self.request.launch, int(plan.parameters["run"]["num_query_processes"]))

    def _backend_kind(self, p: dict[str, Any]) -> str:
        return "milvus-server" if p["database"].get("host") else "milvus-lite"

    def _from_flags(self) -> dict[str, Any]:
        req, o = self.request, self.request.options
        fixed = predicates.vdb_closed_values(checker())
        index_type = req.model
        p: dict[str, Any] = {
            "database": {"database": o.vdb_engine},
            "dataset": {"num_vectors": o.num_vectors, "dimension": o.dimension, "num_shards": o.num_shards,
                        "vector_dtype": o.vector_dtype},
            "index": {"index_type": index_type},
        }
        if req.command in ("datasize", "datagen"):
            p["index"]["metric_type"] = o.metric_type
            candidates = {"M": o.max_degree, "ef_construction": o.ef_construction, "max_degree": o.max_degree,
                          "search_list_size": o.search_list_size, "inline_pq": o.inline_pq,
                          "nlist": fixed["nlist"] if o.nlist is None else o.nlist}
            for key in families.family(index_type).build:
                if candidates[key] is not None:
                    p["index"][key] = candidates[key]
        if req.command in ("datagen", "run"):
            if o.host or o.port:  # either selects a server; neither, the embedded Milvus Lite
                p["database"].update(host=o.host or "127.0.0.1", port=o.port or 19530)
            p["dataset"].update(collection_name=o.collection,
                                distribution=fixed["distribution"] if o.distribution is None else o.distribution,
                                seed=fixed["seed"] if o.seed is None else o.seed)
            root = o.data_dir
            p["storage"] = {"storage_root": str(Path(root).expanduser().resolve()) if root else None,
                            "storage_type": o.storage_type}
        elif o.data_dir:
            p["storage"] = {"storage_root": str(Path(o.data_dir).expanduser().resolve())}
        if req.command == "datagen":
            p["dataset"].update(batch_size=o.batch_size, chunk_size=o.chunk_size)
            p["workflow"] = {"compact": fixed["compact"] if o.compact is None else o.compact, "force": o.force}
        if req.command == "run":
            p["run"] = {"mode": o.run_mode, "runtime": o.runtime, "queries": o.queries,
                        "num_query_processes": vectordb_run.default_ranks(req.launch.hosts)
                        if o.num_query_processes is None else o.num_query_processes,
                        "batch_size": 1 if o.batch_size is None else o.batch_size,
                        "report_count": o.report_count}
            limit = fixed["search_limit"] if o.search_limit is None else o.search_limit
            p["search"] = {"search_limit": limit, "recall_k": limit, "search_ef": o.search_ef,
                           "num_query_vectors": fixed["num_query_vectors"] if o.num_query_vectors is None
                           else o.num_query_vectors}
        return p

    def _resolve(self, p: dict[str, Any], overrides: dict[str, str]) -> dict[str, Any]:
        """Validate and type what flags and --params produced; fill derived values."""
        req = self.request
        index_type = str(p["index"].get("index_type", "")).upper()
        if index_type != req.model:
            raise UsageError(f"index.index_type {p['index'].get('index_type')} differs from the <INDEX> positional {req.model}")
        p["index"]["index_type"] = index_type
        fam = families.family(index_type)
        if p["database"].get("database") not in self.ENGINES:
            raise NotAvailable(f"database.database={p['database'].get('database')}: this engine runs "
                               f"{', '.join(self.ENGINES)} (--vdb-engine)")
        ds = p["dataset"]
        n = _int(ds, "num_vectors", "dataset")
        dim = _int(ds, "dimension", "dataset", 2)
        if dim > MAX_DIM:
            raise UsageError(f"dataset.dimension {dim} is above Milvus' FLOAT_VECTOR limit of {MAX_DIM}")
        _int(ds, "num_shards", "dataset")
        if ds.get("vector_dtype") != "FLOAT_VECTOR":
            raise UsageError(f"dataset.vector_dtype {ds.get('vector_dtype')} is not supported (FLOAT_VECTOR only)")
        index = p["index"]
        for key in families.ALL_BUILD_KEYS:
            if key in index and key not in fam.build:
                log.warning(f"index.{key} does not apply to {index_type}; ignored")
                index.pop(key)
        if req.command in ("datasize", "datagen"):
            index["metric_type"] = str(index.get("metric_type", "COSINE")).upper()
            if index["metric_type"] not in METRICS:
                raise UsageError(f"index.metric_type {index['metric_type']} is not one of {', '.join(METRICS)}")
            if "nlist" in fam.build and index.get("nlist") is None:
                index["nlist"] = families.default_nlist(n)
            for key in fam.build:
                _int(index, key, "index")
            if index_type == "AISAQ" and index["inline_pq"] > index["max_degree"]:
                raise UsageError(f"index.inline_pq {index['inline_pq']} cannot exceed index.max_degree {index['max_degree']}")
        if req.command in ("datagen", "run"):
            if ds.get("distribution") not in DISTRIBUTIONS:
                raise UsageError(f"dataset.distribution {ds.get('distribution')} is not one of {', '.join(DISTRIBUTIONS)}")
            _int(ds, "seed", "dataset", 0)
            if not ds.get("collection_name"):
                ds["collection_name"] = default_collection(ds, index_type)
            name = str(ds["collection_name"])
            if not (name[0].isalpha() or name[0] == "_") or not all(c.isalnum() or c == "_" for c in name) or len(name) > 255:
                raise UsageError(f"collection name {name!r}: Milvus allows letters, digits and _, starting with a letter or _")
            storage = p.setdefault("storage", {})
            if storage.get("storage_type", "local_fs") != "local_fs":
                raise NotAvailable(f"storage.storage_type={storage.get('storage_type')}: only local_fs is in this build "
                                   "(object storage behind Milvus is configured on the server)")
            if "port" in p["database"]:
                _int(p["database"], "port", "database")
        if req.command == "datagen":
            _int(ds, "batch_size", "dataset")
            _int(ds, "chunk_size", "dataset")
        if req.command == "run":
            self._resolve_run(p, fam)
        return p

    def _resolve_run(self, p: dict[str, Any], fam: families.Family) -> None:
        run, search = p["run"], p["search"]
        mode = run.get("mode")
        if mode is None:
            mode = "query_count" if run.get("queries") is not None else "timed"
        if mode not in RUN_MODES:
            raise UsageError(f"run.mode {mode} is not one of {', '.join(RUN_MODES)}")
        run["mode"] = mode
        if mode == "timed":
            if run.get("queries") is not None:
                raise UsageError("--queries belongs to query_count mode; timed mode takes --runtime")
            run["runtime"] = run.get("runtime") or DEFAULT_RUNTIME
            _int(run, "runtime", "run")
            run["queries"] = None
        else:
            if run.get("runtime") is not None:
                raise UsageError("--runtime belongs to timed mode; query_count mode takes --queries")
            run["queries"] = run.get("queries") or DEFAULT_QUERIES
            _int(run, "queries", "run")
            run["runtime"] = None
        for key in ("num_query_processes", "batch_size", "report_count"):
            _int(run, key, "run")
        k = _int(search, "search_limit", "search")
        search["recall_k"] = k
        _int(search, "num_query_vectors", "search")
        if fam.search_key is None:
            search["search_ef"] = None
        else:
            if search.get("search_ef") is None:
                search["search_ef"] = fam.default_search
            ef = _int(search, "search_ef", "search")
            if fam.search_at_least_k and ef < k:
                raise UsageError(f"--search-ef {ef} is below the top-K {k}: Milvus needs {fam.name} "
                                 f"{fam.search_key} >= top-K")
        search["search_params"] = families.search_params(fam.name, search["search_ef"])

    def _open_choices(self, p: dict[str, Any]) -> list[str]:
        """What makes this configuration OPEN: an OPEN-only index or flag value."""
        reasons = []
        if self.request.model not in rules_workloads()["vector_database"]["index_types"]["closed"]:
            reasons.append(f"index {self.request.model}")
        for name, default in predicates.vdb_closed_values(checker()).items():
            value = getattr(self.request.options, name)
            if value is not None and value != default:
                reasons.append(f"--{name.replace('_', '-')} {value}")
        return reasons

    def _report(self, p: dict[str, Any]) -> list[str]:
        req, ds, index = self.request, p["dataset"], p["index"]
        backend = (f"Milvus server {p['database']['host']}:{p['database']['port']}" if p["database"].get("host")
                   else f"Milvus Lite (embedded) under {p.get('storage', {}).get('storage_root') or '<--storage-root>'}")
        build = {k: v for k, v in index.items() if k not in ("index_type",)}
        lines = []
        if req.command == "datasize":
            size = families.datasize(req.model, ds["num_vectors"], ds["dimension"], ds["num_shards"], index)
            ds["total_disk_bytes"] = size["total_bytes"]
            self._datasize = size
            gib = 2**30
            lines += [f"{req.model} datasize for {ds['num_vectors']:,} x {ds['dimension']} float32 vectors, "
                      f"{ds['num_shards']} shard(s):",
                      f"  raw vectors      : {size['raw_vector_bytes']:,} B ({size['raw_vector_bytes'] / gib:,.3f} GiB)",
                      f"  rows as stored   : {size['row_bytes']:,} B (vectors + int64 keys)",
                      f"  {req.model} index files: {size['index_bytes']:,} B ({size['families'][req.model]['index_model']})",
                      f"  estimated total  : {size['total_bytes']:,} B ({size['total_bytes'] / gib:,.3f} GiB), "
                      f"{size['total_bytes_per_shard'] / gib:,.3f} GiB per shard",
                      "  every family (index files / total):"]
            for name, fam in size["families"].items():
                lines.append(f"    {name:9s} {fam['index_bytes'] / gib:12,.3f} GiB / {fam['total_bytes'] / gib:12,.3f} GiB")
            return lines
        lines.append(f"{req.model} {req.command} on {backend}, collection {ds['collection_name']}")
        lines.append(f"  {ds['num_vectors']:,} vectors x {ds['dimension']} ({ds['distribution']}, seed {ds['seed']}), "
                     f"{ds['num_shards']} shard(s)")
        if req.command == "datagen":
            lines.append(f"  index {req.model} {build}; insert batches of {ds['batch_size']:,}, "
                         f"generated in chunks of {ds['chunk_size']:,}; compact: {p['workflow']['compact']}")
        else:
            run, search = p["run"], p["search"]
            amount = f"{run['runtime']} s" if run["mode"] == "timed" else f"{run['queries']:,} queries"
            hosts = req.launch.hosts
            clients = (f"{run['num_query_processes']} MPI rank(s) over {', '.join(hosts)}" if hosts
                       else f"{run['num_query_processes']} process(es)")
            lines.append(f"  {run['mode']} ({amount}), {clients}, batches of "
                         f"{run['batch_size']}, top-{search['search_limit']}, search params {search['search_params']}")
            lines.append(f"  recall@{search['recall_k']} on a fixed set of {search['num_query_vectors']:,} queries "
                         "against exact ground truth")
        if not p["database"].get("host") and not families.family(req.model).lite_kinds:
            lines.append("  NOTE: " + _lite_refusal(req.model))
        return lines

    # -- gates --------------------------------------------------------------------------
    def preflight(self, plan: Plan) -> None:
        req = self.request
        if req.command == "datasize" or req.mode == "whatif":
            return
        p = plan.parameters
        root = p["storage"].get("storage_root")
        if not p["database"].get("host"):
            if not families.family(req.model).lite_kinds:
                raise ConfigurationError(_lite_refusal(req.model))
            if not root:
                raise ConfigurationError("--storage-root (or --data-dir, MLPSTORAGE_DATA_DIR) is required: Milvus Lite "
                                         "keeps its database there (Rules 5.4.1)")
        elif not root:
            log.warning("no --storage-root: the server's data directory is not recorded or checked (Rules 5.4.1/5.4.2)")
        if root and self.results_dir is not None:
            data, results = Path(root).resolve(), self.results_dir.resolve()
            if data == results or results in data.parents or data in results.parents:
                raise GateRefused(f"the storage root {data} and the results directory {results} must be apart (Rules 5.4.1)")
        if req.mode == "closed":
            scales, _ = predicates.vdb_scales(checker())
            scale = (p["dataset"]["num_vectors"], p["dataset"]["dimension"])
            if scales and scale not in scales:
                log.warning(f"{scale[0]:,} x {scale[1]} is not one of the edition's named scales "
                            f"({', '.join(f'{n:,} x {d}' for n, d in scales)}); Rules 5.1.1 validation may fail it")

    # -- execute ------------------------------------------------------------------------
    def execute(self, plan: Plan, leaf: Path) -> None:
        if self.request.command == "datasize":
            self._execute_datasize(plan, leaf)
        elif self.request.command == "datagen":
            self._execute_datagen(plan, leaf)
        else:
            from mlpstorage_py.benchmarks.vectordb_run import QueryRun

            QueryRun(self, plan, leaf).execute()

    def _backend(self, plan: Plan):
        from mlpstorage_py.vectordb.backend import Milvus, Timeouts

        p = plan.parameters
        timeouts = Timeouts.from_config(self.config.get("timeouts_s", {}))
        host = p["database"].get("host")
        lite = None if host else Path(p["storage"]["storage_root"]) / self.config["lite_database"]
        return Milvus(collection=p["dataset"]["collection_name"], host=host, port=p["database"].get("port"),
                      lite_path=lite, timeouts=timeouts)

    def _filesystems(self, plan: Plan) -> dict[str, Any]:
        """Rules 5.4.2: a df of the database's data directory and of the results directory, in the log."""
        from mlpstorage_py.vectordb.system import filesystems

        root = plan.parameters.get("storage", {}).get("storage_root")
        data = Path(root) if root and Path(root).exists() else None
        record = filesystems(data, self.results_dir or Path.cwd())
        for label, key in (("vector database data (--storage-root)", "data"), ("results directory", "results")):
            if key in record:
                log.info(f"df {label}: {record[key]['path']}")
                for line in record[key].get("df_output", [record[key].get("error", "")]):
                    log.info(f"  {line}")
        if record.get("same_filesystem"):
            log.warning("the vector database data and the results directory are on the same filesystem (Rules 5.4.2)")
        return record

    def _progress(self, text: str) -> None:
        log.info(text)

    def _execute_datasize(self, plan: Plan, leaf: Path) -> None:
        for line in plan.report:
            print(line)
            log.debug(line)
        size = dict(self._datasize)
        root = plan.parameters.get("storage", {}).get("storage_root")
        if root and Path(root).is_dir():
            from mlpstorage_py.vectordb.system import df

            record = df(Path(root))
            size["storage_root"] = record
            free = record.get("available_kib", 0) * 1024
            if free < size["total_bytes"]:
                log.warning(f"{root} has {free / 2**30:,.2f} GiB free; the estimate is {size['total_bytes'] / 2**30:,.2f} GiB")
        VdbSummary(size).write(leaf / "summary.json")

    # -- datagen ------------------------------------------------------------------------
    def _execute_datagen(self, plan: Plan, leaf: Path) -> None:
        p = plan.parameters
        ds, index = p["dataset"], p["index"]
        index_type, metric = index["index_type"], index["metric_type"]
        started = time.time()
        fs = self._filesystems(plan)
        db = self._backend(plan)
        timeouts, poll = db.timeouts, float(self.config.get("poll_interval_s", 2))
        try:
            db.open()
            self.engine = db.engine_label()
            plan.engine_parameters.update(engine=self.engine, database=db.record())
            db.require_index_support(index_type)
            if db.exists():
                if not p["workflow"]["force"]:
                    raise GateRefused(f"collection {db.collection} already exists on {db.describe()}; datagen never "
                                      "reuses one (--force drops and recreates it, --collection names another)")
                log.warning(f"--force: dropping the existing collection {db.collection}")
                db.drop()
            db.create(ds["dimension"], ds["num_shards"])
            log.info(f"created collection {db.collection}: id INT64 primary key, {VECTOR_FIELD} FLOAT_VECTOR({ds['dimension']})")
            load = self._load(db, ds)
            build_params = families.build_params(index_type, index)
            log.info(f"index build: {index_type} {metric} {build_params}")
            build_start = time.time()
            db.create_index(index_type, metric, build_params)
            with progress.Progress("index build", ds["num_vectors"], "rows") as bar:
                build = db.wait_index(stall_s=timeouts.index_stall, poll_s=poll, progress=self._progress,
                                      rows=lambda done, total: bar.update(done))
            build.update(start=iso_from_epoch(build_start), seconds=time.time() - build_start, requested_params=build_params)
            built = self._check_built(db, index_type, metric, build_params)
            build.update(built)
            if p["workflow"]["compact"]:
                compaction = db.compact(stall_s=timeouts.compaction_stall, poll_s=poll, progress=self._progress)
                compaction["index_after"] = db.wait_index(stall_s=timeouts.index_stall, poll_s=poll, progress=self._progress)
            else:
                compaction = {"requested": False, "state": "not requested"}
            load_start = time.time()
            db.load()
            serving = db.wait_served(index_type, stall_s=timeouts.index_stall, poll_s=poll, progress=self._progress)
            build["served_ready"] = iso_from_epoch(time.time())
            if not serving["served_by_named_index"]:
                raise BenchmarkFailed(f"after the build {serving['rows_brute_force']:,} of {serving['rows_total']:,} rows "
                                      f"would still be searched by brute force, not by {index_type} ({db.describe()})")
            inserted = db.count()
            collection_load = {"start": iso_from_epoch(load_start), "end": iso_from_epoch(time.time()), "seconds": time.time() - load_start}
        finally:
            db.close()
        if inserted != ds["num_vectors"]:
            raise BenchmarkFailed(f"the collection holds {inserted:,} vectors, {ds['num_vectors']:,} were inserted (Rules 5.2.1)")
        summary = {
            "benchmark_phase": "datagen",
            "start": iso_from_epoch(started), "end": iso_from_epoch(time.time()),
            "num_vectors": ds["num_vectors"], "inserted_vectors": inserted, "dimension": ds["dimension"],
            "index_type": built["index_type"], "requested_index_type": index_type,
            "metric_type": built["metric_type"], "index_params": built["params"],
            "collection_name": db.collection, "num_shards": ds["num_shards"], "vector_dtype": ds["vector_dtype"],
            "distribution": ds["distribution"], "seed": ds["seed"],
            "batch_size": ds["batch_size"], "chunk_size": ds["chunk_size"],
            "database": db.record(), "engine": self.engine,
            "load": load,
            "load_time_seconds": load["seconds"],
            "index_build": build,
            "index_build_time_seconds": build["seconds"],
            "compaction": compaction,
            "collection_load": collection_load,
            "served_by": serving,
            "filesystems": fs,
        }
        VdbSummary(summary).write(leaf / "summary.json")
        print(f"{index_type} datagen: {inserted:,} vectors loaded in {load['seconds']:.1f} s "
              f"({load['vectors_per_second']:,.0f} vectors/s), index built in {build['seconds']:.1f} s; "
              f"collection {db.collection} on {db.describe()}")

    def _load(self, db, ds: dict[str, Any]) -> dict[str, Any]:
        import numpy as np

        from mlpstorage_py.vectordb import generate

        n, dim, batch, chunk = ds["num_vectors"], ds["dimension"], ds["batch_size"], ds["chunk_size"]
        start, gen_s, ins_s, inserted = time.time(), 0.0, 0.0, 0
        said = time.monotonic()
        every = float(self.config.get("progress_interval_s", 5))
        with progress.Progress("vector load", n, "vectors") as bar:
            for lo in range(0, n, chunk):
                hi = min(lo + chunk, n)
                t = time.perf_counter()
                rows = generate.vectors(ds["seed"], ds["distribution"], dim, lo, hi)
                gen_s += time.perf_counter() - t
                for b in range(lo, hi, batch):
                    e = min(b + batch, hi)
                    t = time.perf_counter()
                    inserted += db.insert(np.arange(b, e, dtype=np.int64), rows[b - lo:e - lo])
                    ins_s += time.perf_counter() - t
                bar.update(inserted)
                if time.monotonic() - said >= every or hi == n:
                    rate = inserted / max(time.time() - start, 1e-9)
                    log.info(f"load: {inserted:,} of {n:,} vectors inserted ({100 * inserted / n:.0f}%), {rate:,.0f} vectors/s")
                    said = time.monotonic()
        if inserted != n:
            raise BenchmarkFailed(f"the database acknowledged {inserted:,} of {n:,} inserted vectors")
        log.info("flush: sealing the inserted data")
        t = time.perf_counter()
        db.flush()
        flush_s = time.perf_counter() - t
        seconds = time.time() - start
        return {"start": iso_from_epoch(start), "end": iso_from_epoch(time.time()), "seconds": seconds, "generation_seconds": gen_s,
                "insert_seconds": ins_s, "flush_seconds": flush_s, "acknowledged_vectors": inserted,
                "vectors_per_second": n / seconds if seconds else 0.0,
                "insert_vectors_per_second": n / ins_s if ins_s else 0.0}

    def _check_built(self, db, index_type: str, metric: str, requested: dict[str, Any]) -> dict[str, Any]:
        """The index the server says it built must be the one asked for, with its parameters."""
        from mlpstorage_py.vectordb.backend import reported_params

        info = db.describe_index() or {}
        built_type, built_metric = str(info.get("index_type")), str(info.get("metric_type"))
        params = reported_params(info)
        if db.lite:  # Milvus Lite's own spec is what it builds from; its describe_index omits empty params
            spec = db.serving(index_type).get("index_spec") or {}
            params = {**spec.get("params", {}), **params}
        if built_type != index_type or built_metric != metric:
            raise BenchmarkFailed(f"{db.describe()} reports a {built_type} {built_metric} index; {index_type} {metric} was asked for")
        wrong = {k: params.get(k) for k, v in requested.items() if params.get(k) != v}
        if wrong:
            raise BenchmarkFailed(f"{db.describe()} reports build parameters {params}, not the requested {requested} "
                                  f"(differs in {sorted(wrong)})")
        return {"index_type": built_type, "metric_type": built_metric, "params": params, "describe_index": _jsonable(info)}

    def collect(self, plan: Plan, leaf: Path) -> dict[str, Any]:
        summary = leaf / "summary.json"
        if not summary.is_file():
            raise BenchmarkFailed(f"no summary.json in {leaf}")
        data = read_json(summary)
        if self.request.command == "run":
            missing = [key for key in ("throughput_qps", "mean_latency_ms", "p95_latency_ms", "p99_latency_ms",
                                       "p999_latency_ms", "recall") if data.get(key) is None]
            if missing:
                raise BenchmarkFailed(f"summary.json lacks {missing} (Rules 5.3.2/5.3.4)")
        return {"engine": self.engine}


def _lite_refusal(index_type: str) -> str:
    from mlpstorage_py.vectordb.backend import lite_refusal

    return lite_refusal(index_type)


def _jsonable(info: dict[str, Any]) -> dict[str, Any]:
    import json

    return json.loads(json.dumps(info, default=str))
