"""The DiskANN index build, as a child process of `vectordb datagen --vdb-engine diskann`, so its
peak memory is its own (the parent reads the child's ru_maxrss from wait4) and a build that
exceeds its memory takes down only itself.

Run as: python -P -m mlpstorage_py.vectordb.diskann_build SPEC.json
SPEC holds "vectors" (the .bin file), "index_dir" and "native" (diskann_engine.BuildParams.native());
the child writes the build's "seconds" and its own "peak_memory_bytes" to SPEC's "output".
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any


def build(spec: dict[str, Any]) -> dict[str, Any]:
    import diskannpy  # type: ignore[import-not-found]  # the engine's prefix, not this environment
    import numpy as np

    native = dict(spec["native"])
    native.pop("expected_pq_bytes", None)
    native["vector_dtype"] = np.float32
    started = time.perf_counter()
    diskannpy.build_disk_index(data=spec["vectors"], index_directory=spec["index_dir"], **native)
    seconds = time.perf_counter() - started
    # this process's peak resident memory: the build's, with the interpreter and diskannpy loaded
    return {"seconds": seconds, "peak_memory_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def main(spec_path: str) -> int:  # pragma: no cover - runs as a child
    from mlpstorage_py.vectordb.diskann_engine import activate

    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    # before diskannpy loads its OpenMP runtime: the build's threads, no more
    os.environ.setdefault("OMP_NUM_THREADS", str(int(spec["native"]["num_threads"]) or os.cpu_count() or 1))
    activate()
    try:
        result = build(spec)
    except BaseException as exc:
        sys.stderr.write(f"{type(exc).__name__}: DiskANN build failed: {' '.join(str(exc).split())[:400]}\n")
        return 1
    Path(spec["output"]).write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
