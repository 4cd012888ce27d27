"""`vectordb DISKANN <datagen|run> --vdb-engine diskann` (OPEN): the SSD-resident DiskANN index
Milvus's DISKANN wraps, embedded through diskannpy, so the storage side of vector search is
measured without a Milvus 2.4+ server (which needs Docker; platform.md).

datagen writes the generated vectors and builds the index under --storage-root (a child
process: vectordb/diskann_build.py); run launches one query client per MPI rank
(vectordb/diskann_rank.py) over the one index or a copy per host. The leaf sits under
vector_database/diskann/ and names diskannpy, never Milvus. CLOSED refuses the engine (Rules
5.6.2) with the same reason as Milvus Lite's DISKANN refusal; AISAQ is refused with what would
unblock it.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from mlpstorage_py import progress
from mlpstorage_py.benchmarks.base import Plan
from mlpstorage_py.benchmarks.vectordb import VectorDBBenchmark
from mlpstorage_py.errors import BenchmarkFailed, ConfigurationError, GateRefused, NotFoundError, UsageError
from mlpstorage_py.launch.mpi import SAFE_PATH, MpiOptions, host_slots, mpi_command
from mlpstorage_py.results.io import iso_from_epoch, write_json
from mlpstorage_py.results.logs import log
from mlpstorage_py.vectordb import diskann_engine as engine
from mlpstorage_py.vectordb.backend import lite_refusal

RANK_MODULE = "mlpstorage_py.vectordb.diskann_rank"
SPEC_FILE = "query_clients.json"


def closed_refusal(index_type: str) -> str:
    """CLOSED runs Milvus (Rules 5.6.2): the embedded engine is refused with Lite's one-line reason."""
    return f"--vdb-engine diskann is OPEN only (Rules 5.6.2: CLOSED runs Milvus): {lite_refusal(index_type)}"


def aisaq_refusal() -> str:
    return ("AISAQ is not in diskannpy (AiSAQ keeps its neighbours' PQ codes inline in each node's sector, so only "
            "the PQ pivots stay in memory; Milvus 2.6.4+ builds it through Knowhere): point --host/--port at a "
            "Milvus 2.6.4+ server, or run DISKANN with --vdb-engine diskann. No other index is substituted.")


def available_memory() -> int:
    from mlpstorage_py.results.host import meminfo_bytes

    return meminfo_bytes("MemAvailable") or meminfo_bytes() or 0


class DiskANNBenchmark(VectorDBBenchmark):
    """The vector database benchmark on the embedded DiskANN engine."""

    ENGINES = ("diskann",)
    engine = engine.label()

    def __init__(self, request: Any) -> None:  # no pymilvus: the parent's identity is Milvus's
        super(VectorDBBenchmark, self).__init__(request)
        from mlpstorage_py.benchmarks.vectordb import tool_config

        self.config = tool_config()
        self.identity = {"name": "diskannpy", "version": engine.version() or "not installed",
                         "origin": "diskannpy with numpy 1.25 in this environment's diskann prefix (Microsoft "
                                   "DiskANN), embedded: datagen builds in a child process, run queries from MPI ranks",
                         "path": str(engine.site_packages() / "diskannpy")}

    def works_in_process(self, plan: Plan) -> bool:
        """datagen writes the vectors from this process (the build child inherits the mark)."""
        return self.request.command == "datagen"

    # -- plan ---------------------------------------------------------------------------
    def plan(self) -> Plan:
        req = self.request
        if req.mode == "closed":
            raise ConfigurationError(closed_refusal(req.model))
        if req.model == "AISAQ":
            raise ConfigurationError(aisaq_refusal())
        if req.model != "DISKANN":
            raise UsageError(f"--vdb-engine diskann builds DISKANN only; {req.model} runs on Milvus (--vdb-engine milvus)")
        if req.command == "datasize":
            return super().plan()
        engine.require()
        overrides, verification = self.overrides()
        from mlpstorage_py.rules import configs as workloads

        p = self._resolve(workloads.apply_overrides(self._from_flags(), overrides), overrides)
        p["database"] = {"database": engine.ENGINE, "backend": "diskannpy-embedded", "engine": self.engine}
        root = p["storage"].get("storage_root")
        directory = engine.index_dir(root, p["dataset"]["collection_name"]) if root else None
        p["engine"] = {"name": "diskannpy", "version": engine.version(), "mapping": engine.MAPPING,
                       "index_dir": str(directory) if directory else None}
        processes = int(p["run"]["num_query_processes"]) if req.command == "run" else 1
        plan = Plan(parameters=p, num_processes=processes, override_parameters=overrides,
                    verification="INVALID" if verification == "INVALID" else "OPEN",
                    data_dir=Path(root) if root else None, engine_identity=self.identity)
        plan.engine_parameters = {"engine": self.engine, "backend": "diskannpy-embedded"}
        if req.command == "datagen":
            self._plan_build(p)
        else:
            self._plan_run(p, directory, plan)
        plan.report = self._diskann_report(p)
        return plan

    def _plan_build(self, p: dict[str, Any]) -> None:
        ds, index, o = p["dataset"], p["index"], self.request.options
        build = engine.BuildParams(metric=index["metric_type"], max_degree=index["max_degree"],
                                   search_list_size=index["search_list_size"],
                                   pq_code_budget_ratio=o.pq_code_budget_ratio,
                                   build_memory_gb=o.build_memory_gb,
                                   threads=o.build_threads)
        index["pq_code_budget_gb_ratio"] = build.pq_code_budget_ratio
        p["engine"].update(build=build.native(ds["num_vectors"], ds["dimension"]), build_memory_gb=build.build_memory_gb)
        need, free = int(build.build_memory_gb * 2**30), available_memory()
        if free and need > free:
            raise GateRefused(f"--build-memory-gb {build.build_memory_gb:g} is more than this host's available memory "
                              f"({free / 2**30:.1f} GiB MemAvailable); lower it (DiskANN builds in parts within it)")

    def _plan_run(self, p: dict[str, Any], directory: Path | None, plan: Plan) -> None:
        req, search = self.request, p["search"]
        search["search_params"]["beam_width"] = self.request.options.beam_width
        copy = self.request.options.index_copy_dir
        if copy:
            where = Path(copy).expanduser()
            if where.exists() and not where.is_dir():
                raise UsageError(f"--index-copy-dir {copy} is not a directory")
            if directory is not None and where.resolve() == directory.parent.resolve():
                raise UsageError(f"--index-copy-dir {copy} holds the index itself; give each host's own storage")
        p["engine"].update(beam_width=search["search_params"]["beam_width"],
                           index_placement="per-host copy" if copy else "shared",
                           index_copy_dir=str(Path(copy).expanduser().resolve()) if copy else None)
        opts = self._mpi()
        slots = host_slots(opts.hosts, plan.num_processes)
        program = [sys.executable, *SAFE_PATH, "-m", RANK_MODULE, f"{{leaf}}/{SPEC_FILE}"]
        plan.commands = [mpi_command(opts, plan.num_processes, program)]
        if directory is None:
            return
        try:
            desc = engine.describe(directory)
        except NotFoundError:
            if req.mode == "whatif":
                p["engine"]["memory"] = "unknown: no index yet"
                return
            raise
        memory = engine.memory(desc, self.request.options.search_cache_budget_ratio)
        p["engine"].update(index=desc, memory=memory,
                           expected_reads=engine.expected_reads(desc, search["search_ef"], search["search_params"]["beam_width"]))
        from mlpstorage_py.launch.hostnames import is_local

        local = sum(s for h, s in slots if is_local(h))
        need, free = local * memory["per_client_bytes"], available_memory()
        if local and free and need > free:
            raise GateRefused(f"{local} query client(s) on this host would hold {need / 2**30:.2f} GiB (PQ codes "
                              f"{memory['pq_codes_bytes'] / 2**20:.1f} MiB + node cache {memory['node_cache_bytes'] / 2**20:.1f} "
                              f"MiB + {engine.PROCESS_BYTES / 2**20:.0f} MiB process each); {free / 2**30:.2f} GiB is "
                              "available: fewer clients per host or a lower --search-cache-budget-ratio")

    def _mpi(self) -> MpiOptions:
        return MpiOptions.of(self.request.launch)

    def launch_layout(self, plan: Plan) -> tuple[MpiOptions, int] | None:
        if self.request.command != "run":
            return None
        return self._mpi(), plan.num_processes

    def gate_hosts(self, plan: Plan) -> None:
        """Every client host must hold its query clients' in-memory part (its MemTotal, surveyed)."""
        memory = plan.parameters.get("engine", {}).get("memory")
        if not isinstance(memory, dict):
            return
        for host in plan.client_hosts or []:
            total, slots = host.get("memory_total_bytes"), len(host.get("ranks") or [0])
            if total and slots * memory["per_client_bytes"] > total:
                raise GateRefused(f"{slots} query client(s) on {host.get('host')} would hold "
                                  f"{slots * memory['per_client_bytes'] / 2**30:.2f} GiB; it has {total / 2**30:.2f} GiB")

    def _diskann_report(self, p: dict[str, Any]) -> list[str]:
        req, ds, eng = self.request, p["dataset"], p["engine"]
        lines = [f"DISKANN {req.command} on {self.engine}, index {eng['index_dir']}",
                 f"  {ds['num_vectors']:,} vectors x {ds['dimension']} ({ds['distribution']}, seed {ds['seed']})"]
        if req.command == "datagen":
            b = eng["build"]
            lines.append(f"  build: R {b['graph_degree']}, L {b['complexity']}, {b['expected_pq_bytes']} PQ bytes/vector "
                         f"in memory, metric {p['index']['metric_type']} -> {b['distance_metric']}, "
                         f"build memory {eng['build_memory_gb']:g} GiB, threads {b['num_threads'] or 'all'}")
        else:
            run, search = p["run"], p["search"]
            amount = f"{run['runtime']} s" if run["mode"] == "timed" else f"{run['queries']:,} queries"
            lines.append(f"  {run['mode']} ({amount}), {run['num_query_processes']} MPI rank(s), batches of "
                         f"{run['batch_size']}, top-{search['search_limit']}, search_list {search['search_ef']}, "
                         f"beam width {search['search_params']['beam_width']}, index {eng['index_placement']}")
            memory = eng.get("memory")
            if isinstance(memory, dict):
                lines.append(f"  in memory per client: {memory['in_memory_bytes'] / 2**20:.1f} MiB (PQ + "
                             f"{memory['cache_nodes']:,} cached nodes) + {engine.PROCESS_BYTES / 2**20:.0f} MiB process")
        return lines

    # -- gates --------------------------------------------------------------------------
    def preflight(self, plan: Plan) -> None:
        req = self.request
        if req.command == "datasize" or req.mode == "whatif":
            return
        root = plan.parameters["storage"].get("storage_root")
        if not root:
            raise ConfigurationError("--storage-root (or --data-dir, MLPSTORAGE_DATA_DIR) is required: the DiskANN "
                                     "index lives there (Rules 5.4.1)")
        if self.results_dir is not None:
            data, results = Path(root).resolve(), self.results_dir.resolve()
            if data == results or results in data.parents or data in results.parents:
                raise GateRefused(f"the storage root {data} and the results directory {results} must be apart (Rules 5.4.1)")
        if Path(root).is_dir():
            _require_direct_io(Path(root))

    # -- execute ------------------------------------------------------------------------
    def execute(self, plan: Plan, leaf: Path) -> None:
        if self.request.command == "datasize":
            self._execute_datasize(plan, leaf)
        elif self.request.command == "datagen":
            self._datagen(plan, leaf)
        else:
            from mlpstorage_py.benchmarks.vectordb_diskann_run import DiskANNRun

            DiskANNRun(self, plan, leaf).execute()

    def _datagen(self, plan: Plan, leaf: Path) -> None:
        p = plan.parameters
        ds, index, eng = p["dataset"], p["index"], p["engine"]
        started = time.time()
        fs = self._filesystems(plan)
        directory = Path(eng["index_dir"])
        if directory.exists() and any(directory.iterdir()):
            if not p["workflow"]["force"]:
                raise GateRefused(f"a DISKANN index already exists at {directory}; datagen never reuses one (--force "
                                  "replaces it, --collection names another)")
            log.warning(f"--force: removing the existing index {directory}")
            shutil.rmtree(directory)
        directory.mkdir(parents=True, exist_ok=True)
        load = self._write_vectors(directory / engine.VECTORS, ds)
        build = self._build(plan, directory, leaf)
        desc = engine.describe(directory)
        if (desc["num_vectors"], desc["dimension"]) != (ds["num_vectors"], ds["dimension"]):
            raise BenchmarkFailed(f"the built index holds {desc['num_vectors']:,} x {desc['dimension']}; "
                                  f"{ds['num_vectors']:,} x {ds['dimension']} were written")
        from mlpstorage_py.vectordb import devstats

        on_disk = sum(f.stat().st_blocks * 512 for f in directory.iterdir() if f.is_file() and f.name.startswith(engine.PREFIX))
        params = {"max_degree": index["max_degree"], "search_list_size": index["search_list_size"],
                  "pq_code_budget_gb_ratio": index["pq_code_budget_gb_ratio"]}
        record = {"collection_name": ds["collection_name"], "index_type": "DISKANN", "metric_type": index["metric_type"],
                  "distance_metric": eng["build"]["distance_metric"], "index_params": params, "native": eng["build"],
                  "fingerprint": engine.fingerprint(directory), "engine": self.engine, "built": iso_from_epoch(time.time()),
                  "seed": ds["seed"], "distribution": ds["distribution"]}
        write_json(directory / engine.BUILD_RECORD, record)
        if desc["pq_bytes_per_vector"] != eng["build"]["expected_pq_bytes"]:
            log.warning(f"DiskANN chose {desc['pq_bytes_per_vector']} PQ bytes per vector, "
                        f"{eng['build']['expected_pq_bytes']} were asked for")
        build.update(state="Finished", indexed_rows=desc["num_vectors"], total_rows=desc["num_vectors"],
                     pq_bytes_per_vector=desc["pq_bytes_per_vector"], requested_params=eng["build"])
        summary = {
            "benchmark_phase": "datagen", "start": iso_from_epoch(started), "end": iso_from_epoch(time.time()),
            "num_vectors": ds["num_vectors"], "inserted_vectors": desc["num_vectors"], "dimension": ds["dimension"],
            "index_type": "DISKANN", "requested_index_type": "DISKANN", "metric_type": index["metric_type"],
            "index_params": params, "collection_name": ds["collection_name"], "num_shards": 1,
            "vector_dtype": ds["vector_dtype"], "distribution": ds["distribution"], "seed": ds["seed"],
            "chunk_size": ds["chunk_size"], "database": p["database"], "engine": self.engine,
            "engine_version": engine.version(), "load": load, "load_time_seconds": load["seconds"],
            "index_build": build, "index_build_time_seconds": build["seconds"],
            "index_build_peak_memory_bytes": build["peak_memory_bytes"],
            "index_dir": str(directory), "index_files": desc["files"], "index_size_bytes": desc["index_bytes"],
            "index_allocated_bytes": on_disk, "index": desc, "device": devstats.device_of(directory),
            "filesystems": fs,
        }
        write_json(leaf / "summary.json", summary)
        print(f"DISKANN datagen: {ds['num_vectors']:,} vectors written in {load['seconds']:.1f} s, index built in "
              f"{build['seconds']:.1f} s ({desc['index_bytes'] / 2**20:,.1f} MiB on disk, build peak memory "
              f"{build['peak_memory_bytes'] / 2**20:,.0f} MiB) at {directory} by {self.engine}")

    def _write_vectors(self, path: Path, ds: dict[str, Any]) -> dict[str, Any]:
        """The generated vectors, chunk by chunk, into DiskANN's .bin on the storage under test."""
        from mlpstorage_py.vectordb import generate

        n, dim, chunk = ds["num_vectors"], ds["dimension"], ds["chunk_size"]
        start = time.time()
        with open(path, "wb") as fh, progress.Progress("vector write", n, "vectors") as bar:
            engine.write_vectors_header(fh, n, dim)
            for lo in range(0, n, chunk):
                hi = min(lo + chunk, n)
                fh.write(generate.vectors(ds["seed"], ds["distribution"], dim, lo, hi).tobytes())
                bar.update(hi)
            fh.flush()
            os.fsync(fh.fileno())
        seconds = time.time() - start
        return {"start": iso_from_epoch(start), "end": iso_from_epoch(time.time()), "seconds": seconds,
                "bytes": path.stat().st_size, "path": str(path), "vectors_per_second": n / seconds if seconds else 0.0}

    def _build(self, plan: Plan, directory: Path, leaf: Path) -> dict[str, Any]:
        """The build in a child (diskann_build) through the launch path; its peak memory is its
        own ru_maxrss, which it reports."""
        from mlpstorage_py.launch.job import LaunchSpec, Work

        native, ds = plan.parameters["engine"]["build"], plan.parameters["dataset"]
        started = time.time()
        with self.launcher(leaf) as launcher:
            spec_path, output = launcher.scratch / "build.json", launcher.scratch / "built.json"
            spec_path.write_text(json.dumps({"vectors": str(directory / engine.VECTORS), "index_dir": str(directory),
                                             "native": native, "output": str(output)}), encoding="utf-8")
            argv = [sys.executable, *SAFE_PATH, "-m", "mlpstorage_py.vectordb.diskann_build", str(spec_path)]
            log.info(f"DiskANN build: {native}")
            # the build's work: 20,000 x 64 at degree 32 took 10 s on 2 cores here (platform.md);
            # twice that per vector x degree x dimension, plus a minute (then the deadline's factor)
            work = Work(busy_s=60 + ds["num_vectors"] * native["graph_degree"] * ds["dimension"] * 5e-7)
            self.launch(launcher, LaunchSpec(argv, "DiskANN index build", leaf / "diskann_build.stdout.log",
                                             leaf / "diskann_build.stderr.log", work=work, reports=False,
                                             hosts=["127.0.0.1"]), plan)
            result = json.loads(output.read_text(encoding="utf-8"))
        return {"start": iso_from_epoch(started), "end": iso_from_epoch(time.time()), "seconds": result["seconds"],
                "peak_memory_bytes": result["peak_memory_bytes"], "wall_seconds": time.time() - started}


def _require_direct_io(root: Path) -> None:
    """DiskANN reads its index sectors with O_DIRECT: a filesystem without it (tmpfs) fails
    later and less clearly, so it is refused here."""
    probe = root / f".mlps-odirect-{os.getpid()}"
    try:
        fd = os.open(probe, os.O_RDWR | os.O_CREAT | getattr(os, "O_DIRECT", 0), 0o600)
        os.close(fd)
    except OSError as exc:
        raise ConfigurationError(f"--storage-root {root} does not take O_DIRECT ({exc.strerror}; tmpfs?): DiskANN "
                                 "reads its index with O_DIRECT, so the index must be on a block-device filesystem") from None
    finally:
        probe.unlink(missing_ok=True)
