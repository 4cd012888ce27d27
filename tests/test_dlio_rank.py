"""The DLIO rank (benchmarks/dlio_rank.py): its own exits (a rank must end when told to, wherever
it is waiting, and never wait on a launcher that is gone) and TensorFlow loaded only on first use."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlpstorage_py.benchmarks import dlio_rank

# DLIO's import installs dftracer's Python handler on SIGTERM; load_dlio gives the default back.
# The rank then blocks in a C call, as one does in an MPI collective.
BLOCKED_RANK = """
import ctypes, signal, sys
from mlpstorage_py.benchmarks.dlio_rank import defer_tensorflow, load_dlio
defer_tensorflow()  # as load_dlio does, before DLIO's import
import dlio_benchmark.main
print("handler" if signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None) else "default", flush=True)
load_dlio()
print("ready", flush=True)
ctypes.CDLL(None).sleep(60)
"""


def test_sigterm_ends_a_rank_blocked_in_c():
    child = subprocess.Popen([sys.executable, "-c", BLOCKED_RANK], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             text=True)
    try:
        assert child.stdout.readline().strip() == "handler"  # what the rank has to undo
        assert child.stdout.readline().strip() == "ready"
        time.sleep(0.2)
        sent = time.monotonic()
        child.send_signal(signal.SIGTERM)
        code = child.wait(timeout=10)
    finally:
        child.kill()
        child.wait()
    # dftracer's handler would have turned the signal into SystemExit(15) -> MPI_Abort
    assert code == -signal.SIGTERM
    assert time.monotonic() - sent < 5


def test_abort_without_a_launcher_exits_without_mpi(monkeypatch):
    class Exited(Exception):
        pass

    def exit_now(code: int) -> None:
        raise Exited(code)

    monkeypatch.setattr(dlio_rank, "_LAUNCHER", -1)  # the rank's parent is no longer the launcher
    monkeypatch.setattr(dlio_rank.os, "_exit", exit_now)
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # MPI_Abort would need it (and wait forever)
    with pytest.raises(Exited) as exited:
        dlio_rank._abort(3)
    assert exited.value.args == (3,)


# What a rank imports, then DLIO 2.0.0's own TF path: tf_framework uses `tf.` and imports
# `tensorflow.python.framework` at its import.
TF_ON_USE = """
import sys
from mlpstorage_py.benchmarks.dlio_rank import load_dlio
load_dlio()
print("deferred" if "tensorflow.python" not in sys.modules else "loaded", flush=True)
from dlio_benchmark.framework.tf_framework import TFFramework, errors
from dlio_benchmark.profiler import tf_profiler
tf = sys.modules["tensorflow"]
print(tf_profiler.tf is tf, errors.NotFoundError is tf.errors.NotFoundError, int(tf.constant(1).numpy()),
      bool(tf.__version__), flush=True)
"""


def test_dlio_imports_without_tensorflow_which_loads_on_first_use():
    done = subprocess.run([sys.executable, "-c", TF_ON_USE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[:2] == ["deferred", "True True 1 True"], done.stdout


# A stand-in package named tensorflow: what runs when, without TensorFlow's own cost.
FAKE_INIT = "import sys; print('init ran', flush=True); sys.modules[__name__].version = 7\n"
ON_FIRST_USE = """
import inspect, sys
from mlpstorage_py.benchmarks.dlio_rank import defer_tensorflow
defer_tensorflow()
import tensorflow
inspect.stack()  # what dftracer does: reads every module's __file__
print("file", tensorflow.__file__.endswith("__init__.py"), flush=True)
if sys.argv[1] == "attribute":
    print("version", tensorflow.version)
elif sys.argv[1] == "submodule":
    from tensorflow.python import value
    print("value", value, tensorflow.version)
else:
    try:
        tensorflow.version
    except ZeroDivisionError:
        print("failed", "tensorflow" in sys.modules, flush=True)
    import tensorflow
"""


@pytest.mark.parametrize("first_use, expected", [
    ("attribute", ["file True", "init ran", "version 7"]),
    ("submodule", ["file True", "init ran", "value 3 7"]),
])
def test_the_deferred_module_runs_at_its_first_use(tmp_path, first_use, expected):
    package = tmp_path / "fake" / "tensorflow"
    (package / "python").mkdir(parents=True)
    (package / "__init__.py").write_text(FAKE_INIT)
    (package / "python" / "__init__.py").write_text("value = 3\n")
    done = subprocess.run([sys.executable, "-c", ON_FIRST_USE, first_use], capture_output=True, text=True,
                          timeout=60, env=_with_path(tmp_path / "fake"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == expected


def test_a_failed_first_use_fails_as_a_failed_import(tmp_path):
    """It is gone from sys.modules, so the next import tries again and fails the same way."""
    package = tmp_path / "fake" / "tensorflow"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(FAKE_INIT + "1 / 0\n")
    done = subprocess.run([sys.executable, "-c", ON_FIRST_USE, "failing"], capture_output=True, text=True,
                          timeout=60, env=_with_path(tmp_path / "fake"))
    assert done.stdout.splitlines() == ["file True", "init ran", "failed False", "init ran"]
    assert done.returncode == 1 and done.stderr.rstrip().endswith("ZeroDivisionError: division by zero")


def _with_path(first: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(first), os.environ.get("PYTHONPATH")]))}


# A real run through the rank's main: DLIO 2.0.0 generates a few files, then trains one epoch with
# pytorch's loader. TensorFlow never loads.
REAL_RUN = """
import atexit, sys
atexit.register(lambda: print("tensorflow", "tensorflow.python" in sys.modules, flush=True))
from mlpstorage_py.benchmarks.dlio_rank import main
main(sys.argv[1:])
"""


def test_a_pytorch_run_never_loads_tensorflow(tmp_path):
    params = ["workflow.generate_data=True", "workflow.checkpoint=False", f"dataset.data_folder={tmp_path / 'data'}",
              "dataset.num_files_train=4", "dataset.record_length=65536", "dataset.record_length_stdev=0",
              "dataset.record_length_resize=0", "train.epochs=1", "train.computation_time=0.01",
              "reader.batch_size=2", "reader.read_threads=1", f"output.folder={tmp_path / 'out'}"]
    argv = ["--", "workload=unet3d_a100", *(f"++workload.{p}" for p in params), f"hydra.run.dir={tmp_path / 'out'}"]
    done = subprocess.run([sys.executable, "-c", REAL_RUN, *argv], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["num_files_train"] == 4
    assert done.stdout.splitlines()[-1] == "tensorflow False"
