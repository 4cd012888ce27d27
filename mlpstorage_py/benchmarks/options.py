"""Each benchmark's options, as the command line gave them: one frozen dataclass per benchmark,
the fields its commands' flags fill (a field a command has no flag for keeps its default). The
CLI builds them (cli/requests.py); the benchmarks read typed fields, never the parsed arguments.

How to add a flag:
  1. register it in the benchmark's cli module (cli/<benchmark>.py), or in cli/common.py when
     every benchmark with the group takes it;
  2. add one field here named as the flag's argparse dest, defaulting to what "not given" means
     (None when the code derives the value, else the value the code used to fall back on):
     a benchmark's own flag in its options class below, a launch flag (hosts, MPI, limits) in
     launch/options.LaunchOptions, a flag of every benchmark in benchmarks/base.Request.
Lists from argparse arrive as tuples. tests/test_requests.py fails while a registered dest has
no field, or a field no flag fills, so the two cannot drift. The metadata's `args` record is the
parsed command line as it was (Request.recorded_args), not these fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from mlpstorage_py.errors import UsageError

T = TypeVar("T")


def given(value: T | None, flag: str) -> T:
    """A flag the parser requires for this command (a None here is a caller's bug, said in one line)."""
    if value is None:
        raise UsageError(f"{flag} is required")
    return value


@dataclass(frozen=True)
class BenchmarkOptions:
    """What every benchmark's options answer."""

    @property
    def location(self) -> str | None:
        """Where the work's data lives as the user named it (a directory or an s3:// URI), if anywhere."""
        return None


@dataclass(frozen=True)
class TrainingOptions(BenchmarkOptions):
    data_dir: str | None = None                     # --data-dir (else MLPSTORAGE_DATA_DIR)
    accelerator_type: str | None = None             # -at: datasize, run, configview
    client_host_memory_in_gb: float | None = None   # -cm: datasize, run, configview
    num_client_hosts: int | None = None             # -nc
    max_accelerators: int | None = None             # -ma: datasize
    num_processes: int | None = None                # -np: datagen
    num_accelerators: int | None = None             # -na: run, configview
    overwrite: bool = False                         # datagen --overwrite
    dlio_bin_path: str | None = None                # --dlio-bin-path (else MLPSTORAGE_DLIO_BIN_PATH)
    dlio_bin_path_origin: str = "--dlio-bin-path"   # where dlio_bin_path came from, for what the run prints

    @property
    def location(self) -> str | None:
        return self.data_dir


@dataclass(frozen=True)
class CheckpointingOptions(BenchmarkOptions):
    num_processes: int | None = None                # -np (required by the parser)
    client_host_memory_in_gb: float | None = None   # -cm (required by the parser)
    accelerator_type: str | None = None             # -at: required for run and configview
    num_checkpoints_write: int = 10                 # -ncw
    num_checkpoints_read: int = 10                  # -ncr
    checkpoint_folder: str | None = None            # -cf (else MLPSTORAGE_CHECKPOINT_FOLDER)
    o_direct: bool = False                          # --o-direct (OPEN)
    engine: str = "mlpstorage"                      # --engine mlpstorage|dlio (OPEN)
    checkpoint_subset: bool = False                 # --subset (Rules 4.3.5)
    dlio_bin_path: str | None = None                # --dlio-bin-path, for --engine dlio
    dlio_bin_path_origin: str = "--dlio-bin-path"

    @property
    def location(self) -> str | None:
        return self.checkpoint_folder


@dataclass(frozen=True)
class VectorDBOptions(BenchmarkOptions):
    num_vectors: int | None = None       # collection scale (the parser's defaults: 1,000,000 x 1536, 1 shard)
    dimension: int | None = None
    num_shards: int | None = None
    vector_dtype: str = "FLOAT_VECTOR"
    index_type: str | None = None        # --index-type: if given, must equal <INDEX>
    vdb_engine: str = "milvus"
    metric_type: str = "COSINE"          # index build: datasize, datagen
    max_degree: int | None = None
    ef_construction: int | None = None
    search_list_size: int | None = None
    inline_pq: int | None = None
    nlist: int | None = None             # OPEN-only
    host: str | None = None              # database: datagen, run (neither host nor port: Milvus Lite)
    port: int | None = None
    collection: str | None = None
    data_dir: str | None = None          # --storage-root / --data-dir
    storage_type: str = "local_fs"
    seed: int | None = None              # OPEN-only (None: the edition's CLOSED value, vdb_closed_fixed)
    distribution: str | None = None      # OPEN-only
    batch_size: int | None = None        # datagen: vectors per insert; run: query vectors per request
    chunk_size: int | None = None        # datagen
    force: bool = False                  # datagen
    compact: bool | None = None          # datagen, OPEN-only
    run_mode: str | None = None          # run: timed | query_count
    runtime: int | None = None
    queries: int | None = None
    num_query_processes: int | None = None
    report_count: int = 100
    search_ef: int | None = None
    search_limit: int | None = None      # OPEN-only
    num_query_vectors: int | None = None  # OPEN-only
    # --vdb-engine diskann (OPEN): cli/vectordb_diskann.py
    pq_code_budget_ratio: float = 0.125  # datagen
    build_memory_gb: float = 4.0
    build_threads: int = 0
    beam_width: int = 4                  # run
    search_cache_budget_ratio: float = 0.0
    index_copy_dir: str | None = None

    @property
    def location(self) -> str | None:
        return self.data_dir


@dataclass(frozen=True)
class KVCacheOptions(BenchmarkOptions):
    """The topology and the cache directory; the workload flags exist only in OPEN and whatif and
    stay None unless given, so only a flag the user gave replaces an Option's value (Rules 6.6.2)."""

    cache_dir: str | None = None
    num_processes: int | None = None
    npernode: int | None = None
    kv_options: tuple[int, ...] = ()     # --option: run only these Options
    kv_model: str | None = None          # --model
    num_users: int | None = None
    duration: int | None = None
    gpu_mem_gb: float | None = None
    cpu_mem_gb: float | None = None
    generation_mode: str | None = None
    performance_profile: str | None = None
    disable_multi_turn: bool | None = None
    disable_prefix_caching: bool | None = None
    enable_rag: bool | None = None
    rag_num_docs: int | None = None
    kv_config: str | None = None         # --config
    seed: int | None = None
    trials: int | None = None
    inter_option_delay: int | None = None
