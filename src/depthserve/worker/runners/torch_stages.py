"""The overlap pipeline's stages for the torch network, on a GPU (streams, pinned buffers) or a CPU (plain tensors).

On CUDA the batch is assembled in pinned host buffers and copied on a side stream; the forward pass waits
for that copy on the device, not on the host, and its outputs are copied back on another side stream, so
the launching thread returns as soon as the kernels are queued. Nothing in between reads a value back
from the device (the depth tokens kept are counted on the host), so the GPU runs batch after batch with
no gap for Python. On a CPU the same steps run on plain tensors, as `predict_batch` does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from depthserve.codec.intrinsics import to_pixel_intrinsics
from depthserve.model.errors import ModelInputError
from depthserve.model.grid import num_tokens_for, token_grid
from depthserve.model.inference import run_network
from depthserve.model.network import LingBotDepth
from depthserve.model.token_keep import depth_token_keep
from depthserve.model.validation import PredictItem, check_item, check_options
from depthserve.worker.batch_budget import OutOfDeviceMemory
from depthserve.worker.runners.base import Outputs, Prepared
from depthserve.worker.runners.host_buffers import HostBuffers

PeakRecorder = Callable[[Hashable, int, int, int, int], None]  # key, items, peak bytes, tokens, longest tokens
_PLACEHOLDER_K = np.array([[1.0, 0.0, 0.5], [0.0, 1.0, 0.5], [0.0, 0.0, 1.0]])  # stands in for absent intrinsics


def grid_key(prepared: Prepared, num_tokens_range: tuple[int, int]) -> tuple[tuple[int, int], tuple[int, int]]:
    """The (grid, size) a request's forward pass costs memory by; its batch budget is kept per key."""
    inputs = prepared.inputs
    tokens = inputs.num_tokens or num_tokens_for(inputs.resolution_level, num_tokens_range)
    return token_grid(prepared.height, prepared.width, tokens), (prepared.height, prepared.width)


@dataclass
class StagedBatch:
    """A batch on its way in: device tensors (being copied), what the forward needs to know, host buffers held."""

    key: Hashable
    size: int
    num_tokens: int
    apply_mask: bool
    has_k: list[bool]
    images: Tensor  # uint8 [B,H,W,3]
    depth: Tensor | None  # float32 [B,H,W] metres
    keep: Tensor | None  # bool [B,rows*cols]
    kept: tuple[int, int] | None  # fewest and most depth tokens any item keeps
    tokens: tuple[int, int]  # (longest sequence in this batch, longest the grid allows)
    k_px: Tensor | None  # float64 [B,3,3] pixel intrinsics
    ready: Any = None  # CUDA event: the copy in has finished
    host: list[Tensor] = field(default_factory=list)


@dataclass
class ComputedBatch:
    """A batch whose outputs are (being) copied to host tensors."""

    staged: StagedBatch
    outputs: dict[str, Tensor]
    done: Any = None  # CUDA event: the copy out has finished


class TorchStages:
    """BatchStages for one LingBotDepth on one device, at one precision."""

    def __init__(
        self,
        model: LingBotDepth,
        device: torch.device,
        precision: str,
        record_peak: PeakRecorder | None = None,
        after_batch: Callable[[], None] | None = None,
    ) -> None:
        """`after_batch` runs in the stage-out thread once a batch is back (the runner re-reads free memory)."""
        self._after_batch = after_batch
        self.model = model
        self.device = device
        self.precision = precision
        self._record_peak = record_peak
        self._cuda = device.type == "cuda"
        self.buffers = HostBuffers(pin=True) if self._cuda else None
        self._copy_in = torch.cuda.Stream(device) if self._cuda else None
        self._compute = torch.cuda.Stream(device) if self._cuda else None
        self._copy_out = torch.cuda.Stream(device) if self._cuda else None

    def stage_in(self, batch: list[Prepared]) -> StagedBatch:
        """Check and assemble the batch on the host, then start its copy to the device."""
        inputs = batch[0].inputs  # every item shares the options (they are part of the BatchKey)
        check_options(inputs.resolution_level, inputs.num_tokens)
        items = [check_item(PredictItem(_image(p), p.depth, p.intrinsics)) for p in batch]
        sizes = {item.image.shape[:2] for item in items}
        if len(sizes) > 1:
            raise ModelInputError(f"a batch needs one image size, got {sorted(sizes)}")
        height, width = items[0].image.shape[:2]
        num_tokens = inputs.num_tokens or num_tokens_for(inputs.resolution_level, self.model.num_tokens_range)
        rows, cols = token_grid(height, width, num_tokens)
        count = len(items)
        host: list[Tensor] = []
        images = self._host((count, height, width, 3), torch.uint8, host)
        for index, item in enumerate(items):
            np.copyto(images[index].numpy(), item.image)
        depth = keep = None
        kept: tuple[int, int] | None = None
        longest = 1 + rows * cols
        if any(item.depth is not None for item in items):
            depth = self._host((count, height, width), torch.float32, host)
            keep = self._host((count, rows * cols), torch.bool, host)
            for index, item in enumerate(items):
                if item.depth is None:
                    depth[index].zero_()  # a monocular item in a mixed batch: no valid depth, no depth tokens
                    keep[index].zero_()
                else:
                    np.copyto(depth[index].numpy(), item.depth)
                    keep[index].copy_(torch.from_numpy(depth_token_keep(item.depth, rows, cols)))
            counts = keep.sum(dim=1)
            kept = (int(counts.min()), int(counts.max()))
            longest += kept[1]
        has_k = [item.intrinsics is not None for item in items]
        k_px = None
        if any(has_k):
            k_px = self._host((count, 3, 3), torch.float64, host)
            for index, item in enumerate(items):
                k = _PLACEHOLDER_K if item.intrinsics is None else item.intrinsics
                np.copyto(k_px[index].numpy(), to_pixel_intrinsics(k, height, width))
        staged = StagedBatch(
            key=((rows, cols), (height, width)),
            size=count,
            num_tokens=num_tokens,
            apply_mask=inputs.apply_mask,
            has_k=has_k,
            images=images,
            depth=depth,
            keep=keep,
            kept=kept,
            tokens=(longest, 1 + 2 * rows * cols),
            k_px=k_px,
            host=host,
        )
        if self._cuda:
            self._copy_to_device(staged)
        return staged

    def compute(self, staged: StagedBatch) -> ComputedBatch:
        """Launch the forward pass after the copy in, then the copy out; returns once queued on a GPU."""
        try:
            with self._on(self._compute):
                if self._compute is not None:
                    self._compute.wait_event(staged.ready)
                    for tensor in _tensors(staged):
                        tensor.record_stream(self._compute)  # the copy stream's tensors, used here
                before = self._start_peak()
                images = staged.images.permute(0, 3, 1, 2).float().div_(255.0)
                outputs = run_network(
                    self.model,
                    images,
                    staged.depth,
                    staged.k_px,
                    staged.num_tokens,
                    staged.apply_mask,
                    self.precision,
                    staged.keep,
                    staged.kept,
                )
                self._end_peak(staged, before)
            return self._copy_to_host(staged, outputs)
        except torch.cuda.OutOfMemoryError as exc:
            self._release(staged.host)
            torch.cuda.empty_cache()  # give the cached blocks back, so the smaller retry starts from a clean slate
            raise OutOfDeviceMemory(f"batch of {staged.size} did not fit device memory: {exc}") from None
        except BaseException:
            self._release(staged.host)
            raise

    def stage_out(self, computed: ComputedBatch) -> list[Outputs]:
        """Wait for the copy back and give each item its own arrays."""
        staged = computed.staged
        try:
            if computed.done is not None:
                computed.done.synchronize()  # this thread waits; the launching thread is already on the next batch
            arrays = {key: value.numpy() for key, value in computed.outputs.items()}
            pooled = self.buffers is not None  # pooled buffers are reused: each item gets a copy
            results: list[Outputs] = []
            for index, wants_points in enumerate(staged.has_k):
                names = ("depth", "mask", "points") if wants_points else ("depth", "mask")
                results.append({name: arrays[name][index].copy() if pooled else arrays[name][index] for name in names})
            return results
        finally:
            self._release(staged.host)
            if self.buffers is not None:
                self._release(list(computed.outputs.values()))
            if self._after_batch is not None:
                self._after_batch()

    def _host(self, shape: tuple[int, ...], dtype: torch.dtype, held: list[Tensor]) -> Tensor:
        if self.buffers is None:
            return torch.empty(shape, dtype=dtype)
        tensor = self.buffers.take(shape, dtype)
        held.append(tensor)
        return tensor

    def _release(self, tensors: list[Tensor]) -> None:
        if self.buffers is not None:
            self.buffers.give(*tensors)
            tensors.clear()

    def _on(self, stream: Any) -> contextlib.AbstractContextManager[Any]:
        return torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()

    def _copy_to_device(self, staged: StagedBatch) -> None:
        with torch.cuda.stream(self._copy_in):
            staged.images = staged.images.to(self.device, non_blocking=True)
            if staged.depth is not None and staged.keep is not None:
                staged.depth = staged.depth.to(self.device, non_blocking=True)
                staged.keep = staged.keep.to(self.device, non_blocking=True)
            if staged.k_px is not None:
                staged.k_px = staged.k_px.to(self.device, non_blocking=True)
            staged.ready = torch.cuda.Event()
            staged.ready.record(self._copy_in)

    def _copy_to_host(self, staged: StagedBatch, outputs: dict[str, Tensor]) -> ComputedBatch:
        if not self._cuda:
            return ComputedBatch(staged, outputs)
        assert self._copy_out is not None and self._compute is not None
        self._copy_out.wait_stream(self._compute)
        host: dict[str, Tensor] = {}
        with torch.cuda.stream(self._copy_out):
            for name, tensor in outputs.items():
                host[name] = self._host(tuple(tensor.shape), tensor.dtype, [])
                host[name].copy_(tensor, non_blocking=True)
                tensor.record_stream(self._copy_out)
            done = torch.cuda.Event()
            done.record(self._copy_out)
        return ComputedBatch(staged, host, done)

    def _start_peak(self) -> int:
        if not self._cuda or self._record_peak is None:
            return 0
        torch.cuda.reset_peak_memory_stats(self.device)
        return int(torch.cuda.memory_allocated(self.device))

    def _end_peak(self, staged: StagedBatch, before: int) -> None:
        """Record the bytes the launch allocated above what was held (known on the host as soon as it is queued)."""
        if not self._cuda or self._record_peak is None:
            return
        peak = int(torch.cuda.max_memory_allocated(self.device)) - before
        self._record_peak(staged.key, staged.size, peak, *staged.tokens)


def _image(prepared: Prepared) -> np.ndarray:
    if prepared.image is None:
        raise ModelInputError("the request's image was not decoded")
    return prepared.image


def _tensors(staged: StagedBatch) -> list[Tensor]:
    return [t for t in (staged.images, staged.depth, staged.keep, staged.k_px) if t is not None]
