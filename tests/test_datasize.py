"""Rules 3.1.2 dataset sizing: hand-computed numbers, then the whole CLI leaf it writes."""

from __future__ import annotations

import json
import re

import pytest

from conftest import DATASIZE, LEAF_NAME, leaf_metadata, workload_leaves
from mlpstorage_py.benchmarks.training import compute_datasize
from mlpstorage_py.results.code_image import parse_pointer, tree_hash

GIB = 2 ** 30
UNET3D = {"batch_size": 7, "record_length": 146600628}
RETINANET = {"batch_size": 24, "record_length": 322957}
RULES = {"training_steps_per_epoch": 500, "training_host_memory_multiplier": 5}


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def size(model: dict, accelerators: int, hosts: int, memory_gb: int, samples_per_file: int = 1):
    return compute_datasize(RULES, batch_size=model["batch_size"], samples_per_file=samples_per_file,
                            record_length=model["record_length"], accelerators=accelerators, hosts=hosts,
                            memory_gb=memory_gb, max_files_per_subfolder=10000)


def test_unet3d_steps_bind():
    s = size(UNET3D, accelerators=8, hosts=1, memory_gb=16)
    assert s.min_samples_steps == 500 * 7 * 8 == 28000
    assert s.min_samples == 28000 and s.bound == "steps"
    assert s.num_files_train == 28000
    assert s.num_subfolders_train == 3  # ceil(28000 / 10000)
    assert s.total_disk_bytes == 28000 * 146600628


def test_unet3d_memory_binds():
    s = size(UNET3D, accelerators=1, hosts=4, memory_gb=512)
    expected = ceil_div(4 * 512 * 5 * GIB, 146600628)
    assert expected == 75001  # 75000.47... rounded up
    assert s.min_samples_steps == 3500
    assert s.min_samples == expected and s.bound == "memory"
    assert s.num_files_train == 75001
    assert s.num_subfolders_train == 8
    assert s.total_disk_bytes == 75001 * 146600628


def test_retinanet_steps_bind():
    s = size(RETINANET, accelerators=8, hosts=1, memory_gb=1)
    assert ceil_div(5 * GIB, 322957) == 16624
    assert s.min_samples == 500 * 24 * 8 == 96000 and s.bound == "steps"
    assert s.num_files_train == 96000 and s.num_subfolders_train == 10
    assert s.total_disk_bytes == 96000 * 322957


def test_retinanet_memory_binds():
    s = size(RETINANET, accelerators=8, hosts=1, memory_gb=16)
    expected = ceil_div(16 * 5 * GIB, 322957)
    assert expected == 265978
    assert s.min_samples == expected and s.bound == "memory"
    files = ceil_div(expected, 8) * 8  # rounded up to a multiple of the 8 ranks
    assert s.num_files_train == files == 265984
    assert s.num_subfolders_train == ceil_div(files, 10000) == 27
    assert s.total_disk_bytes == files * 322957


def test_file_count_is_a_multiple_of_the_ranks():
    """DLIO 2.0.0 hangs when the files do not divide by the ranks: datasize rounds up."""
    for accelerators in (3, 7, 16):
        s = size(RETINANET, accelerators=accelerators, hosts=1, memory_gb=16)
        assert s.num_files_train % accelerators == 0
        assert 0 <= s.num_files_train - s.min_samples < accelerators


def test_samples_per_file_rounds_files_up():
    s = size(UNET3D, accelerators=1, hosts=1, memory_gb=1, samples_per_file=3)  # 3500 samples
    assert s.num_files_train == ceil_div(3500, 3) == 1167
    assert s.total_disk_bytes == 1167 * 3 * 146600628


@pytest.mark.parametrize("samples, subfolders", [(10000, 0), (10001, 2), (20000, 2), (20001, 3)])
def test_subfolder_boundary(samples, subfolders):
    s = compute_datasize({"training_steps_per_epoch": 1, "training_host_memory_multiplier": 5}, batch_size=1,
                         samples_per_file=1, record_length=1 << 40, accelerators=samples, hosts=1, memory_gb=1,
                         max_files_per_subfolder=10000)
    assert s.num_files_train == samples
    assert s.num_subfolders_train == subfolders


# --- through the CLI --------------------------------------------------------------------

def no_nulls(value, path="$"):
    if value is None:
        raise AssertionError(f"null at {path}")
    if isinstance(value, dict):
        for k, v in value.items():
            no_nulls(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            no_nulls(v, f"{path}[{i}]")


def test_cli_datasize_writes_one_complete_leaf(cli, results):
    res = cli(*DATASIZE, "-sn", "sys1", "--results-dir", results)
    assert res.rc == 0, res.err
    assert "the steps constraint binds" in res.out
    assert "28,000" in res.out

    leaves = workload_leaves(results)
    assert len(leaves) == 1
    leaf = leaves[0]
    assert LEAF_NAME.match(leaf.name)
    assert leaf.parent == results / "closed" / "Org" / "results" / "sys1" / "training" / "unet3d" / "datasize"
    assert {p.name for p in leaf.iterdir()} >= {f"training_{leaf.name}_metadata.json", "provenance.json",
                                                ".mlps-code-image", "mlpstorage.log", "mlpstorage.errors.log"}

    meta = leaf_metadata(leaf)
    assert meta["run_datetime"] == leaf.name
    assert meta["exit_status"] == 0
    args = meta["args"]
    assert args["model"] == "unet3d" and args["accelerator_type"] == "b200"
    assert args["max_accelerators"] == 8 and args["client_host_memory_in_gb"] == 16
    assert "data_dir" in args
    dataset = meta["parameters"]["dataset"]
    assert dataset["num_files_train"] == 28000
    assert dataset["num_subfolders_train"] == 3
    assert dataset["total_disk_bytes"] == 28000 * 146600628

    with open(leaf / "provenance.json", encoding="utf-8") as fh:
        prov = json.load(fh)
    assert list(prov) == ["schema", "rules_edition", "layout_version", "tool", "dlio", "storage_library",
                          "core_config", "stamped_at", "stamped_by", "provenance", "engine"]
    assert prov["engine"]["name"] == "mlpstorage" and "datasize runs no DLIO" in prov["engine"]["origin"]
    assert "libraries" not in prov  # no rank ran
    assert prov["schema"] == "mlps-run-provenance/1"
    no_nulls(prov)
    assert prov["core_config"]["hash"] == "0d3ad0dec188becd"
    pointer = (leaf / ".mlps-code-image").read_text(encoding="utf-8").strip()
    assert prov["tool"]["code_image"] == pointer
    digest = parse_pointer(pointer)
    assert digest is not None
    image = results / "code-images" / f"code-{digest[:8]}"
    assert image.is_dir()
    assert json.loads((image / ".code-hash.json").read_text(encoding="utf-8"))["hash"] == digest
    assert tree_hash(image) == digest

    log_text = (leaf / "mlpstorage.log").read_text(encoding="utf-8")
    assert f"leaf: {leaf}" in log_text


def test_cli_datasize_memory_binds(cli, results):
    res = cli("closed", "training", "unet3d", "datasize", "-at", "b200", "-ma", "1", "-cm", "512", "-nc", "4",
              "-sn", "sys1", "-rd", results)
    assert res.rc == 0, res.err
    assert "the memory constraint binds" in res.out
    assert "75,001" in res.out
    meta = leaf_metadata(workload_leaves(results)[0])
    assert meta["parameters"]["dataset"]["num_files_train"] == 75001
    assert meta["parameters"]["dataset"]["num_subfolders_train"] == 8


def test_cli_retinanet_datasize(cli, results):
    res = cli("closed", "training", "retinanet", "datasize", "-at", "b200", "-ma", "8", "-cm", "64",
              "-sn", "sys1", "-rd", results)
    assert res.rc == 0, res.err
    assert "the memory constraint binds" in res.out
    leaf = workload_leaves(results, tail="training/retinanet/datasize")[0]
    expected = -(-(64 * 5 * 2**30) // 322957)  # ceil: 64 GiB x 5 / record length
    assert leaf_metadata(leaf)["parameters"]["dataset"]["num_files_train"] == -(-expected // 8) * 8
    prov = json.loads((leaf / "provenance.json").read_text(encoding="utf-8"))
    assert prov["core_config"]["hash"] == "20c73f53486caba0"


def test_measured_memory_wins_over_a_smaller_declaration(cli, results):
    """Rules 3.1.2 is checked against the memory DLIO measures, so datasize sizes for the larger."""
    from mlpstorage_py.results.host import meminfo_bytes

    measured = meminfo_bytes()
    res = cli("closed", "training", "retinanet", "datasize", "-at", "b200", "-ma", "1", "-cm", "1",
              "-sn", "sys1", "-rd", results)
    assert res.rc == 0, res.err
    assert "differs from the measured" in res.err
    leaf = workload_leaves(results, tail="training/retinanet/datasize")[0]
    meta = leaf_metadata(leaf)
    assert meta["parameters"]["dataset"]["num_files_train"] == -(-(measured * 5) // 322957)
    assert meta["cluster_information"]["collection_method"] == "local"  # 127.0.0.1 is measured in-process
    (host,) = meta["client_hosts"]
    assert host["host"] == "127.0.0.1" and host["ranks"] == [0] and host["kernel"] and host["cpu_count"] >= 1
    assert meta["cluster_information"]["hosts"][0]["memory_total_bytes"] == measured


def test_allowlisted_closed_override_is_recorded_and_does_not_change_core_config(cli, results):
    res = cli(*DATASIZE, "-sn", "sys1", "-rd", results, "--params", "reader.read_threads=16")
    assert res.rc == 0, res.err
    leaf = workload_leaves(results)[0]
    meta = leaf_metadata(leaf)
    assert meta["override_parameters"] == {"reader.read_threads": "16"}
    assert meta["parameters"]["reader"]["read_threads"] == 16
    assert meta["verification"] == "CLOSED"
    prov = json.loads((leaf / "provenance.json").read_text(encoding="utf-8"))
    assert prov["core_config"]["hash"] == "0d3ad0dec188becd"


def test_datasize_report_lines_are_consistent(cli, results):
    res = cli(*DATASIZE, "-sn", "sys1", "-rd", results)
    m = re.search(r"num_subfolders_train\s*=\s*(\d+)", res.out)
    assert m and int(m.group(1)) == 3
