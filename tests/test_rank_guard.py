"""A rank never outlives its launcher (launch/rank_guard.py, kv_cache_benchmark/mlperf_wrapper.py),
even one that died before the rank asked the kernel to end it with its parent: the race that
left two kv-cache.py ranks running for 30 s after mlpstorage was SIGKILLed in CI. Each case
waits for the launcher to be gone (a phase), never for a time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from faults import alive, wait_for

REPO = Path(__file__).resolve().parents[1]

# The rank: reads its parent first, waits until that parent has exited, then asks.
ORPHAN = """
import os, sys, time
sys.path[:0] = [{repo!r}, {kv!r}]
first = os.getppid()
{setup}
open({ready!r}, "w").write("parent read")
while os.getppid() == first:
    time.sleep(0.05)
{ask}
open({survived!r}, "w").write("the rank ran on")
"""

GUARDS = {
    "rank_guard": ("from mlpstorage_py.launch.rank_guard import die_with_parent", "die_with_parent(first)"),
    "mlperf_wrapper": ("import mlperf_wrapper", "mlperf_wrapper.die_with_parent()"),  # PARENT read at import
}


@pytest.mark.parametrize("guard", list(GUARDS))
def test_a_rank_whose_launcher_died_before_it_asked_ends_at_once(tmp_path, guard):
    setup, ask = GUARDS[guard]
    survived = tmp_path / "survived"
    script = tmp_path / "rank.py"
    ready = tmp_path / "ready"
    script.write_text(ORPHAN.format(repo=str(REPO), kv=str(REPO / "kv_cache_benchmark"), setup=setup, ask=ask,
                                    survived=str(survived), ready=str(ready)))
    # The launcher starts the rank in the background and, once the rank has read its parent,
    # exits before the rank asks the kernel: a prterun SIGKILLed at that moment.
    launcher = subprocess.run(["sh", "-c", f'"{sys.executable}" "{script}" </dev/null >/dev/null 2>&1 & '
                               f'while [ ! -e "{ready}" ]; do sleep 0.05; done; echo $!'],
                              capture_output=True, text=True, check=True)
    rank = int(launcher.stdout.strip())
    wait_for(lambda: not alive([rank]), 120, message=lambda: f"rank {rank} still alive")
    assert not survived.exists()


def test_a_rank_whose_output_has_no_reader_ends_when_it_reports(tmp_path):
    """The start-up line is also a liveness check: with the launcher gone its pipe has no reader."""
    gate = tmp_path / "go"
    program = (f"import os, sys, time; sys.path.insert(0, {str(REPO)!r})\n"
               "from mlpstorage_py.launch.rank_guard import report_started\n"
               f"while not os.path.exists({str(gate)!r}): time.sleep(0.05)\n"
               "report_started(0)\n"
               "sys.exit(0)\n")
    rank = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    rank.stdout.close()  # the reader is gone before the rank reports
    gate.write_text("x")
    assert rank.wait(timeout=120) == 1, rank.stderr.read()
