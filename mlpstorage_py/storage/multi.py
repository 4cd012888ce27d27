"""One rank process's object I/O when a run is given several endpoints (storage/endpoints.py), and
its figures per endpoint for the rank's progress lines (telemetry/rank_progress.py).

- per_rank: the process points s3dlio at endpoint rank mod n (AWS_ENDPOINT_URL, set before s3dlio
  makes its client) and keeps s3dlio's own calls, streaming multipart writes included; every
  request goes there, so the figures are counted here as each call completes.
- round_robin, least_connections: s3dlio's MultiEndpointStore picks the endpoint of every data
  request (PUT, GET, ranged GET); the figures are the store's own per-endpoint statistics. The few
  metadata requests (stat, list) go to endpoint rank mod n.
- no list: s3dlio alone, as before (AWS_ENDPOINT_URL), and no per-endpoint figures.

A failed request adds to its endpoint's failed count and moves no byte into the figures.
Made per process and lazily: a process that has started s3dlio's I/O runtime hangs after a fork
(storage/s3.py, call_in_child), so a DLIO rank's reader workers each make their own.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlparse

from mlpstorage_py.storage.endpoints import PER_RANK, Endpoints
from mlpstorage_py.telemetry import rank_progress

T = TypeVar("T")
READ, WRITTEN, REQUESTS, FAILED = range(4)
# The MultiEndpointStore's per-endpoint statistics, in the order of the figures.
STATS_KEYS = ("bytes_read", "bytes_written", "total_requests", "error_count")


def store_uri(url: str, bucket: str) -> str:
    """The URI s3dlio's MultiEndpointStore takes for one endpoint of a bucket: s3://host:port/bucket/."""
    parsed = urlparse(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    return f"s3://{parsed.hostname}:{port}/{bucket}/"


def split(uri: str) -> tuple[str, str]:
    """s3://bucket/key -> (bucket, key)."""
    bucket, _, key = uri[len("s3://"):].partition("/")
    return bucket, key


class ObjectIO:
    """put/get/get_range/stat of whole s3:// URIs for one rank, across the run's endpoints."""

    def __init__(self, endpoints: Endpoints | None, rank: int) -> None:
        self.endpoints, self.rank = endpoints, rank
        self._pid = 0
        self._stores: dict[str, Any] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self.figures: dict[str, list[int]] = {}

    @property
    def balanced(self) -> bool:
        return self.endpoints is not None and self.endpoints.strategy != PER_RANK

    @property
    def url(self) -> str | None:
        """per_rank: the one endpoint this rank uses."""
        return self.endpoints.for_rank(self.rank) if self.endpoints and not self.balanced else None

    def point(self) -> None:
        """This process's AWS_ENDPOINT_URL: endpoint rank mod n (per_rank: every request; balanced:
        the metadata requests), set before s3dlio makes its client; fresh figures per process."""
        if self._pid != os.getpid():
            self._pid, self._stores, self._loop = os.getpid(), {}, None
            if self.endpoints is not None:
                self.figures = {u: [0, 0, 0, 0] for u in self.endpoints.urls}
                os.environ["AWS_ENDPOINT_URL"] = self.endpoints.for_rank(self.rank)

    def s3dlio(self) -> Any:
        """s3dlio, pointed at this rank's endpoint (point)."""
        self.point()
        import s3dlio

        return s3dlio

    def _store(self, bucket: str) -> Any:
        s3 = self.s3dlio()
        store = self._stores.get(bucket)
        if store is None:
            assert self.endpoints is not None
            store = self._stores[bucket] = s3.create_multi_endpoint_store(
                [store_uri(u, bucket) for u in self.endpoints.urls], self.endpoints.strategy)
        return store

    def _await(self, request: Callable[[], Any]) -> Any:
        """The store's methods are async and need a running loop when called: call inside one."""
        async def call() -> Any:
            return await request()

        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(call())

    # -- counting -------------------------------------------------------------------------------
    def _counted(self, call: Callable[[], T], read: Callable[[T], int] | None, written: int) -> T:
        """per_rank: one request to this rank's endpoint, its bytes counted once it completed."""
        url = self.url
        if url is None:
            return call()
        entry = self.figures.setdefault(url, [0, 0, 0, 0])
        try:
            result = call()
        except Exception:
            entry[FAILED] += 1
            rank_progress.set_endpoints(self.figures)
            raise
        entry[REQUESTS] += 1
        entry[READ] += read(result) if read is not None else 0
        entry[WRITTEN] += written
        rank_progress.set_endpoints(self.figures)
        return result

    def _balanced(self, bucket: str, call: Callable[[Any], Any]) -> Any:
        """A request through the MultiEndpointStore; the figures are the store's statistics."""
        store = self._store(bucket)
        try:
            return self._await(lambda: call(store))
        finally:
            self._take_stats()

    def _take_stats(self) -> None:
        assert self.endpoints is not None
        figures = {u: [0, 0, 0, 0] for u in self.endpoints.urls}
        for store in self._stores.values():  # one per bucket
            for url, stats in zip(self.endpoints.urls, store.get_endpoint_stats(), strict=True):
                for index, key in enumerate(STATS_KEYS):
                    figures[url][index] += int(stats.get(key, 0))
        self.figures = figures
        rank_progress.set_endpoints(self.figures)

    # -- operations -------------------------------------------------------------------------------
    def put(self, uri: str, data: Any) -> None:
        """One whole object."""
        body = data if isinstance(data, bytes) else bytes(data)  # s3dlio takes bytes only
        if self.balanced:
            bucket, _ = split(uri)
            self._balanced(bucket, lambda store: store.put(uri, body))
            return
        s3 = self.s3dlio()
        self._counted(lambda: s3.put_bytes(uri, body), None, len(body))

    def get(self, uri: str) -> memoryview:
        """A whole object (one GET)."""
        if self.balanced:
            bucket, _ = split(uri)
            return memoryview(self._balanced(bucket, lambda store: store.get(uri)))
        s3 = self.s3dlio()
        return self._counted(lambda: s3.get(uri).memoryview(), len, 0)

    def get_range(self, uri: str, offset: int, length: int) -> memoryview:
        """`length` bytes from `offset` (one ranged GET)."""
        if self.balanced:
            bucket, _ = split(uri)
            return memoryview(self._balanced(bucket, lambda store: store.get_range(uri, offset, length)))
        s3 = self.s3dlio()
        return self._counted(lambda: s3.get_range(uri, offset, length).memoryview(), len, 0)

    def streamed(self, write: Callable[[], Any], nbytes: int) -> None:
        """per_rank or one endpoint: one object streamed in parts by `write` (a multipart upload),
        counted as one request of `nbytes` once it completed."""
        self._counted(write, None, nbytes)
