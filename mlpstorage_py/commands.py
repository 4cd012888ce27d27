"""Running a benchmark command: the benchmark's class (imported only when used), the history
record of the results tree, and the loops, each one pass of the lifecycle (benchmarks/lifecycle.py)."""

from __future__ import annotations

from typing import Any, Callable

from mlpstorage_py.errors import NotAvailable


def _training() -> type:
    from mlpstorage_py.benchmarks.training import TrainingBenchmark
    return TrainingBenchmark


def _checkpointing() -> type:
    from mlpstorage_py.benchmarks.checkpointing import CheckpointingBenchmark
    return CheckpointingBenchmark


def _vectordb() -> type:
    from mlpstorage_py.benchmarks.vectordb import VectorDBBenchmark
    return VectorDBBenchmark


def _kvcache() -> type:
    from mlpstorage_py.benchmarks.kvcache import KVCacheBenchmark
    return KVCacheBenchmark


# Benchmark name on the command line -> its class, imported only when used.
BENCHMARKS: dict[str, Callable[[], type]] = {"training": _training, "checkpointing": _checkpointing,
                                             "vectordb": _vectordb, "kvcache": _kvcache}
# Benchmarks whose data can live in an S3 bucket (the `object` storage positional, via s3dlio).
OBJECT_BENCHMARKS = ("training", "checkpointing")


def run_benchmark(args: dict[str, Any], argv: list[str], started: float) -> int:
    from mlpstorage_py.benchmarks import lifecycle
    from mlpstorage_py.benchmarks.base import Request
    from mlpstorage_py.results import history
    from mlpstorage_py.results.sentinel import resolve_results_dir

    name = args["_benchmark"]
    if args.get("storage") == "object" and name not in OBJECT_BENCHMARKS:
        raise NotAvailable(f"object storage for {name} is not part of this build; object runs are training and checkpointing")
    try:
        benchmark_class = BENCHMARKS[name]()
    except ModuleNotFoundError as exc:
        if exc.name != f"mlpstorage_py.benchmarks.{name}":
            raise
        raise NotAvailable(f"the {name} benchmark's engine is not part of this build yet") from None
    args["_started_at"] = started
    if args["mode"] != "whatif":
        results_dir, _ = resolve_results_dir(args.get("results_dir"))
        if (results_dir / "mlperf-results.yaml").is_file():
            history.record(results_dir, argv)
    status = 0
    for _ in range(args.get("loops") or 1):
        request = Request(mode=args["mode"], benchmark=name, model=args["model"], command=args["command"],
                          storage=args.get("storage") or "file", args=args)
        status = lifecycle.run(benchmark_class(request))
    return status
