"""Progress: plain periodic lines off a terminal, a rich bar on one, and a real phase reporting."""

from __future__ import annotations

import io

from rich.console import Console

from conftest import all_leaves
from test_checkpointing_cli import SMALL, ckpt_dir  # noqa: F401 (fixture)

from mlpstorage_py import progress


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_plain_lines_every_interval_with_eta():
    clock, out = Clock(), io.StringIO()
    bar = progress.Progress("datagen", 100, "files", stream=out, every_s=10, clock=clock)
    for second in range(0, 41):
        clock.now = second
        bar.update(2.5 * second)
    bar.close()
    lines = out.getvalue().splitlines()
    assert lines[0] == "datagen: 25/100 files (25%), 0:10 elapsed, ETA 0:30"
    assert lines[1] == "datagen: 50/100 files (50%), 0:20 elapsed, ETA 0:20"
    assert len(lines) == 5 and lines[-1] == "datagen: 100/100 files (100%), 0:40 elapsed (done)"


def test_a_short_phase_off_a_terminal_prints_nothing():
    out = io.StringIO()
    with progress.Progress("vector load", 10, "vectors", stream=out) as bar:
        bar.update(10)
    assert out.getvalue() == ""


def test_terminal_bar_shows_count_and_eta():
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=100)
    with progress.Progress("datagen", 10, "files", console=console) as bar:
        bar.update(4)
    shown = buffer.getvalue()
    assert "\x1b[" in shown and "datagen" in shown and "4/10" in shown and "ETA" in shown and "files" in shown
    buffer = io.StringIO()
    progress.summary("closed training unet3d run", [("status", "ok"), ("leaf", "/r/x")],
                     console=Console(file=buffer, force_terminal=True, width=100))
    assert "status" in buffer.getvalue() and "/r/x" in buffer.getvalue()


def test_polled_marks_count_distinct_entries_of_a_growing_log(tmp_path):
    log = tmp_path / "stderr.log"
    log.write_text("Ending epoch 1 - 5 steps\nEnding epoch 1 - 5 steps\nEnd", encoding="utf-8")  # two ranks, half a line
    marks = progress.LogMarks(log, r"Ending epoch (\d+)")
    assert marks() == 1
    with open(log, "a", encoding="utf-8") as fh:
        fh.write("ing epoch 2 - 5 steps\n")
    out = io.StringIO()
    with progress.polled("training", 3, marks, "epochs", poll_s=0.05, stream=out, every_s=0):
        pass
    assert out.getvalue().splitlines()[-1].startswith("training: 2/3 epochs (67%)")
    assert out.getvalue().endswith("(stopped)\n")


def test_a_checkpointing_run_reports_each_checkpoint(cli, results, ckpt_dir, monkeypatch):  # noqa: F811
    monkeypatch.setattr(progress, "PLAIN_EVERY_S", 0.0)
    res = cli("open", "checkpointing", "llama3-8b", "run", "-np", "2", "-at", "b200", "-cm", "8", "-cf", ckpt_dir,
              "-sn", "sys1", "-rd", results, "-ncw", "2", "-ncr", "2", "--params", *SMALL)
    assert res.rc == 0, res.err
    assert "checkpoints: 4/4 written/read (100%)" in res.err and "(done)" in res.err
    assert "  status" in res.err and "ok" in res.err  # the closing table
    (leaf,) = all_leaves(results)
    for path in leaf.rglob("*"):  # progress never lands in a result file
        if path.is_file() and path.suffix in (".log", ".json"):
            assert "written/read (" not in path.read_text(encoding="utf-8", errors="replace"), path
