"""Several S3 endpoints (gateways) in front of one object store: the list a run is given, the
strategy that spreads its requests, what the leaf records of them, and the probe that names an
endpoint that refuses or stops answering.

Where the list comes from, first found wins: `--s3-endpoints URL ...`, `--s3-endpoints-file
PATH` (one URL a line, `#` comments), `S3_ENDPOINT_URIS` (comma-separated, the working group's
name), `S3_ENDPOINT_FILE`. The strategy: `--s3-endpoint-strategy`, else
`S3_LOAD_BALANCE_STRATEGY`, else per_rank (DEFAULT_STRATEGY, why below).

Strategies (never a balancer of ours):
- round_robin, least_connections: s3dlio's MultiEndpointStore picks the endpoint of every request
  (storage/multi.py);
- per_rank: rank i sends every request to endpoint i mod n, as the working group's MPI
  distribution does. It is the default because it is the one assignment every engine performs
  (ours, DLIO 2.0.0 with our plug-ins, and the working group's fork, which knows no other), and it
  keeps multipart streaming writes (the MultiEndpointStore PUTs whole objects from memory).

An endpoint URL is http(s)://host[:port] only: user information (a credential) in it is refused,
so what the leaf records is host names and ports, never a secret.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from mlpstorage_py.errors import UsageError

ENV_LIST = "S3_ENDPOINT_URIS"
ENV_FILE = "S3_ENDPOINT_FILE"
ENV_STRATEGY = "S3_LOAD_BALANCE_STRATEGY"
ROUND_ROBIN, LEAST_CONNECTIONS, PER_RANK = "round_robin", "least_connections", "per_rank"
STRATEGIES = (ROUND_ROBIN, LEAST_CONNECTIONS, PER_RANK)
BALANCED = (ROUND_ROBIN, LEAST_CONNECTIONS)  # s3dlio's MultiEndpointStore chooses per request
DEFAULT_STRATEGY = PER_RANK
MAX_ENDPOINTS = 32  # s3dlio's MAX_ENDPOINTS
PROBE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Endpoints:
    """The endpoint list of one run, its strategy, and where each came from (recorded)."""

    urls: tuple[str, ...]
    strategy: str
    source: str
    strategy_source: str

    def for_rank(self, rank: int) -> str:
        """per_rank: the endpoint rank `rank` uses."""
        return self.urls[rank % len(self.urls)]

    def ranks_of(self, processes: int) -> dict[str, list[int]]:
        """per_rank: the ranks each endpoint serves."""
        return {url: [r for r in range(processes) if self.for_rank(r) == url] for url in self.urls}

    def record(self) -> dict[str, object]:
        """What whatif prints and the leaf records before anything runs."""
        return {"endpoints": list(self.urls), "strategy": self.strategy, "source": self.source,
                "strategy_source": self.strategy_source}

    def rank_args(self) -> list[str]:
        """The options an engine's rank program takes (checkpoint engine, dlio_rank)."""
        return ["--s3-endpoints", ",".join(self.urls), "--s3-strategy", self.strategy]

    def describe(self, processes: int) -> list[str]:
        """The plan's lines (whatif and the log)."""
        lines = [f"object endpoints ({len(self.urls)}, from {self.source}; strategy {self.strategy}, "
                 f"from {self.strategy_source}):"]
        ranks = self.ranks_of(processes) if self.strategy == PER_RANK else {}
        for url in self.urls:
            served = f"  ranks {_ranks_text(ranks[url])}" if self.strategy == PER_RANK else ""
            lines.append(f"  {url}{served}")
        return lines


def _ranks_text(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks[:8])) + (f" ... ({len(ranks)} ranks)" if len(ranks) > 8 else "") if ranks else "none"


def check_url(text: str, where: str) -> str:
    """http(s)://host[:port] with nothing else, normalised; a one-line usage error otherwise."""
    raw = text.strip()
    parsed = urlparse(raw)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise UsageError(f"{where}: {raw!r} is not an http(s)://host[:port] endpoint URL")
    if parsed.username is not None or parsed.password is not None or "@" in parsed.netloc:
        raise UsageError(f"{where}: an endpoint URL must not carry credentials; set AWS_ACCESS_KEY_ID and "
                         "AWS_SECRET_ACCESS_KEY instead")
    if parsed.path not in ("", "/") or parsed.query or parsed.fragment or parsed.params:
        raise UsageError(f"{where}: {raw!r} has a path or query; give the endpoint only (http(s)://host[:port])")
    try:
        port = parsed.port
    except ValueError:
        raise UsageError(f"{where}: {raw!r} has an invalid port") from None
    host = f"[{parsed.hostname}]" if ":" in parsed.hostname else parsed.hostname
    return f"{parsed.scheme}://{host}" + (f":{port}" if port is not None else "")


def read_file(path: str, where: str) -> list[str]:
    """One URL a line; blank lines and `#` comments skipped."""
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{where} {path}: cannot read it ({exc.strerror or exc})") from None
    return [line.split("#", 1)[0].strip() for line in text.splitlines() if line.split("#", 1)[0].strip()]


def resolve(cli_urls: list[str] | None, cli_file: str | None, cli_strategy: str | None,
            environ: Mapping[str, str] | None = None) -> Endpoints | None:
    """The run's endpoint list, or None where none is given (one endpoint: AWS_ENDPOINT_URL)."""
    env = os.environ if environ is None else environ
    if cli_urls:
        source, raw = "--s3-endpoints", [u for item in cli_urls for u in item.split(",") if u.strip()]
    elif cli_file:
        source, raw = f"--s3-endpoints-file {cli_file}", read_file(cli_file, "--s3-endpoints-file")
    elif env.get(ENV_LIST, "").strip():
        source, raw = ENV_LIST, [u for u in env[ENV_LIST].split(",") if u.strip()]
    elif env.get(ENV_FILE, "").strip():
        source, raw = f"{ENV_FILE} {env[ENV_FILE]}", read_file(env[ENV_FILE], ENV_FILE)
    else:
        if cli_strategy:
            raise UsageError("--s3-endpoint-strategy needs an endpoint list (--s3-endpoints, --s3-endpoints-file or "
                             f"{ENV_LIST})")
        return None
    urls = tuple(check_url(u, source.split()[0]) for u in raw)
    if not urls:
        raise UsageError(f"{source} lists no endpoint")
    if len(urls) > MAX_ENDPOINTS:
        raise UsageError(f"{source} lists {len(urls)} endpoints; s3dlio takes at most {MAX_ENDPOINTS}")
    repeated = sorted({u for u in urls if urls.count(u) > 1})
    if repeated:
        raise UsageError(f"{source} lists {repeated[0]} more than once")
    if cli_strategy:
        strategy, strategy_source = cli_strategy, "--s3-endpoint-strategy"
    elif env.get(ENV_STRATEGY, "").strip():
        strategy, strategy_source = env[ENV_STRATEGY].strip(), ENV_STRATEGY
    else:
        strategy, strategy_source = DEFAULT_STRATEGY, "the default"
    if strategy not in STRATEGIES:
        raise UsageError(f"{strategy_source}: {strategy!r} is not one of {', '.join(STRATEGIES)}")
    return Endpoints(urls, strategy, source, strategy_source)


def from_rank_args(urls: str, strategy: str) -> Endpoints:
    """The list as a rank program receives it (Endpoints.rank_args), checked again."""
    checked = tuple(check_url(u, "--s3-endpoints") for u in urls.split(",") if u.strip())
    if not checked or strategy not in STRATEGIES:
        raise UsageError(f"bad endpoint options: {urls!r}, strategy {strategy!r}")
    return Endpoints(checked, strategy, "the launching mlpstorage", "the launching mlpstorage")


def answers(url: str, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """None when the endpoint answers an HTTP request within `timeout`; else why not, in words
    (a refused connection, or silence: a gateway that accepts TCP but never answers)."""
    parsed = urlparse(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        with socket.create_connection((parsed.hostname, port), timeout=timeout) as sock:
            if parsed.scheme == "https":
                return None  # a TLS handshake would need the CA bundle: a connection is the answer
            sock.settimeout(timeout)
            sock.sendall(f"HEAD / HTTP/1.1\r\nHost: {parsed.netloc}\r\nConnection: close\r\n\r\n".encode())
            first = sock.recv(64)
    except ConnectionRefusedError:
        return "refused the connection"
    except TimeoutError:
        return f"did not answer within {timeout:.0f} s"
    except OSError as exc:
        return f"unreachable ({exc.strerror or exc})"
    return None if first.startswith(b"HTTP/") else "closed the connection without an HTTP answer"


def unanswered(urls: tuple[str, ...] | list[str], timeout: float = PROBE_TIMEOUT_S) -> dict[str, str]:
    """Every endpoint probed at once (answers); those that failed, with why."""
    found: dict[str, str | None] = {}

    def probe(url: str) -> None:
        found[url] = answers(url, timeout)

    threads = [threading.Thread(target=probe, args=(u,), daemon=True) for u in urls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout + 1)
    return {u: why or "no answer" for u in urls if (why := found.get(u, "no answer")) is not None}


__all__ = ["BALANCED", "DEFAULT_STRATEGY", "ENV_LIST", "Endpoints", "PER_RANK", "STRATEGIES", "answers",
           "check_url", "resolve", "unanswered"]
