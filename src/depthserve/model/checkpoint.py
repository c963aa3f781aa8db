"""Reading and writing checkpoint files in the published layout, without unpickling code."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from depthserve.model.errors import CheckpointError
from depthserve.model.load_errors import why_unreadable

if TYPE_CHECKING:
    from depthserve.model.network import LingBotDepth

TORCH_SUFFIXES = (".pt", ".pth")
SAFETENSORS_SUFFIX = ".safetensors"

Checkpoint = tuple[dict[str, Any], dict[str, Tensor]]


def read_checkpoint(path: Path) -> Checkpoint:
    """Return (model_config, state_dict) from a .pt/.pth, .safetensors file or a folder of one."""
    path = path.expanduser().resolve()  # errors name the file itself, wherever the caller stood
    if path.is_dir():
        for name in ("model.pt", "model.pth", "model.safetensors"):
            if (path / name).is_file():
                return read_checkpoint(path / name)
        raise CheckpointError(f"{path}: folder holds no model.pt, model.pth or model.safetensors")
    suffix = path.suffix.lower()
    if suffix in TORCH_SUFFIXES:
        return _read_torch(path)
    if suffix == SAFETENSORS_SUFFIX:
        return _read_safetensors(path)
    raise CheckpointError(f"{path}: unknown checkpoint type (expected .pt, .pth or .safetensors)")


def _read_torch(path: Path) -> Checkpoint:
    try:
        # weights_only: the safe unpickler, which refuses arbitrary classes and callables.
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any failure means an unusable file; no chain, so torch's
        # advice to retry with weights_only=False (which can run code from the file) is never shown.
        raise CheckpointError(f"{path}: cannot be loaded: {why_unreadable(path, exc)}") from None
    if not isinstance(payload, Mapping) or "model" not in payload or "model_config" not in payload:
        keys = sorted(payload) if isinstance(payload, Mapping) else type(payload).__name__
        raise CheckpointError(f"{path}: expected a dict with 'model_config' and 'model', got {keys}")
    return _as_config(payload["model_config"], path), _as_state_dict(payload["model"], path)


def _read_safetensors(path: Path) -> Checkpoint:
    from safetensors import safe_open
    from safetensors.torch import load_file

    try:
        with safe_open(str(path), framework="pt") as handle:
            metadata = handle.metadata() or {}
        state = load_file(str(path), device="cpu")
    except Exception as exc:  # any failure here means an unusable file
        raise CheckpointError(f"{path}: cannot be read as safetensors: {exc}") from exc
    if "model_config" in metadata:
        try:
            config: Any = json.loads(metadata["model_config"])
        except json.JSONDecodeError as exc:
            raise CheckpointError(f"{path}: metadata 'model_config' is not JSON: {exc}") from exc
    else:
        config = _sidecar_config(path)
    return _as_config(config, path), _as_state_dict(state, path)


def _sidecar_config(path: Path) -> Any:
    for sidecar in (path.with_suffix(".json"), path.parent / "config.json"):
        if sidecar.is_file():
            try:
                data = json.loads(sidecar.read_text())
            except (OSError, json.JSONDecodeError) as exc:
                raise CheckpointError(f"{sidecar}: unreadable model config: {exc}") from exc
            return data.get("model_config", data) if isinstance(data, dict) else data
    raise CheckpointError(f"{path}: no 'model_config' metadata and no {path.stem}.json or config.json")


def _as_config(config: Any, path: Path) -> dict[str, Any]:
    if not isinstance(config, Mapping):
        raise CheckpointError(f"{path}: model_config must be a dict, got {type(config).__name__}")
    return dict(config)


def _as_state_dict(state: Any, path: Path) -> dict[str, Tensor]:
    if not isinstance(state, Mapping):
        raise CheckpointError(f"{path}: 'model' must be a state dict, got {type(state).__name__}")
    bad = [str(key) for key, value in state.items() if not isinstance(value, Tensor)]
    if bad:
        raise CheckpointError(f"{path}: non-tensor entries in the state dict: {', '.join(bad)}")
    return {str(key): value for key, value in state.items()}


def save_checkpoint(model: LingBotDepth, path: Path) -> None:
    """Write the model in the published layout: torch.save dict, or safetensors + JSON metadata."""
    state = {key: value.detach().cpu().contiguous() for key, value in model.state_dict().items()}
    if path.suffix.lower() == SAFETENSORS_SUFFIX:
        from safetensors.torch import save_file

        save_file(state, str(path), metadata={"model_config": json.dumps(model.model_config)})
    elif path.suffix.lower() in TORCH_SUFFIXES:
        torch.save({"model_config": model.model_config, "model": state}, path)
    else:
        raise CheckpointError(f"{path}: unknown checkpoint type (expected .pt, .pth or .safetensors)")
