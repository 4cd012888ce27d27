"""Per-host facts gathered through the MPI launch itself (one rank per host), so sizing and
metadata describe the clients that run the benchmark, not only the host that launched it.

Run as: <mpirun> -n H --host h1:1,... python -m mlpstorage_py.launch.hostinfo OUT.json
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from mlpstorage_py.errors import BenchmarkFailed, TimeoutExpired
from mlpstorage_py.launch.mpi import MpiOptions, mpi_command
from mlpstorage_py.results.host import meminfo_bytes

TIMEOUT_S = 300


def local_facts() -> dict[str, Any]:
    return {"hostname": socket.gethostname(), "memory_total_bytes": meminfo_bytes(),
            "cpu_count": os.cpu_count()}


def gather(opts: MpiOptions, results_dir: Path) -> list[dict[str, Any]]:
    """Launch one rank on every host and return each host's facts (hostname-deduplicated)."""
    hosts = [h.split(":")[0] for h in opts.hosts]
    one_each = MpiOptions(hosts=hosts, mpi_bin=opts.mpi_bin, oversubscribe=opts.oversubscribe,
                          allow_run_as_root=opts.allow_run_as_root, extra=opts.extra)
    root = results_dir / ".mlps" / "scratch"
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="hostinfo-", dir=root) as tmp:
        out = Path(tmp) / "hosts.json"
        argv = mpi_command(one_each, len(hosts), [sys.executable, "-m", "mlpstorage_py.launch.hostinfo", str(out)])
        try:
            done = subprocess.run(argv, cwd=tmp, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            raise TimeoutExpired(f"collecting host information over MPI took more than {TIMEOUT_S} s on {', '.join(hosts)}") from None
        if done.returncode != 0 or not out.is_file():
            raise BenchmarkFailed(f"collecting host information over MPI failed (exit {done.returncode}): "
                                  f"{(done.stderr.strip().splitlines() or ['no output'])[-1][:300]}")
        return json.loads(out.read_text(encoding="utf-8"))


def main(out: str) -> None:
    from mpi4py import MPI

    facts = MPI.COMM_WORLD.gather(local_facts(), root=0)
    if MPI.COMM_WORLD.Get_rank() == 0:
        unique = {f["hostname"]: f for f in facts}
        Path(out).write_text(json.dumps(list(unique.values())), encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1])
