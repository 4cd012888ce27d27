"""Filesystem separation (Rules 3.4.2, 4.4.2): prove data and results live on different filesystems.

The probe creates a uniquely named file in the data directory and tries to hard-link it
into the results directory. A hard link cannot cross filesystems (EXDEV), so the kernel,
not a mount-table guess, answers the question.

FsSeparation (fs_separation.json), key "version":
    none    never written, read as 1
    1       the reference tool's (v3.0) and ours: method link_exdev, the data (or checkpoint) and
            results paths and real paths, same_filesystem, probed_at/by_rank/by_host
"""

from __future__ import annotations

import errno
import os
import socket
import uuid
from pathlib import Path
from typing import Any

from mlpstorage_py.errors import PermissionDenied
from mlpstorage_py.results.io import utc_now
from mlpstorage_py.results.schema import FLAG, NUMBER, TEXT, Schema

FILE_NAME = "fs_separation.json"


class FsSeparation(Schema):
    KIND = FILE_NAME
    VERSION_KEY = "version"
    VERSION = 1
    FIELDS = {"method": TEXT, "data_or_chkpt_path": TEXT, "results_path": TEXT, "same_filesystem": FLAG,
              "probed_at": TEXT, "probed_by_rank": NUMBER, "probed_by_host": TEXT}


def probe(data_dir: Path, results_dir: Path) -> dict[str, Any]:
    """Run the link/EXDEV probe and return the fs_separation.json record."""
    name = f".mlpstorage-fs-sep-probe-{uuid.uuid4().hex}"
    source = data_dir / name
    target = results_dir / name
    try:
        fd = os.open(source, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        os.close(fd)
    except OSError as exc:
        raise PermissionDenied(f"cannot create the filesystem probe file in {data_dir}: {exc.strerror}") from exc
    try:
        os.link(source, target)
        same = True
        os.unlink(target)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise PermissionDenied(f"filesystem probe link {source} -> {results_dir} failed: {exc.strerror}") from exc
        same = False
    finally:
        os.unlink(source)
    return FsSeparation({
        "method": "link_exdev",
        "data_or_chkpt_path": str(data_dir),
        "results_path": str(results_dir),
        "data_or_chkpt_realpath": os.path.realpath(data_dir),
        "results_realpath": os.path.realpath(results_dir),
        "same_filesystem": same,
        "probed_at": utc_now(),
        "probed_by_rank": 0,
        "probed_by_host": socket.gethostname(),
    }).to_json()

