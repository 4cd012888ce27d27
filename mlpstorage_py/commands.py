"""Running a benchmark command: the history record of the results tree, and the loops, each one
pass of the lifecycle (benchmarks/lifecycle.py) over the typed request the CLI built."""

from __future__ import annotations

from typing import Any

from mlpstorage_py.benchmarks.base import Request


def run_benchmark(benchmark_class: type, request: Request[Any], argv: list[str]) -> int:
    """Run the request --loops times (a new benchmark object, and so a new leaf, each time)."""
    from mlpstorage_py.benchmarks import lifecycle
    from mlpstorage_py.results import history
    from mlpstorage_py.results.sentinel import resolve_results_dir

    if request.mode != "whatif":
        results_dir, _ = resolve_results_dir(request.results_dir)
        if (results_dir / "mlperf-results.yaml").is_file():
            history.record(results_dir, argv)
    status = 0
    for _ in range(request.loops):
        status = lifecycle.run(benchmark_class(request))
    return status
