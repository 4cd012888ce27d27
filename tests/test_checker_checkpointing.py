"""Rules 4.x (checkpointing): each mutation of a valid synthetic package draws exactly its rule's
finding, and the real v3.0 llama3-8b write + read leaves read as what they are."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Callable

import pytest

from conftest import REALDATA
from mlpstorage_py.checker import rules_checkpointing as rc
from mlpstorage_py.results.tree.package import Package
from mlpstorage_py.checker.registry import INFO, INVALID, WARNING
from synthetic import regenerate, edit_json, edit_yaml, fresh, leaves_of, metadata_file, workload  # noqa: F401
from test_checker_structure import findings_of, validate_realdata, verdicts

REAL_CKPT = REALDATA / "closed/NewFW/results/Solidigm_D5-P5336_61TB_Gen4_NVMe_QLC/checkpointing/llama3-8b"
WRITE_LEAF, READ_LEAF = "20260713_104840", "20260713_105538"
# The UBIX llama3-8b result: one combined write+read leaf (added to the corpus 2026-12-01).
REAL_UBIX = REALDATA / "closed/UBIX/results/UbiPower18000_16x15.36TB_NVMe_4xNDR400_3xStorageNode_1hosts256GBMem/checkpointing/llama3-8b"
UBIX_LEAF = "20260721_160229"


def ckpt(root: Path, division: str = "closed") -> list[Path]:
    return leaves_of(workload(root, "checkpointing", division=division))


def meta(index: int, change: Callable[[dict], object], division: str = "closed") -> Callable[[Path], None]:
    return lambda r: edit_json(metadata_file(ckpt(r, division)[index]), change)


def summary(index: int, change: Callable[[dict], object]) -> Callable[[Path], None]:
    return lambda r: edit_json(ckpt(r)[index] / "summary.json", change)


def system(change: Callable[[dict], object], division: str = "closed") -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        path = root / division / "Acme" / "systems" / "sys1.yaml"
        edit_yaml(path, lambda d: change(d["system_under_test"]["solution"]))
    return mutate


def caps(**values) -> Callable[[Path], None]:
    def change(solution: dict) -> None:
        for key, value in values.items():
            if value is None:
                solution["capabilities"].pop(key)
            else:
                solution["capabilities"][key] = value
    return system(change)


def set_in(path: str, value) -> Callable[[dict], None]:
    def change(data: dict) -> None:
        *parents, last = path.split(".")
        for key in parents:
            data = data[key]
        data[last] = value
    return change


def several(*mutations: Callable[[Path], None]) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        for m in mutations:
            m(root)
    return mutate


def df_listing(*mounts: str) -> Callable[[Path], None]:
    """Replace fs_separation.json by a df listing of the given mount points."""
    def mutate(root: Path) -> None:
        leaf = ckpt(root)[0]
        (leaf / "fs_separation.json").unlink()
        rows = [f"/dev/disk{i}  1000000000 1000000 999000000   1% {m}" for i, m in enumerate(mounts)]
        (leaf / "checkpointing_run.stdout.log").write_text(
            "Filesystem     1K-blocks    Used Available Use% Mounted on\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return mutate


def swap_phases(root: Path) -> None:
    """An OPEN workload whose first invocation reads and whose second writes."""
    first, second = ckpt(root, "open")
    for leaf, (w, r) in ((first, (0, 10)), (second, (10, 0))):
        edit_json(metadata_file(leaf), lambda d: (d["args"].update(num_checkpoints_write=w, num_checkpoints_read=r),
                                                  d["parameters"]["checkpoint"].update(num_checkpoints_write=w,
                                                                                       num_checkpoints_read=r)))


CKPT_RESULTS = "closed/Acme/results/sys1/checkpointing/llama3-8b/results.json"

MUTATIONS: dict[str, tuple[dict, Callable[[Path], None], set[tuple[str, str]], bool]] = {
    # name: (make_package options, mutate, expected (rule, severity), exact)
    "4.3.1 checkpoint smaller than 3x host memory": (
        {}, summary(0, set_in("metric.checkpoint_size_GB", 50.0)), {("4.3.1", WARNING)}, True),
    "4.3.2 fsync off": ({}, meta(0, set_in("parameters.checkpoint.fsync", False)), {("4.3.2", INVALID), ("4.6.3", INVALID)}, True),
    "4.3.2 fsync recorded nowhere": ({}, several(meta(1, lambda d: d["parameters"]["checkpoint"].pop("fsync")),
                                                 lambda r: edit_yaml(ckpt(r)[1] / "dlio_config" / "config.yaml",
                                                                     lambda d: d["workload"]["checkpoint"].pop("fsync"))),
                                     {("4.3.2", INVALID), ("4.6.3", INVALID)}, True),
    "4.3.3 model not in Table 2": ({}, meta(0, set_in("args.model", "llama3-7b")), {("4.3.3", INVALID)}, True),
    "4.3.4 accelerator whatif-only": ({}, meta(1, lambda d: (d.update(accelerator="h100"), d["args"].update(accelerator_type="h100"))),
                                      {("4.3.4", INVALID)}, True),
    "4.3.4 accelerator not in Table 3": ({}, meta(1, lambda d: (d.update(accelerator="tpu9"), d["args"].update(accelerator_type="tpu9"))),
                                        {("4.3.4", INVALID)}, True),
    "4.3.4 checkpoint larger than accelerator memory": (
        {}, summary(0, set_in("metric.checkpoint_size_GB", 2000.0)), {("4.3.4", INVALID)}, True),
    "4.3.4 no accelerator recorded": ({}, meta(0, lambda d: (d.update(accelerator=None), d["args"].pop("accelerator_type"))),
                                      {("4.3.4", INVALID)}, True),
    "4.3.5 subset run on 4 accelerators": ({}, several(meta(0, set_in("args.checkpoint_subset", True)),
                                                       summary(0, set_in("num_accelerators", 4))),
                                           {("4.3.5", INVALID), ("4.6.1", INVALID)}, True),
    "4.3.5 an 8-process 8B subset run is valid": ({}, meta(0, lambda d: d["override_parameters"].update({"checkpoint.mode": "subset"})),
                                                  set(), True),
    "4.3.6 a published figure disagrees": ({}, lambda r: edit_json(r / CKPT_RESULTS, lambda d: d["rows"][0].update(
        {"Checkpointing - Write B/W (GiB/s)": 99.0})), {("4.3.6", INVALID)}, True),
    "4.4.1 checkpoints in the results directory": ({}, meta(0, set_in("args.checkpoint_folder", "/results/")), {("4.4.1", INVALID)}, True),
    "4.4.1 results directory not recorded": ({}, meta(1, lambda d: (d["args"].update(results_dir=None), d.pop("result_dir"))),
                                            {("4.4.1", INVALID)}, True),
    "4.4.2 one filesystem": ({}, lambda r: edit_json(ckpt(r)[0] / "fs_separation.json", set_in("same_filesystem", True)),
                             {("4.4.2", INVALID)}, True),
    "4.4.2 no evidence": ({}, lambda r: (ckpt(r)[1] / "fs_separation.json").unlink(), {("4.4.2", INVALID)}, True),
    "4.4.2 df listing, two mounts": ({}, df_listing("/mnt/ckpt", "/"), set(), True),
    "4.4.2 df listing, one mount": ({}, df_listing("/"), {("4.4.2", INVALID)}, True),
    "4.4.2 df listing of other mounts": ({}, df_listing("/home", "/var"), {("4.4.2", INVALID)}, True),
    "4.4.2 object API systems are exempt": ({}, several(system(lambda s: s["architecture"].update(benchmark_API="object")),
                                                        lambda r: edit_json(ckpt(r)[0] / "fs_separation.json",
                                                                            set_in("same_filesystem", True))), set(), True),
    "4.6.1 16 processes": ({}, meta(0, set_in("num_processes", 16)), {("4.6.1", INVALID)}, True),
    "4.6.2 3 accelerators on a host": ({}, meta(0, lambda d: d.update(executed_command=d["executed_command"].replace(
        "--host client1:8", "--host client1:3,client2:5"))), {("4.6.2", INVALID)}, True),
    # exactly 4 per host: a calibrated WARNING (tests/test_calibrations.py; INVALID with --letter)
    "4.6.2 4 accelerators per host": ({}, meta(0, lambda d: d.update(executed_command=d["executed_command"].replace(
        "--host client1:8", "--host client1:4,client2:4"))), {("4.6.2", WARNING)}, True),
    "4.6.3 a model parameter changed": ({}, meta(1, set_in("parameters.model.num_layers", 16)), {("4.6.3", INVALID)}, True),
    "4.6.3 an extra parameter": ({}, meta(1, set_in("parameters.checkpoint.extra_knob", 1)), {("4.6.3", INVALID)}, True),
    "4.6.4 OPEN processes not a multiple of TP x PP": (
        {"division": "open"}, meta(0, set_in("parameters.model.parallelism.tensor", 3), "open"), {("4.6.4", INVALID)}, True),
    "4.7.1 combined run reads 5": ({"checkpoint_invocations": 1}, meta(0, set_in("args.num_checkpoints_read", 5)),
                                   {("4.7.1", INVALID)}, True),
    # the write invocation ends 09:09:07Z and the read one starts 09:09:14Z: a 7 s gap
    "4.7.1 failover gap of 67 s": ({}, meta(1, lambda d: d.update(invocation_start_time="2026-07-01T09:10:14Z")),
                                   {("4.7.1", INVALID)}, True),
    "4.7.1 negative failover gap": ({}, meta(1, lambda d: d.update(invocation_start_time="2026-07-01T09:08:00Z")),
                                    {("4.7.1", WARNING)}, True),
    "4.7.1 write end from the summary": ({}, meta(0, lambda d: d.pop("invocation_end_time")), set(), True),
    "4.7.1 read precedes write": ({"division": "open"}, swap_phases, {("4.7.1", INVALID)}, False),
    "4.7.2 first write has no start": ({}, summary(0, lambda d: d.pop("start")), {("4.7.2", INVALID)}, True),
    "4.7.3 simultaneous solution must report 0": ({}, caps(remap_time_in_seconds=30), {("4.7.3", INVALID)}, True),
    "4.7.3 remapping solution must report > 0": ({}, caps(simultaneous_read=False),
                                                 {("4.7.3", INVALID), ("4.7.4", WARNING)}, True),
    "4.7.3 read phase too soon after the write": ({}, caps(simultaneous_write=False, remap_time_in_seconds=100),
                                                  {("4.7.3", INVALID), ("4.7.4", WARNING)}, True),
    "4.7.3 remap respected": ({}, caps(simultaneous_write=False, remap_time_in_seconds=16), {("4.7.4", WARNING)}, True),
    "4.7.3 remap not a number": ({}, caps(remap_time_in_seconds="soon"), {("4.7.3", INVALID)}, True),
    "4.7.4 multi_host missing": ({}, caps(multi_host=None), {("4.7.4", INVALID)}, True),
    "4.7.4 a flag that is not a boolean": ({}, caps(simultaneous_write="yes"), {("4.7.4", INVALID)}, True),
}


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_each_mutation_draws_its_rule(fresh, name):
    options, mutate, expected, exact = MUTATIONS[name]
    root = fresh(**options)
    mutate(root)
    found = verdicts(root)
    if exact:
        assert found == expected
    else:
        assert expected <= found, found


def test_the_failover_gap_message_names_its_sources(fresh):
    root = fresh()
    edit_json(metadata_file(ckpt(root)[1]), lambda d: d.update(invocation_start_time="2026-07-01T09:10:14Z"))
    [gap] = findings_of(root, "4.7.1")
    assert "failover gap 67.0 s" in gap.message and "invocation_start_time" in gap.message
    assert Path(gap.path).name == ckpt(root)[1].name


def test_without_the_read_leafs_metadata_the_failover_gap_is_not_checked(fresh):
    """The v3.0 release's read leaves lack their metadata: summary.json's times (here 100 s after
    its own start, an INVALID gap were it one) are DLIO's span, not the invocation's; nothing is computed."""
    root = fresh()
    read = ckpt(root)[1]
    later = lambda d: d.update(start=(datetime.fromisoformat(d["start"]) + timedelta(seconds=100)).isoformat())
    edit_json(read / "summary.json", later)
    metadata_file(read).unlink()
    [gap] = findings_of(root, "4.7.1")
    assert (gap.severity, Path(gap.path).name) == (INFO, read.name)
    assert gap.message.startswith(f"failover gap not checked: {read.name}/checkpointing_{read.name}_metadata.json "
                                  "is not in the package")


def test_an_engine_dlio_leaf_warns_that_its_data_is_zero_filled_and_timed_by_rank_0(fresh):
    """`open checkpointing ... --engine dlio` (benchmarks/dlio_checkpointing.merge): the summary names
    the fork; validate warns under 4.3.6 (the figures the row publishes) and the row's Issues say so."""
    root = fresh(division="open")
    engine = {"name": "dlio_benchmark 3.0.2", "writer": "SimpleStreamingCheckpointing", "timed_ranks": "rank 0 (DLIO's metric)"}
    for leaf in ckpt(root, "open"):
        edit_json(leaf / "summary.json", lambda d: d.update(checkpoint_engine=engine))
    regenerate(root)
    warned = [f for f in findings_of(root, "4.3.6")]
    assert [(f.severity, Path(f.path).parent.name) for f in warned] == [(WARNING, leaf.name) for leaf in ckpt(root, "open")]
    assert all("dlio_benchmark 3.0.2, writer SimpleStreamingCheckpointing" in f.message and "zero-filled" in f.message
               and "rank 0's timing" in f.message for f in warned)
    issues = json.loads((workload(root, "checkpointing", division="open") / "results.json").read_text())["issues"]
    assert [i.split(":")[0] for i in issues if "zero-filled" in i] == [leaf.name for leaf in ckpt(root, "open")]
    # our own engine's leaves (the fresh package) draw no such warning
    assert findings_of(fresh(division="open"), "4.3.6") == []


# --- the real v3.0 corpus ----------------------------------------------------------------

needs_realdata = pytest.mark.skipif(not REALDATA.is_dir(), reason="../shared/realdata is not present")


@pytest.fixture
def real():
    return validate_realdata()


def of(findings, number: str, leaf: str | None = None):
    return [f for f in findings if f.rule == number and (leaf is None or leaf in f.path)]


@needs_realdata
def test_realdata_llama3_8b_passes_4_3_4_and_4_6(real):
    _, findings = real
    for leaf in (WRITE_LEAF, READ_LEAF):
        memory = of(findings, "4.3.4", leaf)
        # v3.0 recorded no accelerator for checkpointing: the rule makes that INVALID, and the message
        # says that 8 x 180 GiB would hold the 104.7 GiB checkpoint whichever accelerator it was
        assert [f.severity for f in memory] == [INVALID]
        assert "8 x 180 GiB would hold" in memory[0].message
    for number in ("4.6.1", "4.6.2", "4.6.3", "4.3.2", "4.3.5", "4.4.2", "4.7.2", "4.7.3", "2.1.23", "2.1.24"):
        assert of(findings, number) == [], number
    # the read leaf's metadata is not in the corpus: the failover gap is not checked, never computed from
    # summary.json's times (DLIO's benchmark span, not the invocation's)
    [gap] = of(findings, "4.7.1")
    assert gap.severity == INFO and Path(gap.path).name == READ_LEAF
    assert gap.message.startswith(f"failover gap not checked: {READ_LEAF}/checkpointing_{READ_LEAF}_metadata.json "
                                  "is not in the package")


@needs_realdata
def test_realdata_warnings_and_gaps_are_true_of_the_data(real):
    _, findings = real
    newfw = str(REAL_CKPT) + "/"
    # NewFW: 104.7 GiB per host is not more than 3 x 377 GiB of host memory (both leaves)
    assert [(f.severity, Path(f.path).parent.name) for f in of(findings, "4.3.1", newfw)] == [
        (WARNING, WRITE_LEAF), (WARNING, READ_LEAF)]
    # UBIX's combined leaf: 104.7 GiB is not more than 3 x its client's 249.4 GiB either
    [ubix] = of(findings, "4.3.1", str(REAL_UBIX) + "/")
    assert ubix.severity == WARNING and Path(ubix.path).parent.name == UBIX_LEAF and "249.4 GiB" in ubix.message
    # no other result draws 4.3.1
    assert len(of(findings, "4.3.1")) == 3
    # NewFW's system declares both simultaneous flags false (a remapping solution, 22 s); UBIX's
    # combined leaf needs no remapping between invocations
    assert [(f.severity, Path(f.path).name) for f in of(findings, "4.7.4")] == [
        (WARNING, "Solidigm_D5-P5336_61TB_Gen4_NVMe_QLC.yaml")]
    # only NewFW's write leaf kept its metadata, but the read leaf's dlio_config/config.yaml names its
    # model (model.name llama_8b, the llama3-8b reference's) and its fs_separation.json records the
    # checkpoint and results directories (apart): neither rule is violated (UBIX kept its metadata)
    assert of(findings, "4.4.1") == []
    assert of(findings, "4.3.3") == []


@needs_realdata
def test_realdata_failover_gap_crosses_utc_and_local_time():
    """The write leaf ends in UTC (its post-benchmark collection timestamp); the read leaf
    starts in naive local time (UTC+8, its summary): the gap is 22.8 s, not 8 hours."""
    pkg = Package.load(REALDATA)
    found = ((result.path, rc.invocations(result)) for system in pkg.systems for result in system.results
             if result.benchmark == "checkpointing")
    workloads = {path: leaves for path, leaves in found if leaves}
    # NewFW's write and read leaves, and UBIX's single combined leaf (no failover gap to measure)
    assert set(workloads) == {REAL_CKPT, REAL_UBIX}
    [ubix] = workloads[REAL_UBIX]
    assert ubix.path.name == UBIX_LEAF and rc.counts(ubix)[:2] == (10, 10)
    assert rc._two_invocations(workloads[REAL_UBIX]) is None
    recs = workloads[REAL_CKPT]
    write, read = rc._two_invocations(recs)
    assert (write.path.name, read.path.name) == (WRITE_LEAF, READ_LEAF)
    assert write.utc_offset == read.utc_offset == timedelta(hours=8)
    end, end_from = rc._write_end(write)
    start, start_from = rc._read_start(read)
    assert "collection_timestamp" in end_from and start_from == "summary.json start"
    assert rc._interval(write, end, read, start) == pytest.approx(22.83, abs=0.01)
    # 4.7.3: from the write's summary end to the read's summary start, at least 22 / 2 s
    assert rc._interval(write, write.summary_time("end"), read, read.summary_time("start")) == pytest.approx(23.35, abs=0.01)
    assert [rc.counts(r)[:2] for r in recs] == [(10, 0), (0, 10)]
