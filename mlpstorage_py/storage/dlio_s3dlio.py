"""s3dlio inside DLIO 2.0.0, installed by each rank (`benchmarks/dlio_rank.py --s3dlio`).

DLIO 2.0.0's `storage_type: s3` is a stub (it hands s3:// paths to local file calls) and its
generators write with numpy/PIL to a path, so `install()` adds three plug-ins before DLIO's own
main runs unchanged (same Hydra configuration, same outputs, same metrics):

- S3dlioStorage answers DLIO's storage calls for `storage_type: s3` (bucket = storage_root) through
  s3dlio, so DLIO's own file-list logic lists the bucket. A rank must not start s3dlio's I/O runtime
  itself: its PyTorch data-loader workers are forked from it, and a fork of a process whose runtime
  is running hangs in its first request (DLIO 2.0.0's spawn and forkserver contexts do not work at
  all). So the rank's few listing calls run s3dlio in a short-lived child process, and only the
  forked workers (and datagen, which forks nothing) do I/O in-process;
- generators for npz and jpeg/png build every file exactly as DLIO's do (same names, the same
  seeded dimensions, the same encoders) in memory and PUT it through s3dlio, ranks in parallel;
- S3dlioReader (given to DLIO as reader.reader_classname) GETs each object through s3dlio and
  decodes it as DLIO's npz and image readers decode a file.
"""

from __future__ import annotations

import fnmatch
import io
import os
from typing import Any

import numpy as np
import s3dlio  # noqa: F401 - imported by every rank, so its version is recorded (EDN-05)
from dlio_benchmark.common.enumerations import Compression, FormatType, MetadataType, NamespaceType, StorageType
from dlio_benchmark.data_generator.data_generator import DataGenerator
from dlio_benchmark.data_generator.generator_factory import GeneratorFactory
from dlio_benchmark.reader.reader_handler import FormatReader
from dlio_benchmark.storage.storage_factory import StorageFactory
from dlio_benchmark.storage.storage_handler import DataStorage, Namespace
from dlio_benchmark.utils.config import ConfigArguments
from dlio_benchmark.utils.utility import progress
from PIL import Image

from mlpstorage_py.storage.endpoints import Endpoints
from mlpstorage_py.storage.multi import ObjectIO
from mlpstorage_py.storage.s3 import call_in_child as _in_child
from mlpstorage_py.telemetry import rank_progress

READER_CLASS = f"{__name__}.S3dlioReader"
IMAGE_FORMATS = (FormatType.JPEG, FormatType.PNG)


class S3dlioStorage(DataStorage):
    """DLIO's storage interface over one bucket; ids are keys below it (or whole s3:// URIs)."""

    def __init__(self, namespace: str, framework: Any = None) -> None:
        super().__init__(None)  # no framework-native I/O: every call below goes through s3dlio
        self.namespace = Namespace(namespace, NamespaceType.FLAT)

    def get_uri(self, id: str) -> str:  # `id`: DLIO's parameter name
        return id if id.startswith("s3://") else f"s3://{self.namespace.name}/{id.lstrip('/')}"

    def create_namespace(self, exist_ok: bool = False) -> bool:
        return True  # the bucket was checked before DLIO started

    def get_namespace(self) -> str:
        return self.namespace.name

    def create_node(self, id: str, exist_ok: bool = False) -> bool:
        return True  # prefixes exist once an object is written below them

    def get_node(self, id: str = "") -> MetadataType | None:
        uri = self.get_uri(id).rstrip("/")
        if _in_child("exists", uri):
            return MetadataType.FILE
        return MetadataType.DIRECTORY if _in_child("list", uri + "/", False) else None

    def walk_node(self, id: str, use_pattern: bool = False) -> list[str]:
        """Names directly below a prefix, or the URIs matching a glob (DLIO's subfolder layout)."""
        uri = self.get_uri(id)
        if not use_pattern:
            return [u.rstrip("/").rsplit("/", 1)[-1] for u in _in_child("list", uri.rstrip("/") + "/", False)]
        base = uri[:uri.index("*")].rsplit("/", 1)[0] + "/"
        return [u for u in _in_child("list", base, True) if fnmatch.fnmatchcase(u, uri)]

    def delete_node(self, id: str) -> bool:
        _in_child("delete", self.get_uri(id).rstrip("/") + "/", True)
        return True

    def put_data(self, id: str, data: Any, offset: int | None = None, length: int | None = None) -> None:
        body = data.encode() if isinstance(data, str) else data
        _IO.put(self.get_uri(id), body)
        rank_progress.count(1, "objects", written=len(body))  # socket I/O: /proc/<pid>/io does not see it

    def get_data(self, id: str, data: Any = None, offset: int | None = None, length: int | None = None) -> bytes:
        body = bytes(_IO.get(self.get_uri(id)))
        rank_progress.count(1, "objects", read=len(body))
        return body

    def get_basename(self, id: str) -> str:
        return os.path.basename(id)


class _ObjectGenerator(DataGenerator):
    """DLIO's generation loop (its file list, its seed, its dimensions), writing through s3dlio."""

    def encode(self, dim1: int, dim2: int) -> bytes:
        raise NotImplementedError

    def generate(self) -> None:
        super().generate()  # DLIO's file list and node creation, then a barrier
        np.random.seed(10)
        dim = self.get_dimension(self.total_files_to_generate)
        total = int(self.total_files_to_generate)
        for i in range(self.my_rank, total, self.comm_size):
            _IO.put(self.storage.get_uri(self._file_list[i]), self.encode(int(dim[2 * i]), int(dim[2 * i + 1])))
            progress(i + 1, total, f"Generating {self.format} objects")
        np.random.seed()


class NPZObjectGenerator(_ObjectGenerator):
    def encode(self, dim1: int, dim2: int) -> bytes:
        records = np.random.randint(255, size=(dim1, dim2, self.num_samples), dtype=np.uint8)
        buffer = io.BytesIO()
        save = np.savez_compressed if self.compression == Compression.ZIP else np.savez
        save(buffer, x=records, y=[0] * self.num_samples)
        return buffer.getvalue()


class ImageObjectGenerator(_ObjectGenerator):
    def encode(self, dim1: int, dim2: int) -> bytes:
        records = np.random.randint(255, size=(dim1, dim2), dtype=np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(records).save(buffer, format=str(self.format).upper(), bits=8)
        return buffer.getvalue()


def object_uri(filename: str) -> str:
    """The s3:// URI of a sample file: DLIO 2.0.0 passes every listed name through os.path.abspath
    when it maps samples to ranks, which turns s3://b/k into <cwd>/s3:/b/k."""
    cut = filename.find("s3:/")
    return filename if cut < 0 else "s3://" + filename[cut + len("s3:/"):].lstrip("/")


class S3dlioReader(FormatReader):
    """One object per file: GET through s3dlio, then decode as DLIO's npz or image reader does."""

    def __init__(self, dataset_type: Any, thread_index: int, epoch: int) -> None:
        super().__init__(dataset_type, thread_index)
        self._npz = ConfigArguments.get_instance().format == FormatType.NPZ

    def open(self, filename: str) -> np.ndarray:
        super().open(filename)
        body = _IO.get(object_uri(filename))
        rank_progress.count(1, "objects", read=len(body))  # in a reader worker: sent as the worker's own line
        data = io.BytesIO(body)
        return np.load(data)["x"] if self._npz else np.asarray(Image.open(data))

    def close(self, filename: str) -> None:
        super().close(filename)

    def get_sample(self, filename: str, sample_index: int) -> None:
        super().get_sample(filename, sample_index)
        data = self.open_file_map[filename]
        if self._npz:
            data[..., sample_index]  # the sample touched, as DLIO's NPZ reader does

    def next(self):
        yield from super().next()

    def read_index(self, image_idx: int, step: int) -> Any:
        return super().read_index(image_idx, step)

    def finalize(self) -> Any:
        return super().finalize()

    def is_index_based(self) -> bool:
        return True

    def is_iterator_based(self) -> bool:
        return True


_IO = ObjectIO(None, 0)  # this rank's object I/O (install)
_dlio_storage = StorageFactory.get_storage
_dlio_generator = GeneratorFactory.get_generator


def _storage(storage_type: StorageType, namespace: str, framework: Any = None) -> DataStorage:
    if storage_type == StorageType.S3:
        return S3dlioStorage(namespace, framework)
    return _dlio_storage(storage_type, namespace, framework)


def _generator(format_type: FormatType) -> DataGenerator:
    if ConfigArguments.get_instance().storage_type != StorageType.S3:
        return _dlio_generator(format_type)
    if format_type == FormatType.NPZ:
        return NPZObjectGenerator()
    if format_type in IMAGE_FORMATS:
        return ImageObjectGenerator()
    raise ValueError(f"object-storage datagen supports npz, jpeg and png, not {format_type}")


def install(endpoints: Endpoints | None = None, rank: int = 0) -> None:
    """Route DLIO's storage and generator factories through s3dlio for `storage_type: s3`, over
    the run's endpoints where it has several (storage/multi.py; `rank` picks a per_rank endpoint)."""
    global _IO
    _IO = ObjectIO(endpoints, rank)
    _IO.point()  # the rank's listings (in child processes) go to its endpoint too
    StorageFactory.get_storage = staticmethod(_storage)
    GeneratorFactory.get_generator = staticmethod(_generator)
