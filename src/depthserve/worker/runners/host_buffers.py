"""Page-locked host tensors kept for reuse, so copies to and from a GPU run asynchronously and cost no allocation.

Pinning memory is slow (a driver call per buffer), and only pinned memory lets a copy overlap compute, so
buffers are kept by shape and type and handed out again. Idle buffers beyond `max_idle_bytes` are freed,
oldest first, so a worker that saw many image sizes does not hold them all.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import torch

Shape = tuple[int, ...]


class HostBuffers:
    """A thread-safe pool of host tensors by (shape, dtype), pinned when `pin` is set."""

    def __init__(self, pin: bool, max_idle_bytes: int = 4 * 2**30) -> None:
        self.pin = pin
        self.max_idle_bytes = max_idle_bytes
        self.allocated = 0  # buffers created, for tests and logs
        self._idle: OrderedDict[int, tuple[Shape, torch.dtype, torch.Tensor]] = OrderedDict()
        self._idle_bytes = 0
        self._lock = threading.Lock()

    def take(self, shape: Shape, dtype: torch.dtype) -> torch.Tensor:
        """Give an idle buffer of this shape and type, or a new one (its contents are whatever was left)."""
        with self._lock:
            for key, (idle_shape, idle_dtype, tensor) in self._idle.items():
                if idle_shape == shape and idle_dtype == dtype:
                    del self._idle[key]
                    self._idle_bytes -= _nbytes(tensor)
                    return tensor
            self.allocated += 1
        return torch.empty(shape, dtype=dtype, pin_memory=self.pin)

    def give(self, *tensors: torch.Tensor | None) -> None:
        """Return buffers once nothing (no copy in flight) uses them any more."""
        with self._lock:
            for tensor in tensors:
                if tensor is None:
                    continue
                self._idle[id(tensor)] = (tuple(tensor.shape), tensor.dtype, tensor)
                self._idle_bytes += _nbytes(tensor)
            while self._idle_bytes > self.max_idle_bytes and self._idle:
                _, (_, _, oldest) = self._idle.popitem(last=False)
                self._idle_bytes -= _nbytes(oldest)

    @property
    def idle_bytes(self) -> int:
        """Bytes held in idle buffers."""
        return self._idle_bytes


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()
