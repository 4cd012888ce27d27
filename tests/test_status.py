"""`mlpstorage status`: verdicts per result over synthetic packages and the published corpus."""

from __future__ import annotations

import json
import shutil
from datetime import timedelta

import pytest

from conftest import REALDATA
from mlpstorage_py.results.leaf import create_leaf
from synthetic import BASE, duplicate_leaf, edit_json, edit_yaml, fresh, leaves_of, metadata_file, workload  # noqa: F401


def status(cli, root, *flags):
    result = cli("status", root, "--json", *flags)
    assert result.rc == 0, result.err
    return {(r["benchmark"], r["model"]): r for r in json.loads(result.out)["results"]}


def states(row):
    return [(leaf["id"].rsplit("/", 1)[-1], leaf["state"]) for leaf in row["leaves"] if leaf["phase"] == "run"]


def test_a_valid_package_is_ready_and_every_leaf_ok(cli, fresh):
    root = fresh()
    rows = status(cli, root)
    train, ckpt = rows[("training", "unet3d")], rows[("checkpointing", "llama3-8b")]
    assert (train["runs_present"], train["runs_required"], train["verdict"]) == (6, 6, "ready")
    assert (ckpt["runs_present"], ckpt["runs_required"], ckpt["verdict"]) == (2, 2, "ready")
    assert [leaf["phase"] for leaf in train["leaves"]] == ["datasize", "datagen"] + ["run"] * 6
    assert {leaf["state"] for r in rows.values() for leaf in r["leaves"]} == {"ok"}
    table = cli("status", root, "--runs")
    assert table.rc == 0 and "6/6" in table.out and "ready" in table.out and "  ok         datagen" in table.out


def test_a_combined_checkpointing_leaf_is_one_of_one(cli, fresh):
    row = status(cli, fresh(checkpoint_invocations=1))[("checkpointing", "llama3-8b")]
    assert (row["runs_present"], row["runs_required"], row["verdict"]) == (1, 1, "ready")


def test_a_failed_run_is_shown_and_never_counted(cli, fresh):
    root = fresh()
    run = leaves_of(workload(root, "training") / "run")[3]
    edit_json(metadata_file(run), lambda m: m.update(exit_status=6, failure="DLIO exited 1"))
    row = status(cli, root)[("training", "unet3d")]
    assert (row["runs_present"], row["verdict"]) == (5, "short")
    assert (run.name, "failed") in states(row)
    assert [leaf["detail"] for leaf in row["leaves"] if leaf["state"] == "failed"] == ["exit 6: DLIO exited 1"]


def test_a_killed_run_is_incomplete_and_never_counted(cli, fresh):
    """What the lifecycle leaves when mlpstorage is SIGKILLed mid-run: the leaf directory and its
    open logs, but no metadata, provenance or pointer (written last, in the finally SIGKILL skips).
    Built by hand: killing a real DLIO run costs minutes. A metadata that says `running` is the same."""
    root = fresh()
    runs = workload(root, "training") / "run"
    killed, _ = create_leaf(runs, BASE + timedelta(hours=1), root)
    (killed / "training_run.stdout.log").write_text("epoch 1 ...\n", encoding="utf-8")
    running = leaves_of(runs)[2]
    edit_json(metadata_file(running), lambda m: (m.pop("exit_status"), m.pop("invocation_end_time"), m.update(status="running")))
    row = status(cli, root)[("training", "unet3d")]
    assert (killed.name, "incomplete") in states(row) and (running.name, "incomplete") in states(row)
    assert row["runs_present"] == 5 and row["verdict"] == "short"
    assert cli("reports", "reportgen", "--results-dir", root).rc == 0  # the figures count them no more than status
    counted = json.loads((runs / "results.json").read_text())["runs"]
    assert killed.name not in counted and running.name not in counted and len(counted) == 5


def test_a_run_killed_after_its_engine_finished_is_incomplete(cli, fresh):
    """mlpstorage SIGKILLed after its engine wrote summary.json, before it checked the outputs
    and wrote the metadata (a tiny checkpoint run on /dev/shm finishes that fast): its own log
    says the tool started the leaf, so the run counts nowhere. A published leaf with a summary
    but no metadata (no mlpstorage.log either) still counts."""
    root = fresh()
    runs = workload(root, "training") / "run"
    finished = leaves_of(runs)[1]
    killed, _ = create_leaf(runs, BASE + timedelta(hours=1), root)
    shutil.copy(finished / "summary.json", killed / "summary.json")
    (killed / "mlpstorage.log").write_text("... INFO job:81 DLIO deadline: 600 s\n", encoding="utf-8")
    published = leaves_of(runs)[2]
    metadata_file(published).unlink()
    row = status(cli, root)[("training", "unet3d")]
    assert (killed.name, "incomplete") in states(row)
    assert (published.name, "ok") in states(row)
    assert cli("reports", "reportgen", "--results-dir", root).rc == 0
    counted = json.loads((runs / "results.json").read_text())["runs"]
    assert killed.name not in counted and published.name in counted


def test_ok_runs_beyond_the_count_are_extra(cli, fresh):
    root = fresh()
    runs = leaves_of(workload(root, "training") / "run")
    extra = duplicate_leaf(runs[-1], timedelta(seconds=68))
    row = status(cli, root)[("training", "unet3d")]
    assert states(row)[-1] == (extra.name, "extra") and [s for _, s in states(row)].count("ok") == 6
    assert row["runs_present"] == 6 and row["invalid"] >= 1 and row["verdict"] == "invalid"  # 2.1.17: 7 run leaves


def test_missing_paperwork(cli, fresh):
    root = fresh()
    (root / "closed/Acme/systems/sys1.pdf").unlink()
    edit_yaml(root / "closed/Acme/systems/sys1.yaml",
              lambda d: d["system_under_test"]["solution"]["capabilities"].pop("simultaneous_read"))
    rows = status(cli, root)
    train, ckpt = rows[("training", "unet3d")], rows[("checkpointing", "llama3-8b")]
    assert train["verdict"] == ckpt["verdict"] == "paperwork" and train["invalid"] == ckpt["invalid"] == 0
    assert [p.split(":")[0] for p in train["paperwork"]] == ["2.1.7"]
    assert [p.split(":")[0] for p in ckpt["paperwork"]] == ["2.1.7", "4.7.4"]
    assert "simultaneous_read" in ckpt["paperwork"][1]
    assert "paperwork closed/Acme/systems/sys1: 2.1.7" in cli("status", root).out


def test_whatif_and_trash_are_never_counted(cli, fresh):
    root = fresh()
    runs = workload(root, "training") / "run"
    shutil.copytree(root / "closed", root / "whatif")  # no leaf is ever read outside closed/ and open/
    gone = leaves_of(runs)[-1]
    assert cli("runs", "rm", "--results-dir", root, gone.name, "--yes").rc == 0
    row = status(cli, root)[("training", "unet3d")]
    assert (row["runs_present"], row["verdict"]) == (5, "short")
    assert all(".mlps" not in leaf["id"] and not leaf["id"].startswith("whatif") for leaf in row["leaves"])
    result = cli("validate", root, "--json")
    assert ".mlps" not in result.out


@pytest.mark.skipif(not REALDATA.is_dir(), reason="../shared/realdata is absent")
def test_status_of_the_published_packages(cli, realdata_copy):
    rows = {(r["organization"], r["benchmark"]): r
            for r in json.loads(cli("status", realdata_copy, "--json").out)["results"]}
    assert len(rows) == 9
    counts = {key: (r["runs_present"], r["runs_required"]) for key, r in rows.items()}
    assert counts[("NewFW", "training")] == counts[("XSKY", "training")] == counts[("Alluxio", "training")] == (6, 6)
    assert counts[("NewFW", "checkpointing")] == (2, 2) and counts[("UBIX", "checkpointing")] == (1, 1)  # combined leaf
    assert counts[("TTA", "vector_database")] == counts[("SAMSUNG", "vector_database")] == (5, 5)
    assert counts[("SAMSUNG", "kv_cache")] == (1, 1)
    # the corpus lacks most files (its README): every result is INVALID, and no PDF is published
    assert {r["verdict"] for r in rows.values()} == {"invalid"}
    assert all(any(p.startswith("2.1.7") for p in r["paperwork"]) for r in rows.values())
    datagen = [leaf for leaf in rows[("NewFW", "training")]["leaves"] if leaf["phase"] == "datagen"]
    assert [leaf["state"] for leaf in datagen] == ["incomplete"]  # configs only: no metadata, no summary


def test_a_real_leaf_of_the_lifecycle_is_ok(cli, results):
    """A leaf written by the tool itself (the smallest CLOSED command): its metadata's exit_status 0 says ok."""
    from conftest import DATASIZE

    assert cli(*DATASIZE, "-sn", "sys1").rc == 0
    result = cli("status", "--json")
    [row] = json.loads(result.out)["results"]
    assert (row["organization"], row["system"], row["benchmark"], row["model"]) == ("Org", "sys1", "training", "unet3d")
    assert [(leaf["phase"], leaf["state"], leaf["detail"]) for leaf in row["leaves"]] == [("datasize", "ok", "exit 0")]
    assert (row["runs_present"], row["runs_required"], row["verdict"]) == (0, 6, "short")
    listed = json.loads(cli("runs", "list", "--json").out)
    assert [e["code_image"] for e in listed] == [f"code-{p.name[5:]}" for p in (results / "code-images").glob("code-*")]


def test_placeholders_left_by_systems_describe_are_paperwork(cli, fresh):
    from mlpstorage_py.results.host_profile import PLACEHOLDER

    root = fresh()
    edit_yaml(root / "closed/Acme/systems/sys1.yaml", lambda d: d["system_under_test"]["solution"].update(
        friendly_description=f"{PLACEHOLDER}: the storage solution"))
    rows = status(cli, root)
    assert {r["verdict"] for r in rows.values()} == {"paperwork"} and {r["invalid"] for r in rows.values()} == {0}
    assert rows[("training", "unet3d")]["paperwork"] == [
        f"sys1.yaml: 1 FILL IN placeholder(s) left (first: friendly_description: '{PLACEHOLDER}: the storage solution')"]
    result = cli("submit", root)
    assert result.rc == 1
    assert f"PAPERWORK closed/Acme/systems/sys1.yaml: placeholder left: friendly_description: '{PLACEHOLDER}: the storage " \
           "solution'" in result.err_lines
