"""Multi-host flows on simulated client hosts (tests/simhosts.py: network namespaces with their
own hostname and sshd, one rank each), at each host count asked for, and where each flow's wall
time goes (issue 44), read from the run's own leaf:

- preflight: the ssh preflight of every host (`ssh preflight: N host(s) answered in X s`);
- facts+drops: the host-facts launch and, for a training run, the page-cache drop launch (each an
  MPI job of one rank per host: `<label>: exit 0 after X s`);
- start-up: from the engine job's launch until every rank reported (`all N rank(s) started after X s`);
- work: the engine job from then to its exit;
- collection: from the job's exit to the metadata's invocation_end_time (outputs parsed, libraries
  and telemetry gathered, leaf written);
- other: the rest of the wall time (interpreter and imports, planning, gates, the leaf's creation).

After every host count, before the cluster is torn down (its teardown sweeps), it checks what the
flows left behind: processes in the hosts' namespaces and ssh clients on this host, segments in
/dev/shm, directories in the temporary directory; after the teardown, network namespaces. Needs root.

    .venv/bin/python bench/cluster_flows.py [--hosts 3,16] [--flows datagen,run,checkpointing,kvcache]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from simhosts import SimCluster, unavailable_reason

BIN = Path(sys.executable).parent / "mlpstorage"
DATA = ["dataset.record_length_bytes=65536", "dataset.record_length_bytes_stdev=0", "dataset.record_length_bytes_resize=0",
        "train.epochs=1", "train.computation_time=0.01", "reader.batch_size=1", "reader.read_threads=1"]
LLAMA = ["model.num_layers=2", "model.hidden_size=256", "model.ffn_hidden_size=512", "model.vocab_size=4096",
         "model.num_attention_heads=8", "model.num_kv_heads=2", "checkpoint.time_between_checkpoints=0"]
PHASES = ("preflight", "facts+drops", "start-up", "work", "collection", "other")
STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def flows(n: int, data: str, ckpt: str, cache: str) -> list[tuple[str, list[str]]]:
    return [
        ("datagen", ["open", "training", "unet3d", "datagen", "-np", str(n), "-dd", data, "--overwrite", "-aip",
                     "--params", f"dataset.num_files_train={4 * n}", *DATA]),
        ("run", ["open", "training", "unet3d", "run", "-at", "b200", "-na", str(n), "-cm", "1", "-dd", data, "-aip",
                 "--params", *DATA]),
        ("checkpointing", ["open", "checkpointing", "llama3-8b", "run", "-np", str(n), "-at", "b200", "-cm", "8",
                           "-cf", ckpt, "-ncw", "1", "-ncr", "1", "--params", *LLAMA]),
        ("kvcache", ["open", "kvcache", "run", "-np", str(n), "--cache-dir", cache, "--model", "tiny-1b",
                     "--num-users", "2", "--duration", "2", "--trials", "1", "--inter-option-delay", "0", "--option", "1"]),
    ]


def _when(line: str) -> float | None:
    found = STAMP.match(line)
    return datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp() if found else None


def split(leaf: Path, wall: float) -> dict[str, float]:
    """The wall time of the run whose leaf this is, by phase (seconds)."""
    lines = (leaf / "mlpstorage.log").read_text(encoding="utf-8", errors="replace").splitlines()
    meta = json.loads(next(leaf.glob("*_metadata.json")).read_text(encoding="utf-8"))
    parts = dict.fromkeys(PHASES, 0.0)
    job_end = None
    for line in lines:
        if m := re.search(r"ssh preflight: \d+ host\(s\) answered in ([\d.]+) s", line):
            parts["preflight"] += float(m.group(1))
        elif m := re.search(r" (host facts|page-cache drop): exit \d+ after ([\d.]+) s", line):
            parts["facts+drops"] += float(m.group(2))
        elif m := re.search(r" (?:DLIO|checkpoint engine|kvcache[^:]*): all \d+ rank\(s\) started after ([\d.]+) s", line):
            parts["start-up"] += float(m.group(1))
        elif m := re.search(r" (?:DLIO|checkpoint engine|kvcache[^:]*): exit \d+ after ([\d.]+) s", line):
            parts["work"] += float(m.group(1))
            job_end = _when(line)
    parts["work"] = max(0.0, parts["work"] - parts["start-up"])
    end = meta.get("invocation_end_time")
    if job_end is not None and end:
        parts["collection"] = max(0.0, datetime.fromisoformat(str(end).replace("Z", "+00:00")).timestamp() - job_end)
    parts["other"] = max(0.0, wall - sum(parts[p] for p in PHASES[:-1]))
    return parts


def newest_leaf(results: Path, since: float) -> Path | None:
    leaves = [p.parent for p in results.rglob("*_metadata.json") if p.stat().st_mtime >= since]
    return max(leaves, key=lambda p: p.stat().st_mtime) if leaves else None


def snapshot() -> tuple[set[str], set[str]]:
    return set(os.listdir("/dev/shm")), set(os.listdir(tempfile.gettempdir()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", default="3", help="host counts, comma-separated (e.g. 3,16,64)")
    parser.add_argument("--flows", default="datagen,run,checkpointing,kvcache")
    opts = parser.parse_args()
    reason = unavailable_reason()
    if reason:
        sys.exit(f"cannot build simulated hosts: {reason}")
    wanted = opts.flows.split(",")
    print(f"{'flow':<14} {'hosts':>5} {'wall s':>7} " + " ".join(f"{p:>11}" for p in PHASES) + "  exit")
    table: list[dict] = []
    for count in (int(c) for c in opts.hosts.split(",")):
        with tempfile.TemporaryDirectory(prefix="bench-flows-") as tmp, \
                tempfile.TemporaryDirectory(dir="/dev/shm", prefix="bench-flows-") as shm:
            cluster = SimCluster(count)
            started = time.perf_counter()
            cluster.start()
            print(f"-- {count} simulated hosts up in {time.perf_counter() - started:.1f} s", flush=True)
            try:
                env = dict(os.environ, XDG_CONFIG_HOME=f"{tmp}/xdg", MLPSTORAGE_SYSTEMNAME="bench", **cluster.env())
                subprocess.run([str(BIN), "init", "Bench", f"{tmp}/results"], env=env, check=True,
                               stdout=subprocess.DEVNULL)
                for sub in ("data", "ckpt", "cache"):
                    Path(shm, sub).mkdir()
                shm_before, tmp_before = snapshot()
                for label, argv in flows(count, f"{shm}/data", f"{shm}/ckpt", f"{shm}/cache"):
                    if label not in wanted:
                        continue
                    since = time.time()
                    begin = time.perf_counter()
                    done = subprocess.run([str(BIN), *argv, "--hosts", *cluster.names, "-rd", f"{tmp}/results"], env=env,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                    wall = time.perf_counter() - begin
                    leaf = newest_leaf(Path(tmp, "results"), since - 1)
                    parts = split(leaf, wall) if leaf is not None else dict.fromkeys(PHASES, float("nan"))
                    table.append({"flow": label, "hosts": count, "wall_s": wall, "exit": done.returncode, **parts})
                    print(f"{label:<14} {count:>5} {wall:>7.1f} " + " ".join(f"{parts[p]:>11.1f}" for p in PHASES)
                          + f"  {done.returncode}" + ("" if done.returncode == 0 else
                                                      f" ({done.stderr.strip().splitlines()[-1:]})"), flush=True)
                left = cluster.stray_processes()
                time.sleep(2)  # others' short jobs on this machine come and go: what stays is compared
                shm_after, tmp_after = snapshot()
                new = sorted((shm_after - shm_before) | (tmp_after - tmp_before))
                ours = [n for n in new if any(h in n for h in cluster.names)]
                print(f"   left behind at {count} hosts: {len(left)} process(es) in the hosts' namespaces or ssh "
                      f"clients of the cluster, {len(ours)} /dev/shm or temp entr(ies) naming a simulated host {ours[:5]}; "
                      f"{len(new) - len(ours)} other new entr(ies), of the machine's other jobs {sorted(set(new) - set(ours))[:5]}",
                      flush=True)
            finally:
                tag = cluster.tag
                cluster.stop()
            names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
            print(f"   network namespaces of the cluster left after teardown: {names.count(tag)}", flush=True)
    print("BENCH " + json.dumps(table))


if __name__ == "__main__":
    main()
