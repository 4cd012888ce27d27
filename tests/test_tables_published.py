"""Issue 41 (B): reportgen's results.csv/json as published. Cells a leaf's own files still give when
its metadata is gone (DP Instances, Accelerator Type, Checkpoint Mode, Code), each saying so in the
row's Issues; every link resolving inside the package, to the per-organization pool where the
package keeps one; figures without binary float noise; the KV bandwidth unit checked; and a KV
aggregate under its older name withheld by reportgen as validate's warning says it is."""

from __future__ import annotations

import csv
import html
import json
import re
import shutil
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

import synthetic_families
from conftest import REALDATA
from mlpstorage_py import checker
from mlpstorage_py.checker.registry import WARNING
from mlpstorage_py.results.kv import older_aggregate_text
from mlpstorage_py.report import reportgen, table
from mlpstorage_py.results import code_image
from synthetic import edit_json, fresh, leaves_of, metadata_file, regenerate, workload  # noqa: F401

needs_realdata = pytest.mark.skipif(not REALDATA.is_dir(), reason="../shared/realdata is absent")
NEWFW = "closed/NewFW/results/Solidigm_D5-P5336_61TB_Gen4_NVMe_QLC"
ALLUXIO = "closed/Alluxio/results/aws_c7i48xlarge_i3en12xlarge_1c_1s_8a"
UBIX = "closed/UBIX/results/UbiPower18000_16x15.36TB_NVMe_4xNDR400_3xStorageNode_1hosts256GBMem"
SAMSUNG = "closed/SAMSUNG/results/MEMORY_AE"
ANCHOR = re.compile(r'<a href="([^"]*)">')
ALL_FAMILIES = ("training", "checkpointing", "vector_database", "kv_cache")


@pytest.fixture(autouse=True, scope="module")
def families():
    with synthetic_families.registered():
        yield


@pytest.fixture
def published(realdata_copy: Path) -> Path:
    """The published packages with their per-organization code-image pools (<org>/code-<hash8>/),
    which realdata_copy leaves out."""
    for pool in REALDATA.iterdir():
        if pool.is_dir() and pool.name not in ("closed", "open"):
            shutil.copytree(pool, realdata_copy / pool.name)
    for path in realdata_copy.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return realdata_copy


def rows(root: Path, org: str) -> list[dict[str, Any]]:
    return json.loads((root / "closed" / org / "results" / "results.json").read_text())["rows"]


def row_of(root: Path, org: str, benchmark: str) -> dict[str, Any]:
    [row] = [r for r in rows(root, org) if r["Benchmark Type"] == benchmark]
    return row


def csv_row(root: Path, org: str, benchmark: str) -> dict[str, str]:
    with open(root / "closed" / org / "results" / "results.csv", newline="") as handle:
        [row] = [r for r in csv.DictReader(handle) if r["Benchmark Type"] == benchmark]
    return row


def _json_hrefs(data: Any) -> Iterator[str]:
    if isinstance(data, dict):
        if "href" in data:
            yield data["href"]
        for value in data.values():
            yield from _json_hrefs(value)
    elif isinstance(data, list):
        for value in data:
            yield from _json_hrefs(value)


def hrefs(root: Path) -> list[tuple[str, str]]:
    """(table, href) of every link in every results.csv and results.json of the package."""
    found = []
    for path in sorted(root.rglob("results.csv")):
        found += [(str(path), html.unescape(h)) for h in ANCHOR.findall(path.read_text())]
    for path in sorted(root.rglob("results.json")):
        found += [(str(path), h) for h in _json_hrefs(json.loads(path.read_text()))]
    return found


def assert_links_resolve(root: Path) -> list[str]:
    """Every href names an existing path inside the package (hrefs are relative to its root)."""
    found = hrefs(root)
    assert found
    top = root.resolve()
    for where, href in found:
        target = (root / href).resolve()
        assert target.is_relative_to(top) and target.exists(), f"{where}: {href} does not resolve inside the package"
    return [h for _, h in found]


# --- links -----------------------------------------------------------------------------------------

@needs_realdata
def test_every_link_of_the_published_packages_resolves_to_their_own_pool(published):
    reportgen.generate(published)
    links = assert_links_resolve(published)
    assert not [h for h in links if h.startswith(code_image.POOL_DIR)]  # no such pool in a v3.0 package
    # SAMSUNG's VDB row: no .mlps-code-image in the leaf, the pool hash in its metadata, the image in SAMSUNG/
    code = row_of(published, "SAMSUNG", "VDB")["VDB - Code"]
    assert code == {"text": "md5-tree-v2:08dbf816d96e7df3be4065d77820ff3c", "href": "SAMSUNG/code-08dbf816"}
    assert any(i.startswith("Code from vector_database_20260721_102236_metadata.json args._validated_pool_hash")
               for i in row_of(published, "SAMSUNG", "VDB")["Issues"])
    assert row_of(published, "UBIX", "Checkpointing")["Checkpointing - Code"]["href"] == "UBIX/code-fe4d097a"
    assert csv_row(published, "NewFW", "Training")["Training - Code"] == \
        '<a href="NewFW/code-19613128">md5-tree-v2:196131280f0ba0643ddfbe089362e567</a>'
    # Alluxio's leaves name no image: text, no link to a pool that is not there
    assert row_of(published, "Alluxio", "Training")["Training - Code"] == "unknown"


@needs_realdata
def test_an_image_missing_from_the_pool_is_named_not_linked(published):
    shutil.rmtree(published / "UBIX")
    reportgen.generate(published)
    assert_links_resolve(published)
    row = row_of(published, "UBIX", "Checkpointing")
    assert row["Checkpointing - Code"] == "md5-tree-v2:fe4d097aa228da2fbe49e6300a5f3016"
    assert any("code image code-fe4d097a is not in the package's pool" in i for i in row["Issues"])


def test_every_link_of_our_package_resolves_in_either_pool_layout(fresh):
    root = fresh(families=ALL_FAMILIES)
    links = assert_links_resolve(root)
    assert {h.split("/")[0] for h in links if "code-" in h} == {code_image.POOL_DIR}
    # the v3.0 layout: the organization's own pool, <org>/code-<hash8>/
    (root / code_image.POOL_DIR).rename(root / "Acme")
    regenerate(root)
    links = assert_links_resolve(root)
    assert {h.split("/")[0] for h in links if "code-" in h} == {"Acme"}
    assert all(r["Issues"] == [] or not any("Code" in i for i in r["Issues"]) for r in rows(root, "Acme"))


def test_a_linked_pool_gives_no_link_out_of_the_package(fresh, tmp_path):
    root = fresh()
    outside = tmp_path / "elsewhere"
    shutil.move(str(root / code_image.POOL_DIR), outside)
    (root / "Acme").symlink_to(outside, target_is_directory=True)
    regenerate(root)
    assert_links_resolve(root)
    assert all(isinstance(r.get("Training - Code") or r.get("Checkpointing - Code"), str) for r in rows(root, "Acme"))


# --- cells from the leaf's own files -----------------------------------------------------------------

def as_70b_without_metadata(root: Path, tensor: int | None = 8) -> Path:
    """The synthetic checkpointing result as a llama3-70b run on 64 accelerators whose metadata is
    gone, its dlio_config/config.yaml stating tensor parallelism `tensor` (None: no config at all)."""
    source = workload(root, "checkpointing")
    target = source.parent / "llama3-70b"
    source.rename(target)
    for leaf in leaves_of(target):
        metadata_file(leaf).unlink()
        edit_json(leaf / "summary.json", lambda d: d.update(num_accelerators=64))
        config = leaf / "dlio_config" / "config.yaml"
        if tensor is None:
            shutil.rmtree(config.parent)
            continue
        data = yaml.safe_load(config.read_text())
        data["workload"]["model"]["parallelism"].update(tensor=tensor, pipeline=1)
        config.write_text(yaml.safe_dump(data))
    regenerate(root)
    return target


def test_dp_instances_falls_back_to_the_leafs_dlio_config(fresh):
    root = fresh()
    as_70b_without_metadata(root)
    row = row_of(root, "Acme", "Checkpointing")
    assert row["Model"] == "70B" and row["Checkpointing - DP Instances"] == 8  # 64 / (8 x 1), not 64
    first = sorted(p.name for p in leaves_of(workload(root, "checkpointing", "llama3-70b")))[0]
    assert f"DP Instances 8 = 64 accelerators / (tensor 8 x pipeline 1) from {first}/dlio_config/config.yaml: " \
           f"{first} has no readable *_metadata.json" in row["Issues"]
    assert row["Checkpointing - Checkpoint Mode"] == "default"
    mode_note = f"Checkpoint Mode default read from {first}/dlio_config/config.yaml"
    assert any(i.startswith(mode_note) for i in row["Issues"])


def test_dp_instances_is_blank_not_guessed_without_any_record(fresh):
    root = fresh()
    as_70b_without_metadata(root, tensor=None)
    row = row_of(root, "Acme", "Checkpointing")
    assert row["Checkpointing - DP Instances"] is None
    assert any(i.startswith("DP Instances is blank:") for i in row["Issues"])


def test_cells_from_the_metadata_carry_no_note(fresh):
    root = fresh()
    for row in rows(root, "Acme"):
        assert row["Issues"] == [] or not any(("from" in i and "dlio_config" in i) for i in row["Issues"])
    assert row_of(root, "Acme", "Checkpointing")["Checkpointing - DP Instances"] == 8
    assert row_of(root, "Acme", "Training")["Training - Accelerator Type"] == "b200"


def test_a_subset_mode_is_read_from_the_config_the_run_wrote(fresh):
    root = fresh()
    for leaf in leaves_of(workload(root, "checkpointing")):
        metadata_file(leaf).unlink()
        config = leaf / "dlio_config" / "config.yaml"
        data = yaml.safe_load(config.read_text())
        data["workload"]["checkpoint"]["mode"] = "subset"
        config.write_text(yaml.safe_dump(data))
    regenerate(root)
    assert row_of(root, "Acme", "Checkpointing")["Checkpointing - Checkpoint Mode"] == "subset"


@needs_realdata
def test_published_leaves_without_metadata_keep_their_cells(published):
    """UBIX's checkpointing leaf without its metadata: DP Instances from its config.yaml (tensor 1)
    stays 8; Alluxio's training (no metadata in the package) gets its accelerator from hydra.yaml."""
    ubix = published / UBIX / "checkpointing/llama3-8b/20260721_160229"
    metadata_file(ubix).unlink()
    reportgen.generate(published)
    row = row_of(published, "UBIX", "Checkpointing")
    assert row["Checkpointing - DP Instances"] == 8
    assert any(i.startswith("DP Instances 8 = 8 accelerators / (tensor 1 x pipeline 1) from "
                            "20260721_160229/dlio_config/config.yaml") for i in row["Issues"])
    alluxio = row_of(published, "Alluxio", "Training")
    assert alluxio["Training - Accelerator Type"] == "b200"
    assert "Accelerator Type b200 read from 20260709_143752/dlio_config/hydra.yaml (workload retinanet_b200): " \
           "20260709_143752 has no readable *_metadata.json" in alluxio["Issues"]


# --- figures as published ------------------------------------------------------------------------------

@pytest.mark.parametrize("value, shown", [
    (30.520000000000003, 30.52), (51.66000000000001, 51.66), (2.2853939000000003, 2.2853939),
    (95.19999999999999, 95.2),
    (3.076140817854296, 3.076140817854296), (58093.31628731821, 58093.31628731821), (20.9675, 20.9675),
    (1e-20 + 1e-36, 1e-20), (-0.1 - 0.2, -0.3), (8, 8), (True, True), ("30.520000000000003", "30.520000000000003"),
    (None, None), (float("nan"), None), (float("-inf"), None)])
def test_a_figure_loses_only_its_float_noise(value, shown):
    assert table.tidy(value) == shown and type(table.tidy(value)) is type(shown)


def test_a_recall_cell_reads_as_the_runs_record_it(fresh):
    root = fresh(families=("vector_database",))
    run_dir = next(root.rglob("vector_database/*/*/run"))
    for leaf in leaves_of(run_dir):
        edit_json(leaf / "summary.json",
                  lambda d: (d.update(recall=0.3052), d["recall_stats"].update(mean_recall=0.3052)))
        edit_json(leaf / "recall_stats.json", lambda d: d.update(mean_recall=0.3052))
    regenerate(root)
    assert row_of(root, "Acme", "VDB")["VDB - Recall Percentage"] == 30.52
    assert csv_row(root, "Acme", "VDB")["VDB - Recall Percentage"] == "30.52"


@needs_realdata
def test_the_published_figures_are_unchanged(published):
    """Every realdata figure as it was computed before issue 41, save the one that carried float noise."""
    reportgen.generate(published)
    newfw = {r["Benchmark Type"]: r for r in rows(published, "NewFW")}
    assert newfw["Checkpointing"]["Checkpointing - Write B/W (GiB/s)"] == 3.076140817854296
    assert newfw["Checkpointing"]["Checkpointing - Read B/W (GiB/s)"] == 4.983509448925309
    assert newfw["Checkpointing"]["Checkpointing - Write Duration (secs)"] == 34.0389656
    assert newfw["Checkpointing"]["Checkpointing - DP Instances"] == 8
    assert newfw["Training"]["Training - Read B/W (GiB/s)"] == 5.763427363201174
    assert newfw["KVCache"]["KVCache llama3.1-8b Storage Only - Read B/W (GiB/s)"] == 7.981766983503692
    assert newfw["KVCache"]["KVCache llama3.1-8b Storage + Mem - Throughput (tok/s)"] == 88.11671710069857
    tta = row_of(published, "TTA", "VDB")
    assert (tta["VDB - Queries per Sec"], tta["VDB - Query Latency (ms)"], tta["VDB - Recall Percentage"]) == \
        (58093.31628731821, 91.1762018203735, 20.9675)
    assert row_of(published, "XSKY", "Training")["Training - Read B/W (GiB/s)"] == 67.73118324220155
    assert row_of(published, "Alluxio", "Training")["Training - Read B/W (GiB/s)"] == 1.1276062187728548
    ubix = row_of(published, "UBIX", "Checkpointing")
    assert (ubix["Checkpointing - Write B/W (GiB/s)"], ubix["Checkpointing - Read B/W (GiB/s)"]) == \
        (39.43581878409022, 45.815375362359205)
    assert ubix["Checkpointing - Read Duration (secs)"] == 2.2853939  # the summary's 2.2853939000000003 less its noise
    # the per-result figures keep what the runs hold, unrounded
    figures = json.loads((published / UBIX / "checkpointing/llama3-8b/results.json").read_text())["figures"]
    assert figures["read_duration_s"] == 2.2853939000000003


# --- KV bandwidth unit ------------------------------------------------------------------------------------

def test_kv_bandwidth_is_gib_per_second_and_copied_unchanged(fresh):
    """*_bandwidth_gbps is GiB/s: kv-cache.py divides the tier's bytes by 2^30 and the elapsed seconds
    (the published NewFW rank file: 2356.6094970703125 GiB read in 300.00009655952454 s is its
    tier_storage_read_bandwidth_gbps 7.855362461867494), so the GiB/s columns copy it unchanged."""
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kv_cache_benchmark"))
    from kvcache_sim.cache import TierStats
    from kvcache_sim.report import _tier_block

    stats = TierStats("storage")
    stats.bytes_read, stats.bytes_written = 3 * 2 ** 30, 2 ** 30
    block = _tier_block(stats, 1.5, 0, 0)
    assert block["tier_storage_read_bandwidth_gbps"] == 2.0 and block["tier_storage_write_bandwidth_gbps"] == 2 / 3
    assert 2530390179840 / 2 ** 30 == 2356.6094970703125
    assert 2356.6094970703125 / 300.00009655952454 == pytest.approx(7.855362461867494, rel=1e-15)
    root = fresh(families=("kv_cache",))
    summary = json.loads(next(root.rglob("kv_cache/*/run/*/summary.json")).read_text())["options"]
    row = row_of(root, "Acme", "KVCache")
    for option, group in table.KV_GROUPS.items():
        for way in ("Read", "Write"):
            stated = summary[option][f"aggregated_{way.lower()}_bandwidth_gbps"]
            assert row[f"KVCache {group} - {way} B/W (GiB/s)"] == table.tidy(stated)


# --- KV aggregate under the older name ---------------------------------------------------------------------

@pytest.mark.parametrize("older", ["kvcache_run_summary_{ts}.json", "kvcache_run_summary.json"])
def test_an_older_aggregate_name_is_withheld_as_validate_says(fresh, older):
    root = fresh(families=("kv_cache",))
    [leaf] = leaves_of(next(root.rglob("kv_cache/*/run")))
    name = older.format(ts=leaf.name)
    (leaf / "summary.json").rename(leaf / name)
    regenerate(root)
    org = json.loads((root / "closed/Acme/results/results.json").read_text())
    assert not [r for r in org["rows"] if r["Benchmark Type"] == "KVCache"]
    assert "KVCache" not in (root / "closed/Acme/results/results.csv").read_text().split("\n", 1)[1]
    [withheld] = org["withheld"]
    assert withheld["why"] == f"{leaf.name}: {older_aggregate_text(name)}"
    detail = json.loads((leaf.parent / "results.json").read_text())
    assert detail["rows"] == [] and detail["withheld"] == withheld["why"]
    _, found = checker.validate(root)
    [warning] = [f for f in found if f.rule == "6.3.4.5"]
    assert (warning.severity, Path(warning.path).name, warning.message) == (WARNING, name, older_aggregate_text(name))
    # renamed as the finding says, the row publishes
    (leaf / name).rename(leaf / "summary.json")
    regenerate(root)
    assert row_of(root, "Acme", "KVCache")["KVCache llama3.1-8b Storage Only - Read B/W (GiB/s)"] is not None
