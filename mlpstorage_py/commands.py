"""Running a benchmark command: the benchmark's class (its row of benchmarks/table.py, imported
only when used), the history record of the results tree, and the loops, each one pass of the
lifecycle (benchmarks/lifecycle.py)."""

from __future__ import annotations

from typing import Any

from mlpstorage_py.errors import NotAvailable


def run_benchmark(args: dict[str, Any], argv: list[str], started: float) -> int:
    from mlpstorage_py.benchmarks import lifecycle, table
    from mlpstorage_py.benchmarks.base import Request
    from mlpstorage_py.results import history
    from mlpstorage_py.results.sentinel import resolve_results_dir

    name = args["benchmark"]
    row = table.row(name)
    if args.get("storage") == "object" and not row.object_storage:
        raise NotAvailable(f"object storage for {name} is not part of this build; object runs are "
                           f"{table.object_storage_names()}")
    benchmark_class = row.load()
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
