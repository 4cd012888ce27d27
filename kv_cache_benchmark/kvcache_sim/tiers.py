"""The memory tiers of the KV cache (GPU through torch, CPU), and what every tier offers.

A tier's write takes an entry's content (a KVPayload, produced on demand, or an array being
demoted from a faster tier); its read moves the entry's bytes and returns how many it moved.
Reads go through a borrowed chunk buffer, so a read costs no allocation as large as the entry.
The storage tier is in storage.py, the cache that places entries across tiers in cache.py.
"""

from __future__ import annotations

import time
import warnings
from typing import Any, NamedTuple

import numpy as np

from kvcache_sim.payload import SHARED_BUFFERS, ChunkBuffers, Content, KVPayload, byte_view, chunks

GIB = 1 << 30


class IoTiming(NamedTuple):
    """Seconds one tier operation took; for storage, `device` is the fsync span (write) or the
    span of open() and the data reads of a page-cache-dropped file (read), and `host` the rest."""

    total: float
    device: float = 0.0
    host: float = 0.0


def numpy_dtype(dtype_name: str) -> np.dtype:
    """The numpy type KV data is stored as (bfloat16 has none: stored as 16-bit words)."""
    return np.dtype({"float32": np.float32, "float16": np.float16, "bfloat16": np.uint16, "int8": np.int8}[dtype_name])


class Tier:
    """One level of the cache. Handles are whatever the tier needs to find the data again."""

    name = "tier"

    def __init__(self, capacity_bytes: int, buffers: ChunkBuffers | None = None) -> None:
        self.capacity = int(capacity_bytes)
        self.buffers = buffers or SHARED_BUFFERS

    def write(self, key: str, content: Content) -> tuple[Any, IoTiming]:
        raise NotImplementedError

    def read(self, handle: Any) -> tuple[int, IoTiming]:
        raise NotImplementedError

    def export(self, handle: Any) -> np.ndarray:
        """The entry's data as a host array, for demotion to the next tier (not timed as a read)."""
        raise NotImplementedError

    def remove(self, handle: Any) -> None:
        pass

    def close(self) -> None:
        pass


class CpuTier(Tier):
    """Host memory: a private contiguous copy per entry (the configured CPU tier is real
    memory); a read copies it out chunk by chunk (the transfer a server makes to bring KV back
    to the accelerator)."""

    name = "cpu"

    def write(self, key: str, content: Content) -> tuple[Any, IoTiming]:
        start = time.perf_counter()
        if isinstance(content, KVPayload):
            copy = content.materialize()
        else:
            copy = np.array(content, copy=True, order="C")
        return copy, IoTiming(time.perf_counter() - start)

    def read(self, handle: Any) -> tuple[int, IoTiming]:
        start = time.perf_counter()
        flat = byte_view(handle)
        with self.buffers.borrow() as buffer:
            step = buffer.size
            for begin in range(0, flat.size, step):
                piece = flat[begin:begin + step]
                np.copyto(buffer[:piece.size], piece)
        return flat.size, IoTiming(time.perf_counter() - start)

    def export(self, handle: Any) -> np.ndarray:
        return handle


class GpuTier(Tier):
    """Accelerator memory through torch (CUDA); present only when a device is. An entry is one
    uint8 tensor filled chunk by chunk from host memory."""

    name = "gpu"

    def __init__(self, capacity_bytes: int, device: str = "cuda:0", buffers: ChunkBuffers | None = None) -> None:
        super().__init__(capacity_bytes, buffers)
        import torch

        self.torch = torch
        self.device = torch.device(device)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def write(self, key: str, content: Content) -> tuple[Any, IoTiming]:
        torch = self.torch
        start = time.perf_counter()
        shape, dtype = tuple(content.shape), np.dtype(content.dtype)
        tensor = torch.empty(int(content.nbytes), dtype=torch.uint8, device=self.device)
        with self.buffers.borrow() as buffer, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # read-only array views are fine: copy_ copies them
            done = 0
            for piece in chunks(content, buffer):
                tensor[done:done + piece.size].copy_(torch.from_numpy(piece))
                done += piece.size
        self._sync()
        return (tensor, dtype, shape), IoTiming(time.perf_counter() - start)

    def read(self, handle: Any) -> tuple[int, IoTiming]:
        start = time.perf_counter()
        out = handle[0].clone()
        self._sync()
        size = int(out.numel())
        del out
        return size, IoTiming(time.perf_counter() - start)

    def export(self, handle: Any) -> np.ndarray:
        tensor, dtype, shape = handle
        return tensor.cpu().numpy().view(dtype).reshape(shape)


def gpu_available() -> bool:
    try:
        import torch
    except Exception:  # any import failure means no GPU tier
        return False
    try:
        return bool(torch.cuda.is_available())
    except Exception:
        return False
