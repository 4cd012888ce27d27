"""What every DLIO rank runs: `python -m mlpstorage_py.benchmarks.dlio_rank [OPTIONS] -- <DLIO arguments>`.

DLIO's own main, unchanged in what it measures, with these around it:
- `--s3dlio`: the s3dlio plug-ins (storage/dlio_s3dlio.py) for object storage;
- `--s3-endpoints URL,... --s3-strategy S`: several endpoints (storage/endpoints.py), for the
  plug-ins, and as S3_ENDPOINT_URIS for the fork's own s3dlio path (per_rank only);
- `--epoch-cache FILE`: between epochs, one rank per host drops that host's page cache and rank 0
  appends what every host did to FILE (JSON lines), so epoch 2 reads storage, not the memory
  epoch 1 filled. It runs after an epoch's statistics are closed and before the next opens,
  outside DLIO's timed spans; DLIO 2.0.0 has no hook of its own for this;
- `--writer-record FILE`: once DLIO has finished, rank 0 writes which checkpoint writer the
  fork (3.0.x) loaded: the reference tool's `mlpstorage_py.checkpointing.StreamingCheckpointing`
  (which our package does not provide) or the fork's own fallback writer;
- `--libraries DIR`: once DLIO has finished (or failed), every rank records the DLIO, s3dlio,
  torch, numpy and mpi4py it imported (results/libraries.py): the engine's environment, which
  may not be the launcher's;
- any rank's uncaught exception (Hydra turns one into exit 1) aborts the whole MPI job at once,
  after printing the traceback: a rank that fails must not leave the others waiting forever in
  a collective (DLIO 2.0.0's IndexError with a file count that does not divide by the ranks);
- SIGTERM ends a rank at once, as the kernel does by default. DLIO imports dftracer, which puts a
  Python handler on SIGTERM; such a handler runs only when the rank's main thread is back in the
  interpreter, never while it waits in an MPI collective for a peer that is already gone. That
  rank would outlive its launcher (PR_SET_PDEATHSIG sends SIGTERM, launch/rank_guard.py);
- its own temporary directory (launch/rank_temp.py), removed once DLIO is done: torch's reader
  workers leave their multiprocessing directories there;
- TensorFlow is loaded at its first use, not at DLIO's import: DLIO 2.0.0 imports it at module
  level (profiler_factory imports tf_profiler: `import tensorflow as tf`), though our workloads
  (pytorch, no TF profiler) never use it, and it was most of every rank's start-up (6.4 s to
  import DLIO, 2.0 s without it, on a 2-core VM; the fork imports it only where it is used). A
  config that selects a TF framework, reader or profiler gets the real one at its first
  `tf.<name>` or `from tensorflow.<sub> import ...`. importlib.util.LazyLoader cannot do this: it
  loads at any attribute, and dftracer's `inspect.stack()`, run as each DLIO module is imported,
  reads `__file__` of every module in sys.modules.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import traceback
import types
from importlib import util
from typing import Any

from mlpstorage_py.launch import rank_temp
from mlpstorage_py.launch.rank_guard import die_with_parent, env_rank, report_started
from mlpstorage_py.telemetry import rank_progress

_NODE_COMM: Any = None
# The process that started this rank (prterun, prted, Hydra's proxy): once it is gone, MPI_Abort
# has nobody to ask to end the job and waits forever.
_LAUNCHER = os.getppid()


def _node_comm() -> Any:
    global _NODE_COMM
    if _NODE_COMM is None:
        from mpi4py import MPI

        _NODE_COMM = MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED)
    return _NODE_COMM


def drop_between_epochs(record: str, next_epoch: int) -> None:
    """One rank per host drops its page cache; rank 0 records every host's outcome."""
    from mpi4py import MPI

    from mlpstorage_py.launch.hostinfo import drop_here

    world = MPI.COMM_WORLD
    mine = None
    if _node_comm().Get_rank() == 0:
        mine = {"rank": world.Get_rank(), "hostname": socket.gethostname(), "page_cache": drop_here()}
    outcomes = world.gather(mine, root=0)
    if world.Get_rank() == 0:
        with open(record, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"before_epoch": next_epoch, "hosts": [o for o in outcomes or [] if o]}) + "\n")
    world.Barrier()


def install_epoch_drop(record: str) -> None:
    """DLIO calls ConfigArguments.reconfigure(epoch + 1) once an epoch has ended (and once with
    1 before the first): the seam between epochs."""
    from dlio_benchmark.utils.config import ConfigArguments

    original = ConfigArguments.reconfigure

    def reconfigure(self: Any, epoch_number: int) -> Any:
        if 1 < epoch_number <= int(self.epochs):
            drop_between_epochs(record, epoch_number)
        return original(self, epoch_number)

    ConfigArguments.reconfigure = reconfigure


# The checkpoint writers the fork may load, by module: what each is.
WRITERS = {
    "mlpstorage_py.checkpointing": "StreamingCheckpointing (the reference tool's mlpstorage_py.checkpointing)",
    "dlio_benchmark.checkpointing.simple_streaming_checkpointing":
        "SimpleStreamingCheckpointing (the fork's fallback: zero-filled buffers, fsync on every file)",
}


def record_writer(path: str, rank: int) -> None:
    """Rank 0: the writer modules DLIO loaded during the run (none for a 2.0.0 or training run).
    `rank` is read before DLIO runs: the fork finalizes MPI before its main returns."""
    if rank != 0:
        return
    loaded = [{"module": m, "writer": w} for m, w in WRITERS.items() if m in sys.modules]
    with open(path, "w", encoding="utf-8") as fh:
        json.dump({"writers_loaded": loaded}, fh, indent=2)


class _LoadedOnUse(types.ModuleType):
    """A module whose code has not run yet: it runs at the first name the module lacks. The
    attributes the import system sets (`__file__`, `__spec__`, ...) are there before, so a walk
    over sys.modules reading them does not load it; `__path__` is not, so importing a submodule
    loads the package first, as an import would. No lock: DLIO's TF code first touches it as
    that code is imported, in the main thread."""

    def __getattr__(self, name: str) -> Any:
        spec = self.__spec__
        assert spec is not None and spec.loader is not None, "made from a found module's spec"
        self.__class__ = types.ModuleType  # type: ignore[assignment]  # from here on an ordinary module
        if spec.submodule_search_locations is not None:  # a package's
            self.__path__ = spec.submodule_search_locations
        try:
            spec.loader.exec_module(self)
        except BaseException:
            sys.modules.pop(self.__name__, None)  # as a failed import leaves it
            raise
        return getattr(self, name)


def defer_tensorflow() -> None:
    """Register TensorFlow (when installed and not yet imported) to be loaded on first use."""
    spec = None if "tensorflow" in sys.modules else util.find_spec("tensorflow")
    if spec is None or spec.loader is None:
        return
    module = util.module_from_spec(spec)
    del module.__path__
    module.__class__ = _LoadedOnUse
    sys.modules["tensorflow"] = module


def load_dlio() -> Any:
    """DLIO's main, with SIGTERM given back its default action (the import installs dftracer's)
    and TensorFlow deferred to its first use."""
    defer_tensorflow()
    from dlio_benchmark.main import main as dlio_main

    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    return dlio_main


def _abort(code: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    if os.getppid() != _LAUNCHER:  # the launcher is gone: no job left to abort
        os._exit(code)
    from mpi4py import MPI

    MPI.COMM_WORLD.Abort(code)


def main(argv: list[str]) -> None:
    """Both entry points come here: `-m` (DLIO 2.0.0) and the fork's `-c` boot (dlio_engine)."""
    die_with_parent(_LAUNCHER)
    split = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(prog="dlio_rank")
    parser.add_argument("--s3dlio", action="store_true")
    parser.add_argument("--epoch-cache")
    parser.add_argument("--writer-record")
    parser.add_argument("--libraries")
    parser.add_argument("--s3-endpoints")
    parser.add_argument("--s3-strategy", default="per_rank")
    opts = parser.parse_args(argv[:split])
    sys.argv = ["dlio_benchmark", *argv[split + 1:]]
    endpoints = None
    if opts.s3_endpoints:
        from mlpstorage_py.storage.endpoints import ENV_LIST, from_rank_args

        endpoints = from_rank_args(opts.s3_endpoints, opts.s3_strategy)
        os.environ[ENV_LIST] = ",".join(endpoints.urls)  # the fork's own s3dlio path: rank mod n
    if opts.s3dlio:
        from mlpstorage_py.storage import dlio_s3dlio

        dlio_s3dlio.install(endpoints, env_rank())
    if opts.epoch_cache:
        install_epoch_drop(opts.epoch_cache)
    rank = -1
    if opts.writer_record:
        from mpi4py import MPI

        rank = MPI.COMM_WORLD.Get_rank()
    dlio_main = load_dlio()
    own = rank_temp.make()
    report_started()  # DLIO's imports done; it initializes MPI itself (the fork turns mpi4py's auto-init off)
    try:
        dlio_main()
    except SystemExit as exc:
        if exc.code not in (0, None):
            print(f"dlio_rank: DLIO exited with {exc.code} on {socket.gethostname()}; aborting the MPI job",
                  file=sys.stderr)
            _finish(opts, rank, own, ok=False)
            _abort(int(exc.code) if isinstance(exc.code, int) else 1)
        _finish(opts, rank, own, ok=True)
        raise
    except BaseException:
        traceback.print_exc()
        _finish(opts, rank, own, ok=False)
        _abort(1)
    _finish(opts, rank, own, ok=True)


def _finish(opts: argparse.Namespace, rank: int, own: str | None, ok: bool) -> None:
    """What a rank does once DLIO is done: its temporary directory removed (its workers have
    ended or been stopped), its libraries recorded always, the writer on success."""
    rank_temp.remove(own)
    reporter = rank_progress.current()
    if ok and reporter is not None:  # its share is done: it waits for the others from here
        reporter.finish()
    if opts.libraries:
        from mlpstorage_py.results import libraries

        libraries.report(opts.libraries)
    if ok and opts.writer_record:
        record_writer(opts.writer_record, rank)


if __name__ == "__main__":
    main(sys.argv[1:])
