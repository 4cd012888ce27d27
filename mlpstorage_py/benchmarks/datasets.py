"""Where a training dataset lives: a directory (file storage) or an s3:// prefix (object storage).

Training datagen and run ask the same questions of either (is it empty, how many training files,
the datagen manifest beside the data); the answers come from the file system or from s3dlio.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from mlpstorage_py.errors import TimeoutExpired, UsageError
from mlpstorage_py.results.io import read_json, write_json
from mlpstorage_py.storage import s3

MANIFEST = ".mlps-datagen-manifest.json"
# What DLIO's reader section gets for an object run: the s3dlio reader of storage/dlio_s3dlio.py
# (named, not imported here: DLIO is heavy).
OBJECT_READER = {"reader_classname": "mlpstorage_py.storage.dlio_s3dlio.S3dlioReader"}


class FileDataset:
    """A dataset directory on a POSIX file system."""

    storage = "file"

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def __str__(self) -> str:
        return str(self.folder)

    def engine_location(self) -> dict[str, Any]:
        """The workload keys that point DLIO at the data."""
        return {"dataset": {"data_folder": str(self.folder)}}

    def check(self, endpoints: tuple[str, ...] = ()) -> None:
        """Nothing to reach: the lifecycle's file-system gates have looked at the directory."""

    def is_empty(self) -> bool:
        return not (self.folder.exists() and any(self.folder.iterdir()))

    def clear(self) -> None:
        shutil.rmtree(self.folder)

    def prepare(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)

    def count_train(self) -> int:
        return sum(1 for p in (self.folder / "train").rglob("*") if p.is_file())

    def read_manifest(self) -> dict[str, Any] | None:
        path = self.folder / MANIFEST
        return read_json(path) if path.is_file() else None

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        write_json(self.folder / MANIFEST, manifest)


class ObjectDataset:
    """A dataset below an s3://bucket/prefix, every object written and read through s3dlio."""

    storage = "object"

    def __init__(self, uri: s3.ObjectUri) -> None:
        self.uri = uri

    def __str__(self) -> str:
        return str(self.uri)

    def engine_location(self) -> dict[str, Any]:
        return {"storage": {"storage_type": "s3", "storage_root": self.uri.bucket},
                "dataset": {"data_folder": self.uri.prefix}}

    def check(self, endpoints: tuple[str, ...] = ()) -> None:
        """The endpoint (every one of a run's list) answers and holds the bucket."""
        s3.check_reachable(self.uri, endpoints=endpoints)

    def _list(self, uri: s3.ObjectUri) -> list[str]:
        # In a child, as every listing the tool makes: s3dlio 0.9.112 holds the GIL through a
        # listing, which stalls any Python thread of this process meanwhile.
        try:
            return s3.call_in_child("list", uri.folder, True, timeout=s3.REACH_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise TimeoutExpired(f"listing {uri.folder} took over {s3.REACH_TIMEOUT_S:.0f} s") from None

    def is_empty(self) -> bool:
        return not self._list(self.uri)

    def clear(self) -> None:
        import s3dlio

        s3dlio.delete(self.uri.folder, recursive=True)

    def prepare(self) -> None:
        """Prefixes need no creation."""

    def count_train(self) -> int:
        return sum(1 for uri in self._list(self.uri.child("train")) if not uri.endswith("/"))

    def read_manifest(self) -> dict[str, Any] | None:
        import s3dlio

        uri = str(self.uri.child(MANIFEST))
        if not s3dlio.exists(uri):
            return None
        return json.loads(s3dlio.get(uri).to_bytes())

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        import s3dlio

        s3dlio.put_bytes(str(self.uri.child(MANIFEST)), json.dumps(manifest, indent=2).encode())


def locate(data_dir: str, storage: str, model: str) -> FileDataset | ObjectDataset:
    """The dataset of `model` below --data-dir, for the storage API of the invocation."""
    if storage == "object":
        return ObjectDataset(s3.parse_uri(data_dir, "--data-dir").child(model))
    if s3.is_object_uri(data_dir):
        raise UsageError("an s3:// --data-dir needs the `object` storage positional")
    return FileDataset(Path(os.path.expanduser(data_dir)).resolve() / model)
