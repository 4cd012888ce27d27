"""The one table of benchmarks: for each, its name on the command line and in the results tree,
the module and class that run it (imported only when it runs, as pip's commands_dict does), the
cli module that registers its flags, what storage it can use, which commands only print their
plan, and the rule a shared data/results filesystem breaks.

The parser (cli/__init__.py), dispatch, the lifecycle and tests/test_benchmark_table.py read
this table and nothing else: adding a benchmark is one row here plus its own modules (its
Benchmark subclass, its options dataclass in benchmarks/options.py, its cli flags module and
its layout.yaml entry). This module imports nothing, so the parser can read it cheaply.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, NamedTuple

from mlpstorage_py.errors import NotAvailable

if TYPE_CHECKING:  # for the type checker only: the table imports no benchmark
    from mlpstorage_py.benchmarks.base import Benchmark


class BenchmarkRow(NamedTuple):
    """One benchmark. A NamedTuple: a dataclass would bring `inspect` into every start-up."""

    cli_name: str            # `mlpstorage <mode> <cli_name> ...`
    benchmark_type: str      # its name in the results tree, the metadata and the rules' tables
    module: str              # the module of its Benchmark subclass, imported when it runs
    class_name: str
    flags: str               # the cli module whose register(parser, mode) adds its models, commands, flags
    summary: str             # its line in `mlpstorage <mode> --help`
    description: str         # the description of its own --help
    object_storage: bool = False     # the `object` storage positional reaches its data (s3dlio)
    plan_only: tuple[str, ...] = ()  # commands that print the plan and write no leaf in any mode
    fs_rule: str = ""        # the rule CLOSED refuses a shared data/results filesystem under

    def check_storage(self, storage: str) -> None:
        """NotAvailable for `object` storage where the benchmark has none."""
        if storage == "object" and not self.object_storage:
            raise NotAvailable(f"object storage for {self.cli_name} is not part of this build; object runs are "
                               f"{object_storage_names()}")

    def load(self) -> type[Benchmark]:
        """Its Benchmark subclass; NotAvailable when this build lacks the module."""
        try:
            module = importlib.import_module(self.module)
        except ModuleNotFoundError as exc:
            if exc.name != self.module:
                raise
            raise NotAvailable(f"the {self.cli_name} benchmark's engine is not part of this build yet") from None
        found: type[Benchmark] = getattr(module, self.class_name)
        return found


BENCHMARKS: tuple[BenchmarkRow, ...] = (
    BenchmarkRow("training", "training", "mlpstorage_py.benchmarks.training", "TrainingBenchmark",
                 "mlpstorage_py.cli.training", "training workloads through DLIO (unet3d, retinanet)",
                 "Training workloads: datasize, datagen and run through DLIO under MPI.",
                 object_storage=True, plan_only=("configview",), fs_rule="3.4.2"),
    BenchmarkRow("checkpointing", "checkpointing", "mlpstorage_py.benchmarks.checkpointing", "CheckpointingBenchmark",
                 "mlpstorage_py.cli.checkpointing", "LLM checkpoint write and read (llama3 8b/70b/405b/1t)",
                 "Checkpointing workloads: write then read checkpoints across MPI ranks.",
                 object_storage=True, plan_only=("datasize", "configview"), fs_rule="4.4.2"),
    BenchmarkRow("vectordb", "vector_database", "mlpstorage_py.benchmarks.vectordb", "VectorDBBenchmark",
                 "mlpstorage_py.cli.vectordb", "vector database load and query (Milvus)",
                 "Vector database benchmark on Milvus: load + index, then timed queries with recall.",
                 fs_rule="5.4.2"),
    BenchmarkRow("kvcache", "kv_cache", "mlpstorage_py.benchmarks.kvcache", "KVCacheBenchmark",
                 "mlpstorage_py.cli.kvcache", "KV cache offload to storage (kv-cache.py per MPI rank)",
                 "KV cache benchmark: the three Options of Table KVCache-1, each --trials times, one "
                 "kv-cache.py per MPI rank.",
                 plan_only=("datasize",), fs_rule="6.4.1"),
)


def row(cli_name: str) -> BenchmarkRow:
    """The row of a benchmark by its command-line name (argparse only offers the table's)."""
    return next(r for r in BENCHMARKS if r.cli_name == cli_name)


def object_storage_names() -> str:
    """The benchmarks that take `object` storage, for the refusal of the others: `a and b`."""
    names = [r.cli_name for r in BENCHMARKS if r.object_storage]
    return ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else "".join(names)
