"""A network wrapper that runs out of device memory above a batch size, as a GPU would, for machines without one."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn


class SmallDevice(nn.Module):
    """Runs `model`, but raises torch's out-of-memory error for a batch of more than `max_items` images.

    Every other attribute (device, token range, config) is the wrapped network's, so runners treat it alike.
    """

    def __init__(self, model: nn.Module, max_items: int) -> None:
        super().__init__()
        self.model = model
        self.max_items = max_items
        self.batches: list[int] = []  # sizes of the forwards that ran

    def forward(self, image: Tensor, *args: Any, **kwargs: Any) -> Any:
        if image.shape[0] > self.max_items:
            raise torch.cuda.OutOfMemoryError(f"CUDA out of memory: a batch of {image.shape[0]} (fake device)")
        self.batches.append(int(image.shape[0]))
        return self.model(image, *args, **kwargs)

    @property
    def device(self) -> torch.device:
        """The wrapped network's device."""
        device = self.model.device
        assert isinstance(device, torch.device)
        return device

    @property
    def num_tokens_range(self) -> Any:
        """The wrapped network's token range."""
        return self.model.num_tokens_range
