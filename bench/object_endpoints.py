"""Three S3 endpoints against one: the same checkpoint write (our engine, 3 ranks, per_rank) through
three byte-counting gateways in front of one moto server, and through one of them, interleaved
rounds with their order turning. Prints per round each side's save throughput (the engine's own
timed span, summary.json) and the CPU seconds moto's server process used (/proc/<pid>/stat), and
the median ratio three / one. moto on this machine is CPU-bound, so the goal is no loss against
one endpoint (>= 0.9), not a gain the machine cannot show. No verdict while others load the machine:
a 1-minute load average above 0.75 x the cores before the bench (its own ranks, moto and the
gateways load it once it runs) withholds it, the figures printed all the same.

    .venv/bin/python bench/object_endpoints.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from tcp_proxy import Gateways, free_port

BIN = Path(sys.executable).parent / "mlpstorage"
GOAL = 0.9
LOAD_PER_CORE = 0.75
LLAMA = ["model.num_layers=2", "model.hidden_size=256", "model.ffn_hidden_size=512", "model.vocab_size=4096",
         "model.num_attention_heads=8", "model.num_kv_heads=2", "checkpoint.time_between_checkpoints=0"]
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process and its waited-for children (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(v) for v in fields[11:15]) / TICK


def moto(port: int, env: dict[str, str]) -> subprocess.Popen:
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while True:  # its port answering is the readiness handshake
        assert server.poll() is None, "moto_server exited"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server
        except OSError:
            time.sleep(0.1)


def run(env: dict[str, str], results: str, bucket: str, urls: list[str]) -> float:
    """One checkpoint write; its save throughput in GiB/s."""
    done = subprocess.run([str(BIN), "open", "checkpointing", "llama3-8b", "run", "object", "-np", "3", "-at", "b200",
                           "-cm", "8", "-cf", f"s3://{bucket}/c", "-rd", results, "-sn", "bench", "-ncw", "3", "-ncr",
                           "0", "--oversubscribe", "--s3-endpoints", *urls, "--params", *LLAMA],
                          env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"checkpoint run failed (exit {done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
    summary = max(Path(results).rglob("summary.json"), key=lambda p: p.stat().st_mtime)
    return float(json.loads(summary.read_text())["metric"]["save_checkpoint_io_mean_GB_per_second"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    opts = parser.parse_args()
    port = free_port()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-endpoints-") as tmp:
        env = dict(os.environ, XDG_CONFIG_HOME=f"{tmp}/xdg", AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}",
                   AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench-secret", AWS_REGION="us-east-1")
        server = moto(port, env)
        try:
            subprocess.run([str(BIN), "init", "Bench", f"{tmp}/results"], env=env, check=True, stdout=subprocess.DEVNULL)
            subprocess.run([sys.executable, "-c", "import s3dlio; s3dlio.create_bucket('bench-endpoints')"], env=env,
                           check=True)
            with Gateways(env["AWS_ENDPOINT_URL"], 3, Path(tmp)) as gateways:
                rows = []
                for index in range(opts.rounds):
                    figures = {}
                    for side in (("three", "one") if index % 2 == 0 else ("one", "three")):
                        urls = gateways.urls if side == "three" else gateways.urls[:1]
                        before = cpu_seconds(server.pid)
                        figures[side] = (run(env, f"{tmp}/results", "bench-endpoints", urls), cpu_seconds(server.pid) - before)
                    rows.append(figures)
                    print(f"round {index + 1}: three endpoints {figures['three'][0]:.3f} GiB/s (moto CPU "
                          f"{figures['three'][1]:.1f} s), one endpoint {figures['one'][0]:.3f} GiB/s (moto CPU "
                          f"{figures['one'][1]:.1f} s), ratio {figures['three'][0] / figures['one'][0]:.2f}", flush=True)
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)
    ratios = [r["three"][0] / r["one"][0] for r in rows]
    result = {"three_gib_s": statistics.median(r["three"][0] for r in rows),
              "one_gib_s": statistics.median(r["one"][0] for r in rows),
              "ratio": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
              "moto_cpu_s_three": statistics.median(r["three"][1] for r in rows),
              "moto_cpu_s_one": statistics.median(r["one"][1] for r in rows), "goal": GOAL,
              "load_before": load_before,
              "withheld": f"load {load_before:.2f}" if load_before > LOAD_PER_CORE * (os.cpu_count() or 1) else None}
    print(f"median ratio three / one endpoint: {result['ratio']:.2f} (min {result['ratio_min']:.2f}, max "
          f"{result['ratio_max']:.2f}; goal >= {GOAL}); moto CPU per run: {result['moto_cpu_s_three']:.1f} s with three, "
          f"{result['moto_cpu_s_one']:.1f} s with one; " + (f"no verdict: {result['withheld']} before the bench"
                                                              if result["withheld"] else "judged"))
    print("BENCH " + json.dumps(result))


if __name__ == "__main__":
    main()
