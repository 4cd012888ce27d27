"""S3 object storage through s3dlio: URI checks, the store the checkpoint engine writes through,
the reachability check every object run makes before its timed work, and the record of the
storage environment a run saw (Rules 1.2).

The endpoint and credentials come only from the standard AWS variables, which s3dlio reads
itself; this module never copies a credential anywhere.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlparse

from mlpstorage_py.errors import ConfigurationError, TimeoutExpired, UsageError
from mlpstorage_py.rules.tables import storage_env
from mlpstorage_py.storage import WriteResult, check_block

if TYPE_CHECKING:
    from mlpstorage_py.storage.multi import ObjectIO

SCHEME = "s3://"
# S3 bucket naming rules: 3-63 lowercase letters, digits, dots and hyphens.
BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
KEY_SEGMENT = re.compile(r"^[A-Za-z0-9._+=@-]+$")
REACH_TIMEOUT_S = 60.0
T = TypeVar("T")
# s3dlio imports its optional torch/jax/tensorflow integrations (seconds); a metadata call needs none.
_CHILD_CALL = ("import json, sys; sys.modules.update(torch=None, jax=None, tensorflow=None); import s3dlio; "
               "print(json.dumps(getattr(s3dlio, sys.argv[1])(*json.loads(sys.argv[2]))))")


@dataclass(frozen=True)
class ObjectUri:
    """s3://bucket/prefix with the prefix normalised (no leading, trailing or doubled slash)."""

    bucket: str
    prefix: str = ""

    def __str__(self) -> str:
        return f"{SCHEME}{self.bucket}/{self.prefix}" if self.prefix else f"{SCHEME}{self.bucket}"

    def child(self, *names: str) -> ObjectUri:
        return ObjectUri(self.bucket, "/".join(p for p in (self.prefix, *names) if p))

    @property
    def folder(self) -> str:
        """The URI with a trailing slash, as listing a prefix needs."""
        return f"{self}/"


def is_object_uri(text: str | None) -> bool:
    return bool(text) and str(text).startswith(SCHEME)


def parse_uri(text: str, flag: str) -> ObjectUri:
    """An s3://bucket/prefix argument, or a one-line usage error naming the flag."""
    if not is_object_uri(text):
        raise UsageError(f"{flag} must be an s3://bucket/prefix URI for object storage, got {text!r}")
    bucket, _, prefix = text[len(SCHEME):].partition("/")
    if not BUCKET.match(bucket) or ".." in bucket:
        raise UsageError(f"{flag}: {bucket!r} is not a valid S3 bucket name (3-63 lowercase letters, digits, '.' and '-')")
    segments = [s for s in prefix.split("/") if s]
    bad = [s for s in segments if not KEY_SEGMENT.match(s) or s in (".", "..")]
    if bad:
        raise UsageError(f"{flag}: prefix segment {bad[0]!r} is not allowed (letters, digits and . _ + = @ - only)")
    return ObjectUri(bucket, "/".join(segments))


def library() -> dict[str, str]:
    """The client library that did the object I/O, for provenance.json's storage_library."""
    try:
        return {"name": "s3dlio", "version": metadata.version("s3dlio")}
    except metadata.PackageNotFoundError:
        return {"name": "s3dlio", "version": "unknown"}


def _require_installed() -> None:
    if importlib.util.find_spec("s3dlio") is None:
        raise ConfigurationError("object storage needs s3dlio, which is not installed; run `make install`")


def _s3dlio() -> Any:
    _require_installed()
    import s3dlio

    return s3dlio


def _as_oserror(call: Callable[..., T], *args: Any) -> T:
    """s3dlio reports failures as RuntimeError; engines handle storage failures as OSError."""
    try:
        return call(*args)
    except RuntimeError as exc:
        text = str(exc)
        if "NotFound" in text or "NoSuchKey" in text:
            raise FileNotFoundError(text) from None
        raise OSError(text) from None


class S3Store:
    """Store implementation over s3:// URIs: multipart PUTs of stamped blocks, ranged GETs.
    With several endpoints (storage/multi.py), data requests go where the strategy sends them and
    are counted per endpoint; a balanced strategy PUTs each object whole (s3dlio's store has no
    streaming writer)."""

    cached_locally = False  # reads go over the network; no host page cache sits in between

    def __init__(self, io: ObjectIO | None = None) -> None:
        from mlpstorage_py.storage.buffers import BlockBuffers  # numpy: only where bytes move
        from mlpstorage_py.storage.multi import ObjectIO

        self.io = io or ObjectIO(None, 0)
        self._s3 = self.io.s3dlio() if io is not None else _s3dlio()
        self._buffers = BlockBuffers()

    def write(self, path: str, nbytes: int, *, block_size: int, fsync: bool) -> WriteResult:
        """One object of ``nbytes``, streamed in ``block_size`` parts. A PUT is durable once it
        completes, so there is no fsync to make: fsync_calls stays 0 whatever ``fsync`` says."""
        check_block(block_size)
        if nbytes < 0:
            raise ValueError(f"cannot write a negative size ({nbytes}) to {path}")
        if nbytes == 0 or self.io.balanced:
            _as_oserror(self.io.put, path, self._whole(nbytes, block_size))
            return WriteResult(nbytes, 0)
        def stream() -> None:
            writer = self._s3.create_s3_writer(path, self._s3.PyWriterOptions())
            done = 0
            while done < nbytes:
                chunk = min(block_size, nbytes - done)
                writer.write_chunk(self._buffers.next_block(block_size)[:chunk])
                done += chunk
            writer.finalize()

        _as_oserror(self.io.streamed, stream, nbytes)  # counted once the object is complete
        return WriteResult(nbytes, 0)

    def _whole(self, nbytes: int, block_size: int) -> bytes:
        """The object in memory, built of stamped blocks as a streamed one is."""
        whole = bytearray(nbytes)
        for start in range(0, nbytes, block_size):
            chunk = min(block_size, nbytes - start)
            whole[start:start + chunk] = self._buffers.next_block(block_size)[:chunk]
        return bytes(whole)  # s3dlio takes bytes only

    def read(self, path: str, *, block_size: int) -> int:
        """Ranged GETs of ``block_size`` over the whole object; returns the bytes received."""
        check_block(block_size)
        size = self.size(path)
        total = 0
        while total < size:
            got = len(_as_oserror(self.io.get_range, path, total, min(block_size, size - total)))
            if got == 0:
                break
            total += got
        return total

    def size(self, path: str) -> int:
        return int(_as_oserror(self._s3.stat, path)["size"])

    def exists(self, path: str) -> bool:
        return bool(self._s3.exists(path))

    def remove(self, path: str) -> None:
        _as_oserror(self._s3.delete, path)

    def join(self, folder: str, *names: str) -> str:
        return "/".join([folder.rstrip("/"), *(n.strip("/") for n in names if n)])

    def make_dirs(self, path: str) -> None:
        """Prefixes exist once an object is written below them."""

    def subfolders(self, folder: str) -> list[str]:
        listed = _as_oserror(self._s3.list, folder.rstrip("/") + "/", False)
        return [uri.rstrip("/").rsplit("/", 1)[-1] for uri in listed if uri.endswith("/")]

    def evict(self, path: str) -> None:
        """Nothing to evict: object reads do not pass through this host's page cache."""


def call_in_child(function: str, *args: Any, timeout: float | None = None, endpoint: str | None = None) -> Any:
    """s3dlio.<function>(*args) with JSON-able arguments and result, run in a child process.

    A process that has started s3dlio's I/O runtime hangs in its first request after a fork, so
    processes that fork later (an MPI rank before its data-loader workers, the tool before mpirun)
    keep s3dlio out; the child also reads the endpoint afresh and can be killed at ``timeout``.
    s3dlio 0.9.112's list() and stat() also hold the GIL until the answer comes, stalling every
    other thread of the caller meanwhile (an endpoint served in-process, as in the tests, never
    answers). ``endpoint``: this URL instead of AWS_ENDPOINT_URL. Raises RuntimeError with
    s3dlio's message, or subprocess.TimeoutExpired."""
    env = None if endpoint is None else {**os.environ, "AWS_ENDPOINT_URL": endpoint}
    done = subprocess.run([sys.executable, "-c", _CHILD_CALL, function, json.dumps(args)],
                          capture_output=True, text=True, check=False, timeout=timeout, env=env)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or [f"exit {done.returncode}"]
        raise RuntimeError(lines[-1].removeprefix("RuntimeError: "))  # s3dlio's message, as in-process
    return json.loads(done.stdout)


def check_reachable(uri: ObjectUri, timeout: float = REACH_TIMEOUT_S, endpoints: tuple[str, ...] = ()) -> None:
    """Before any timed work: the endpoint (each of ``endpoints``, all at once) answers and the
    bucket exists there, or a one-line error naming it (a refused connection and a missing bucket
    are configuration errors; silence past ``timeout`` is a timeout, never a hang)."""
    if endpoints:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(16, len(endpoints))) as pool:
            failures = [f for f in pool.map(lambda url: _reach_error(uri, timeout, url), endpoints) if f]
        if failures:
            raise failures[0]
        return
    error = _reach_error(uri, timeout, None)
    if error is not None:
        raise error


def _reach_error(uri: ObjectUri, timeout: float, endpoint_url: str | None) -> Exception | None:
    """Why ``uri`` cannot be listed through the endpoint (AWS_ENDPOINT_URL where None), or None."""
    endpoint = endpoint_url or os.environ.get("AWS_ENDPOINT_URL", "")
    if endpoint and endpoint_url is None:
        parsed = urlparse(endpoint)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            return ConfigurationError(f"AWS_ENDPOINT_URL {endpoint!r} is not an http(s)://host[:port] URL")
    where = endpoint or "the default AWS endpoint"
    _require_installed()
    try:
        call_in_child("list", uri.folder, False, timeout=timeout, endpoint=endpoint_url)
        return None
    except subprocess.TimeoutExpired:
        return TimeoutExpired(f"the S3 endpoint {where} did not answer a listing of {uri.folder} within {timeout:.0f} s")
    except RuntimeError as exc:
        text = str(exc)
    if "NoSuchBucket" in text or "bucket does not exist" in text:
        return ConfigurationError(f"bucket {uri.bucket!r} does not exist at {where}; create it first")
    if "AccessDenied" in text or "InvalidAccessKeyId" in text or "SignatureDoesNotMatch" in text:
        return ConfigurationError(f"the S3 endpoint {where} refused the credentials for bucket {uri.bucket!r} "
                                  "(check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)")
    return ConfigurationError(f"cannot reach the S3 endpoint {where} for {uri.folder}: {text.splitlines()[0][:200]}")


def environment_record(environ: Mapping[str, str]) -> dict[str, Any]:
    """What a run records of the storage environment (Rules 1.2): connection variables by name
    only, Storage-backend table variables by name and value (they tune measured behaviour), and
    the names of backend-prefixed variables the table does not list (undeclarable)."""
    table = storage_env()
    backend = table["storage_backend"]
    prefixes = tuple(table["backend_prefixes"])
    return {
        "connection_variables": sorted(n for n in table["connection"] if n in environ),
        "storage_backend_env": {n: environ[n] for n in sorted(backend) if n in environ},
        "undeclared_storage_env": sorted(n for n in environ if n.startswith(prefixes) and n not in backend),
    }
