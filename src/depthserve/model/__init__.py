"""LingBot-Depth in plain PyTorch; importing this package (or `.grid`) does not import torch.

Public names are resolved lazily on first use, so torch loads only when a model is built.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from depthserve.model.checkpoint import read_checkpoint, save_checkpoint
    from depthserve.model.config import PRESETS, preset_config
    from depthserve.model.errors import CheckpointError, ModelError, ModelInputError
    from depthserve.model.grid import grid_for, num_tokens_for, token_grid
    from depthserve.model.loading import build_model, compare_state_dict, load_model
    from depthserve.model.network import LingBotDepth
    from depthserve.model.runner import predict, predict_batch
    from depthserve.model.validation import PredictItem

_EXPORTS = {
    "PRESETS": "config",
    "preset_config": "config",
    "CheckpointError": "errors",
    "ModelError": "errors",
    "ModelInputError": "errors",
    "grid_for": "grid",
    "num_tokens_for": "grid",
    "token_grid": "grid",
    "PredictItem": "validation",
    "build_model": "loading",
    "load_model": "loading",
    "compare_state_dict": "loading",
    "read_checkpoint": "checkpoint",
    "save_checkpoint": "checkpoint",
    "LingBotDepth": "network",
    "predict": "runner",
    "predict_batch": "runner",
}
__all__ = [
    "PRESETS",
    "CheckpointError",
    "LingBotDepth",
    "ModelError",
    "ModelInputError",
    "PredictItem",
    "build_model",
    "compare_state_dict",
    "grid_for",
    "load_model",
    "num_tokens_for",
    "predict",
    "predict_batch",
    "preset_config",
    "read_checkpoint",
    "save_checkpoint",
    "token_grid",
]


def __getattr__(name: str) -> Any:
    """Import the submodule that defines `name` on first access."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
