"""Byte-counting TCP proxies: several S3 endpoints (gateways) in front of one moto server, each its
own process on its own loopback port, so a test counts every endpoint's bytes from outside the
tool and can kill one gateway mid-run.

    python tcp_proxy.py LISTEN_PORT TARGET_PORT COUNTS_FILE

The proxy keeps {"up", "down", "connections"} in COUNTS_FILE while they change and writes the
final counts when it gets SIGTERM (and exits); `Gateways` starts n of them and reads their
counts after stopping them.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, counts: dict[str, int], key: str) -> None:
    try:
        while data := await reader.read(1 << 16):
            counts[key] += len(data)
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def _serve(listen: int, target: int, out: Path) -> None:
    counts = {"up": 0, "down": 0, "connections": 0}

    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        counts["connections"] += 1
        try:
            server_r, server_w = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(_pipe(client_r, server_w, counts, "up"), _pipe(server_r, client_w, counts, "down"))

    def dump() -> None:
        tmp = Path(str(out) + ".tmp")
        tmp.write_text(json.dumps(counts))
        os.replace(tmp, out)

    async def live() -> None:  # what a test watches while the run goes on (final counts: at SIGTERM)
        said = dict(counts)
        while True:
            await asyncio.sleep(0.1)
            if counts != said:
                said = dict(counts)
                dump()

    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    server = await asyncio.start_server(handle, "127.0.0.1", listen)
    dump()
    Path(str(out) + ".ready").write_text("ok")
    ticker = asyncio.create_task(live())
    async with server:
        await stop.wait()
    ticker.cancel()
    dump()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Gateways:
    """n proxies in front of the S3 server at `target` (a URL); .urls are the endpoints."""

    def __init__(self, target_url: str, count: int, folder: Path) -> None:
        self.target = int(target_url.rsplit(":", 1)[1])
        self.folder = folder
        self.ports = [free_port() for _ in range(count)]
        self.urls = [f"http://127.0.0.1:{p}" for p in self.ports]
        self.procs: list[subprocess.Popen] = []

    def start(self) -> Gateways:
        for port in self.ports:
            out = self.folder / f"gateway-{port}.json"
            self.procs.append(subprocess.Popen([sys.executable, __file__, str(port), str(self.target), str(out)],
                                               stdin=subprocess.DEVNULL))
        for port, proc in zip(self.ports, self.procs, strict=True):
            ready = self.folder / f"gateway-{port}.json.ready"
            while not ready.exists():  # a readiness handshake, not a timing margin
                assert proc.poll() is None, f"proxy on {port} exited {proc.returncode}"
                time.sleep(0.05)
        return self

    def seen(self, index: int) -> dict[str, int]:
        """Gateway `index`'s counts so far (written every 0.1 s while they change)."""
        return json.loads((self.folder / f"gateway-{self.ports[index]}.json").read_text())

    def freeze(self, index: int) -> None:
        """The gateway stops answering: its process is stopped, its port still accepts TCP."""
        self.procs[index].send_signal(signal.SIGSTOP)

    def kill(self, index: int) -> None:
        """The gateway dies: its port refuses every connection from now on."""
        self.procs[index].kill()
        self.procs[index].wait()

    def stop(self) -> list[dict[str, int] | None]:
        """Stop every proxy still running; their counts in order (None for a killed one)."""
        counts: list[dict[str, int] | None] = []
        for port, proc in zip(self.ports, self.procs, strict=True):
            out = self.folder / f"gateway-{port}.json"
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=30)
            counts.append(json.loads(out.read_text()) if proc.returncode == 0 else None)
        return counts

    def __enter__(self) -> Gateways:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()  # a stopped one too
                proc.wait()


if __name__ == "__main__":
    asyncio.run(_serve(int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])))
