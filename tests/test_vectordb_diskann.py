"""The embedded DiskANN engine (`--vdb-engine diskann`): a real 20,000 x 64 index built by
diskannpy and searched by MPI query ranks, on a loop-mounted ext4 of its own where the suite
runs as root (so its block device counts only the index's reads), else on the real disk under
the test's temporary directory (no cache drop, device reads not asserted)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import MLPSTORAGE, all_leaves, subprocess_env
from faults import alive, pids_matching, wait_for

from mlpstorage_py.vectordb import diskann_engine

if diskann_engine.version() is None:
    pytest.skip(f"diskannpy is not installed in {diskann_engine.site_packages()} (make diskann)", allow_module_level=True)

SCALE = ["--num-vectors", "20000", "--dimension", "64"]
BUILD = ["--metric-type", "L2", "--max-degree", "32", "--search-list-size", "64", "--build-threads", "2"]
RECALL_LIST = 128  # recall@10 >= 0.9 at this search_list (0.93 measured on this index)
RANK = "mlpstorage_py.vectordb.diskann_rank"


@contextlib.contextmanager
def own_disk(base: Path) -> Iterator[tuple[Path, bool]]:
    """(directory, on a device of its own): an ext4 on a loop device as root, else base itself."""
    if os.geteuid() != 0 or not shutil.which("losetup") or not shutil.which("mkfs.ext4"):
        yield base, False
        return
    image, mount = base / "disk.img", base / "disk"
    with open(image, "wb") as fh:
        fh.truncate(256 * 2**20)
    made = subprocess.run(["losetup", "--find", "--show", str(image)], capture_output=True, text=True)
    if made.returncode != 0:
        yield base, False
        return
    device = made.stdout.strip()
    try:
        subprocess.run(["mkfs.ext4", "-q", "-F", device], check=True, capture_output=True)
        mount.mkdir()
        subprocess.run(["mount", device, str(mount)], check=True, capture_output=True)
        yield mount, True
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)
        subprocess.run(["losetup", "-d", device], capture_output=True)


class Built:
    """One results tree and one built index, shared by the module's tests."""

    def __init__(self, root: Path, store: Path, own_device: bool, env: dict[str, str]) -> None:
        self.root, self.store, self.own_device, self.env = root, store, own_device, env
        self.results = root / "R"

    def mlps(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        argv = [str(MLPSTORAGE), "open", "vectordb", "DISKANN", *args, *SCALE, "--vdb-engine", "diskann",
                "--storage-root", str(self.store), "-rd", str(self.results), "-sn", "sys1"]
        done = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=600)
        if check:
            assert done.returncode == 0, done.stderr[-3000:]
        return done

    def leaves(self, command: str) -> list[Path]:
        parent = self.results / "open" / "Org" / "results" / "sys1" / "vector_database" / "diskann" / "DISKANN" / command
        return sorted(p for p in parent.iterdir() if p.is_dir()) if parent.is_dir() else []

    def run(self, *extra: str) -> dict:
        self.mlps("run", "--queries", "400", "--num-query-vectors", "200", "--search-ef", str(RECALL_LIST), *extra)
        return summary(self.leaves("run")[-1])


def summary(leaf: Path) -> dict:
    return json.loads((leaf / "summary.json").read_text(encoding="utf-8"))


def metadata(leaf: Path) -> dict:
    (path,) = leaf.glob("vector_database_*_metadata.json")
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Iterator[Built]:
    from mlpstorage_py.results.sentinel import init_results_dir

    base = tmp_path_factory.mktemp("diskann")
    with own_disk(base) as (store, own_device):
        index = Built(base, store / "vdb", own_device, subprocess_env(base))
        index.store.mkdir()
        init_results_dir("Org", index.results)
        index.mlps("datagen", *BUILD)
        yield index


# -- pieces ------------------------------------------------------------------------------------
def test_build_parameters_map_as_documented():
    from mlpstorage_py.vectordb.diskann_engine import BuildParams, expected_reads, pq_chunks

    native = BuildParams("COSINE", 48, 96, 0.125, 2.0, 0).native(1_000_000, 768)
    assert native["graph_degree"] == 48 and native["complexity"] == 96 and native["pq_disk_bytes"] == 0
    assert native["distance_metric"] == "l2"  # cosine ranks as L2 on the generator's unit vectors
    assert native["expected_pq_bytes"] == pq_chunks(768, 0.125) == 384
    # DiskANN's chunks = floor(budget bytes / n), the budget read as text of six decimals, 0.25 GiB
    # kept for its cache above 1.25 GiB: the budget gives exactly the asked bytes per vector
    assert int(float(f"{native['search_memory_maximum']:f}") * 2**30 // 1_000_000) == 384
    big = BuildParams("L2", 64, 200, 0.125, 8.0, 0).native(10_000_000, 1536)
    assert big["expected_pq_bytes"] == 512  # DiskANN's cap
    assert int((float(f"{big['search_memory_maximum']:f}") - 0.25) * 2**30 // 10_000_000) == 512
    assert BuildParams("IP", 32, 64, 0.125, 1.0, 2).native(20000, 64)["distance_metric"] == "mips"
    reads = expected_reads({"max_node_bytes": 388}, 128, 4)
    assert reads["reads_per_query"] == 128 and reads["bytes_per_query"] == 128 * 4096 and reads["rounds_per_query"] == 32


def test_device_reads_count_a_shared_kernel_once():
    from mlpstorage_py.vectordb.diskann_clients import device_reads

    io = {"device": "loop3", "major": 7, "minor": 3, "boot_id": "b1",
          "counters": {"read_ios": 300, "read_bytes": 300 * 4096, "write_ios": 0, "write_bytes": 0}}
    docs = [{"rank": 0, "hostname": "h1", "host_leader": True, "host_io": io},
            {"rank": 1, "hostname": "h1", "host_leader": False, "host_io": None},
            {"rank": 2, "hostname": "h2", "host_leader": True, "host_io": dict(io)}]  # same kernel: same counters
    out = device_reads(docs, 100, 2.0)
    assert out["device_reads_per_query"] == 3.0 and out["device_read_bytes_per_query"] == 3 * 4096
    assert out["device_io"]["devices"][0]["hosts"] == ["h1", "h2"] and out["device_io"]["read_iops"] == 150.0
    nfs = {"device": None, "major": 0, "minor": 50, "boot_id": "b2", "reason": "no block device"}
    out = device_reads(docs + [{"rank": 3, "hostname": "h3", "host_leader": True, "host_io": nfs}], 100, 2.0)
    assert out["device_reads_per_query"] is None and out["device_io"]["missing"] == ["h3: no block device"]


# -- refusals (no index needed) -------------------------------------------------------------
def test_closed_and_aisaq_are_refused_with_their_reasons(cli, results, tmp_path):
    common = ("--vdb-engine", "diskann", "--storage-root", tmp_path, "-rd", results, "-sn", "sys1")
    res = cli("closed", "vectordb", "DISKANN", "datagen", *SCALE, *common)
    assert res.rc == 5 and "OPEN only" in res.err and "DISKANN is not implemented by Milvus Lite" in res.err
    assert "Milvus 2.4+ server" in res.err
    res = cli("open", "vectordb", "AISAQ", "run", *SCALE, *common)
    assert res.rc == 5 and "AISAQ is not in diskannpy" in res.err and "Milvus 2.6.4+" in res.err
    res = cli("open", "vectordb", "HNSW", "datagen", *SCALE, *common)
    assert res.rc == 2 and "builds DISKANN only" in res.err
    assert all_leaves(results) == []


@pytest.mark.heavy
def test_an_index_on_tmpfs_has_no_device_to_count(cli, results, shm):
    """tmpfs has no block device (and, on kernels before 6.6, no O_DIRECT, refused before any
    work): a run there reports no device reads, saying why, rather than a zero."""
    small = ("--num-vectors", "2000", "--dimension", "16", "--vdb-engine", "diskann", "--storage-root", shm,
             "-rd", results, "-sn", "sys1")
    res = cli("open", "vectordb", "DISKANN", "datagen", *small, "--max-degree", "16", "--search-list-size", "32")
    if res.rc == 5:
        assert "does not take O_DIRECT" in res.err and all_leaves(results) == []
        return
    assert res.rc == 0, res.err
    res = cli("open", "vectordb", "DISKANN", "run", *small, "--queries", "50", "--search-ef", "32")
    assert res.rc == 0, res.err
    run = next(leaf for leaf in all_leaves(results) if leaf.parent.name == "run")
    s = summary(run)
    assert s["device_reads_per_query"] is None and s["device_read_bytes_per_query"] is None
    assert "no block device" in s["disk_io"]["missing"][0] and "device reads per query not counted" in res.out


def test_a_missing_index_is_one_line_with_exit_3(cli, results, tmp_path):
    res = cli("open", "vectordb", "DISKANN", "run", *SCALE, "--vdb-engine", "diskann", "--storage-root", tmp_path,
              "--queries", "10", "-rd", results, "-sn", "sys1")
    assert res.rc == 3, res.err
    errors = [line for line in res.err.splitlines() if line.startswith("mlpstorage: error:")]
    assert len(errors) == 1 and "no DISKANN index at" in errors[0] and "run datagen first" in errors[0]


# -- the built index -------------------------------------------------------------------------
@pytest.mark.heavy
def test_datagen_builds_the_index_on_the_storage_root(built):
    (leaf,) = built.leaves("datagen")
    s = summary(leaf)
    index = Path(s["index_dir"])
    assert index.parent.parent == built.store and (index / "ann_disk.index").is_file()
    assert os.stat(index).st_dev == os.stat(built.store).st_dev  # on the storage root's filesystem
    assert s["index_size_bytes"] == sum(v for k, v in s["index_files"].items() if k.startswith("ann"))
    assert s["index_size_bytes"] > 20000 * 64 * 4 and s["index_build_time_seconds"] > 0
    assert s["index_build_peak_memory_bytes"] > 20000 * 64 * 4
    assert s["index"]["pq_bytes_per_vector"] == 32 and s["index_params"]["max_degree"] == 32
    assert s["database"]["database"] == "diskann" and s["engine"].startswith("diskannpy 0.7.0")
    assert metadata(leaf)["engine_identity"]["name"] == "diskannpy"
    provenance = json.loads((leaf / "provenance.json").read_text(encoding="utf-8"))
    assert "diskannpy" in json.dumps(provenance) and "Milvus Lite" not in json.dumps(provenance)


@pytest.mark.heavy
def test_a_second_datagen_needs_force(built):
    again = built.mlps("datagen", *BUILD, check=False)
    assert again.returncode == 9 and "already exists" in again.stderr and "--force" in again.stderr, again.stderr[-2000:]


@pytest.mark.heavy
def test_run_recall_latency_and_device_reads(built):
    s = built.run("-np", "2")
    assert s["recall_at_10"] == s["recall"] >= 0.9, s["recall"]
    assert s["search_list"] == RECALL_LIST and s["beam_width"] == 4
    assert s["total_queries"] == 400 and s["num_query_processes"] == 2 and s["throughput_qps"] > 0
    assert 0 < s["p50_latency_ms"] <= s["p95_latency_ms"] <= s["p99_latency_ms"]
    assert s["ground_truth"]["coverage"] == 1.0 and s["index_reads"]["o_direct"] is True
    assert s["memory"]["cache_nodes"] == 0 and s["memory"]["pq_codes_bytes"] == 20000 * 32
    assert s["engine"].startswith("diskannpy") and "milvus" not in s["database"]["database"]
    if not built.own_device:
        pytest.skip("device reads after a cache drop need root and a loop device (a device of the index's own)")
    assert "dropped" in s["index_reads"]["page_cache"][0]
    assert s["device_reads_per_query"] > 0 and s["device_read_bytes_per_query"] >= 4096 * s["device_reads_per_query"] * 0.99
    # the graph bounds it: about search_list node reads, never far beyond
    assert s["device_reads_per_query"] < 2 * s["expected_reads"]["reads_per_query"]


@pytest.mark.heavy
def test_a_copy_per_host_is_searched(built, tmp_path):
    s = built.run("--index-copy-dir", str(built.store.parent / "copies"), "--search-ef", "64")
    assert s["index_placement"] == "per-host copy" and s["index_copies"][0]["copied"] is True
    assert s["index_dirs_searched"] == [str(built.store.parent / "copies" / s["collection_name"])]
    assert s["search_list"] == 64 and s["recall"] > 0.7


@pytest.mark.heavy
def test_query_clients_over_two_hosts(built, make_sim_cluster):
    """One rank on each of two simulated hosts over the one index (a shared filesystem), then a
    copy per host: the hosts share this machine's kernel, so the device is counted once. The
    hosts are started after the index's disk is mounted: a simulated host's mount namespace is
    a copy taken when it starts (`ip netns exec`), so the suite's session hosts, started
    earlier, do not see a loop disk mounted since (a real cluster mounts its shared
    filesystem on every host)."""
    hosts = make_sim_cluster(2)
    h1, h2 = hosts.names[:2]
    saved = dict(built.env)
    built.env.update(hosts.env())
    try:
        s = built.run("--hosts", h1, h2, "--search-ef", "64")
        assert sorted(s["query_clients"]["hosts"]) == sorted([h1, h2]) and s["total_queries"] == 400
        assert s["recall"] > 0.7 and s["index_placement"] == "shared"
        if built.own_device:
            (device,) = s["disk_io"]["devices"]
            assert sorted(device["hosts"]) == sorted([h1, h2]) and s["device_reads_per_query"] > 0
        s = built.run("--hosts", h1, h2, "--index-copy-dir", str(built.store.parent / "host-copies"))
        assert s["index_placement"] == "per-host copy" and len(s["index_copies"]) == 2
    finally:
        built.env.clear()
        built.env.update(saved)


@pytest.mark.heavy
def test_too_many_clients_for_the_memory_are_refused_at_plan_time(built):
    res = built.mlps("run", "--queries", "10", "-np", "100000", check=False)
    assert res.returncode == 9 and "is available" in res.stderr and "query client(s) on this host" in res.stderr


@pytest.mark.heavy
def test_a_killed_query_rank_fails_the_run_in_one_line(built):
    argv = [str(MLPSTORAGE), "open", "vectordb", "DISKANN", "run", *SCALE, "--vdb-engine", "diskann", "--runtime", "120",
            "-np", "2", "--storage-root", str(built.store), "-rd", str(built.results), "-sn", "sys1"]
    before = len(built.leaves("run"))
    child = subprocess.Popen(argv, env=built.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        def querying() -> bool:
            leaves = built.leaves("run")[before:]
            log = leaves[-1] / "vectordb_ranks.stdout.log" if leaves else None
            return bool(log and log.is_file() and "queries" in log.read_text(errors="replace"))

        wait_for(querying, 300, child)
        victims = pids_matching(RANK)
        assert victims
        os.kill(victims[0], signal.SIGKILL)
        _, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 6, err
    errors = [line for line in err.splitlines() if line.startswith("mlpstorage: error:")]
    assert len(errors) == 1 and "vectordb query ranks" in errors[0], err
    assert metadata(built.leaves("run")[-1])["exit_status"] == 6
    deadline = time.monotonic() + 30
    while alive(pids_matching(RANK)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not alive(pids_matching(RANK))


@pytest.mark.heavy
def test_validate_and_reports_know_the_engine(built, tmp_path):
    from mlpstorage_py import checker
    from mlpstorage_py.main import main

    built.run("--search-ef", "32")
    pkg, findings = checker.validate(built.results)
    mine = [f for f in findings if f.rule == "5.6.5" and f.severity == "INVALID"]
    assert mine == [], mine
    assert main(["reports", "reportgen", "--results-dir", str(built.results)]) == 0
    detail = json.loads((built.leaves("run")[0].parent / "results.json").read_text(encoding="utf-8"))
    (row,) = detail["rows"]
    assert row["VDB - Index Type"] == "DISKANN" and row["VDB - Queries per Sec"] > 0
    assert any(issue.startswith("engine: diskannpy 0.7.0") for issue in row["Issues"])
    out = tmp_path / "page.html"
    assert main(["reports", "html", "--results-dir", str(built.results), "--output", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    assert "Recall against queries per second" in page and "Query latency against the search list" in page
    if built.own_device:
        assert "Device reads per query" in page
    # a diskann leaf that claims Milvus is INVALID under 5.6.5
    copy = tmp_path / "copy"
    shutil.copytree(built.results, copy, symlinks=True)
    leaf = copy / built.leaves("run")[-1].relative_to(built.results)
    record = summary(leaf)
    record["engine"] = "pymilvus 3.0.2 / Milvus Lite 3.2.2"
    (leaf / "summary.json").write_text(json.dumps(record), encoding="utf-8")
    _, findings = checker.validate(copy)
    claims = [f for f in findings if f.rule == "5.6.5" and f.severity == "INVALID"]
    assert len(claims) == 1 and "never Milvus" in claims[0].message
