"""Several S3 endpoints for an `object` training or checkpointing run, on the benchmark's side:
the list and strategy decided with the plan (refused where the engine cannot honour them), what
the ranks are told, the per-endpoint figures their progress lines carried into the leaf, and an
endpoint that refused or stopped answering named in the run's one-line error (exit 15).

The leaf records it all in engine_parameters.object_endpoints (ManPage, Object endpoints):
    {"endpoints": [...], "strategy", "source", "strategy_source",
     "per_endpoint": [{"endpoint", "read_bytes", "written_bytes", "requests", "failed_requests",
                       "ranks", "bytes_share"}], "counted_by": ..., "failed": {url: why}}
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator
from typing import Any

from mlpstorage_py.benchmarks.base import Plan, Request
from mlpstorage_py.errors import BenchmarkFailed, EndpointFailed, GateRefused, TimeoutExpired, UsageError
from mlpstorage_py.results.logs import log
from mlpstorage_py.storage import endpoints as eps
from mlpstorage_py.storage.endpoints import Endpoints

KEY = "object_endpoints"
# What counted the figures, as the leaf says.
COUNTED_BY = ("the ranks: each process's completed data requests per endpoint, on its progress lines "
              "(per_rank: counted as each call completed; round_robin, least_connections: s3dlio's "
              "MultiEndpointStore statistics)")


def resolve(req: Request) -> Endpoints | None:
    """The run's endpoints from its flags or the environment; flags on a file run are refused
    (an S3_ENDPOINT_URIS left in the environment of a file run is not the run's)."""
    urls, path, strategy = req.s3_endpoints, req.s3_endpoints_file, req.s3_endpoint_strategy
    if req.storage != "object":
        if urls or path or strategy:
            raise UsageError("--s3-endpoints, --s3-endpoints-file and --s3-endpoint-strategy apply to `object` runs")
        return None
    return eps.resolve(list(urls) if urls else None, path, strategy)


def plan(req: Request, plan: Plan, *, native_fork: bool = False,
         largest_object: int = 0, client_memory_gb: float | None = None, ranks_per_host: int = 1) -> Endpoints | None:
    """Decide the endpoints with the plan, recorded in its engine_parameters (report() says them).

    native_fork: the working group's DLIO reads S3_ENDPOINT_URIS itself, one endpoint per rank,
    and balances nothing: another strategy is refused rather than silently not applied.
    largest_object: a balanced strategy PUTs each object whole from memory (the MultiEndpointStore
    streams nothing, and takes bytes: two copies while one is built), so ranks_per_host x 2 of
    the largest must fit in half a client's memory."""
    found = resolve(req)
    if found is None:
        return None
    if native_fork and found.strategy != eps.PER_RANK:
        raise UsageError(f"the working group's DLIO assigns endpoints per rank only (S3_ENDPOINT_URIS, rank mod n); "
                         f"it cannot apply {found.strategy}: use --s3-endpoint-strategy per_rank, or this "
                         "environment's DLIO with our s3dlio plug-ins")
    if found.strategy in eps.BALANCED and largest_object and client_memory_gb:
        need = 2 * largest_object * ranks_per_host
        if need > client_memory_gb * 2 ** 30 / 2:
            raise GateRefused(f"{found.strategy} PUTs each object whole from memory: {ranks_per_host} rank(s) per host x "
                              f"2 x {largest_object / 2 ** 30:,.2f} GiB objects exceed half of a {client_memory_gb:g} GiB "
                              "client; use --s3-endpoint-strategy per_rank (streamed multipart writes)")
    # The tool's own requests (listings, the datagen manifest) and the ranks' metadata requests
    # read AWS_ENDPOINT_URL: without one, the first listed endpoint, never AWS itself.
    os.environ.setdefault("AWS_ENDPOINT_URL", found.urls[0])
    plan.engine_parameters[KEY] = found.record()
    return found


def report(found: Endpoints | None, processes: int) -> list[str]:
    """The plan's lines about the endpoints (whatif prints them; the run logs them)."""
    if found is None:
        return []
    lines = found.describe(processes)
    for line in lines:
        log.info(line)
    return lines


def ranks_per_host(processes: int, hosts: int) -> int:
    return math.ceil(processes / max(1, hosts))


def failure(found: Endpoints, exc: Exception, dead: dict[str, str]) -> Exception:
    """The run's failure with the endpoints that refuse or do not answer (`dead`, from
    endpoints.unanswered) named (exit 15), or the failure itself where every endpoint answers."""
    if not dead:
        return exc
    named = "; ".join(f"{url} {why}" for url, why in dead.items())
    return EndpointFailed(f"object endpoint(s) failed: {named} ({len(dead)} of {len(found.urls)}): {exc}")


def per_endpoint(found: Endpoints, totals: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Every listed endpoint's figures (zeros where no rank reported one), with its share of the bytes."""
    rows = [{"endpoint": url, **{k: 0 for k in ("read_bytes", "written_bytes", "requests", "failed_requests")},
             "ranks": [], **totals.get(url, {})} for url in found.urls]
    moved = sum(r["read_bytes"] + r["written_bytes"] for r in rows)
    for row in rows:
        row["bytes_share"] = round((row["read_bytes"] + row["written_bytes"]) / moved, 4) if moved else None
    return rows


@contextlib.contextmanager
def watched(found: Endpoints | None, plan: Plan) -> Iterator[None]:
    """Around an engine job: its per-endpoint figures into the leaf whatever the outcome, and a
    failure or stall with an endpoint down named as the endpoint's (EndpointFailed)."""
    if found is None:
        yield
        return
    record = plan.engine_parameters.setdefault(KEY, found.record())
    try:
        yield
    except (BenchmarkFailed, TimeoutExpired) as exc:
        dead = eps.unanswered(found.urls)
        if not dead:
            raise
        record["failed"] = dead
        raise failure(found, exc, dead) from exc
    finally:
        watch = plan.startup.watch if plan.startup is not None else None
        totals = watch.endpoint_totals() if watch is not None else {}
        record.update(per_endpoint=per_endpoint(found, totals), counted_by=COUNTED_BY)
        if not totals:
            record["counted_by"] = "not reported: no rank sent per-endpoint figures"
        for row in record["per_endpoint"]:
            log.info(f"endpoint {row['endpoint']}: {row['written_bytes']:,} B written, {row['read_bytes']:,} B read, "
                     f"{row['requests']:,} requests, {row['failed_requests']:,} failed")
