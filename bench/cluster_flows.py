"""Multi-host flows on simulated client hosts (tests/simhosts.py: network namespaces with their
own hostname and sshd), each timed across N hosts and, as the reference measured in the same
run, the same flow with all ranks on this host. Prints the hosts used, each flow's wall time on
both, their ratio, and the time a frozen host (sshd stopped: it accepts TCP, never answers)
takes to be reported. Needs root.

    .venv/bin/python bench/cluster_flows.py [--hosts 3]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from simhosts import SimCluster, unavailable_reason  # noqa: E402

BIN = Path(sys.executable).parent / "mlpstorage"
DATA = ["dataset.record_length_bytes=65536", "dataset.record_length_bytes_stdev=0", "dataset.record_length_bytes_resize=0",
        "train.epochs=2", "train.computation_time=0.01", "reader.batch_size=1", "reader.read_threads=1"]
LLAMA = ["model.num_layers=2", "model.hidden_size=256", "model.ffn_hidden_size=512", "model.vocab_size=4096",
         "model.num_attention_heads=8", "model.num_kv_heads=2", "checkpoint.time_between_checkpoints=0"]


def timed(env: dict[str, str], *argv: str) -> tuple[float, int]:
    start = time.perf_counter()
    done = subprocess.run([str(BIN), *argv], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode not in (0, 10):
        print(f"  {' '.join(argv[:4])}: exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
    return time.perf_counter() - start, done.returncode


def flows(n: int, data: str, ckpt: str, cache: str) -> list[tuple[str, list[str]]]:
    files = 4 * n
    return [
        ("training datasize", ["closed", "training", "unet3d", "datasize", "-at", "b200", "-ma", str(n), "-cm", "1"]),
        ("training datagen", ["open", "training", "unet3d", "datagen", "-np", str(n), "-dd", data, "--overwrite", "-aip",
                              "--params", f"dataset.num_files_train={files}", *DATA]),
        ("training run (2 epochs)", ["open", "training", "unet3d", "run", "-at", "b200", "-na", str(n), "-cm", "1",
                                     "-dd", data, "-aip", "--params", *DATA]),
        ("checkpointing w2/r2", ["open", "checkpointing", "llama3-8b", "run", "-np", str(n), "-at", "b200", "-cm", "8",
                                 "-cf", ckpt, "-ncw", "2", "-ncr", "2", "--params", *LLAMA]),
        ("kvcache 1 option, 2 s", ["open", "kvcache", "run", "-np", str(n), "--cache-dir", cache, "--model", "tiny-1b",
                                   "--num-users", "2", "--duration", "2", "--trials", "1", "--inter-option-delay", "0",
                                   "--option", "1"]),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hosts", type=int, default=3)
    opts = parser.parse_args()
    reason = unavailable_reason()
    if reason:
        sys.exit(f"cannot build simulated hosts: {reason}")
    with SimCluster(opts.hosts) as cluster, tempfile.TemporaryDirectory() as tmp, \
            tempfile.TemporaryDirectory(dir="/dev/shm") as shm:
        env = dict(os.environ, XDG_CONFIG_HOME=f"{tmp}/xdg", MLPSTORAGE_SYSTEMNAME="bench", **cluster.env())
        subprocess.run([str(BIN), "init", "Bench", f"{tmp}/results"], env=env, check=True, stdout=subprocess.DEVNULL)
        for sub in ("data", "ckpt", "cache"):
            Path(shm, sub).mkdir()
        print(f"hosts: {', '.join(cluster.names)} (one rank per host), reference: the same ranks on this host")
        print(f"{'flow':<26} {'N hosts s':>10} {'1 host s':>9} {'ratio':>6}")
        for label, argv in flows(opts.hosts, f"{shm}/data", f"{shm}/ckpt", f"{shm}/cache"):
            multi, code_m = timed(env, *argv, "--hosts", *cluster.names)
            local, code_l = timed(env, *argv, "--oversubscribe")
            status = "" if code_m == code_l == 0 else f"  (exit {code_m}/{code_l})"
            print(f"{label:<26} {multi:>10.1f} {local:>9.1f} {multi / local:>6.2f}{status}")
        frozen = cluster.names[-1]
        cluster.freeze(frozen)
        took, code = timed(env, *flows(opts.hosts, f"{shm}/data", f"{shm}/ckpt", f"{shm}/cache")[1][1],
                           "--hosts", *cluster.names)
        cluster.thaw(frozen)
        print(f"frozen host {frozen}: reported in {took:.1f} s (exit {code}; 10 = unreachable)")
        left = cluster.stray_processes()
        print(f"processes of ours left on the hosts afterwards: {len(left)}")


if __name__ == "__main__":
    main()
