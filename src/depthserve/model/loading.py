"""Build a network from a preset or config, or load one from a checkpoint, strictly by default."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from depthserve.model.checkpoint import read_checkpoint
from depthserve.model.config import PRESETS, preset_config
from depthserve.model.demo_heads import shape_demo_heads
from depthserve.model.errors import CheckpointError
from depthserve.model.network import LingBotDepth
from depthserve.weights.cache import WeightsError, cached_checkpoint, is_repo_id, resolve_checkpoint

log = logging.getLogger(__name__)
PRESET_SEED = 0

DeviceLike = str | torch.device


def build_model(
    preset_or_config: str | Mapping[str, Any],
    device: DeviceLike = "cpu",
    dtype: torch.dtype | None = None,
    seed: int | None = None,
) -> LingBotDepth:
    """Build a randomly initialised network in eval mode; `device="meta"` allocates nothing."""
    config = preset_config(preset_or_config) if isinstance(preset_or_config, str) else dict(preset_or_config)
    target = torch.device(device)
    if target.type == "meta":
        with torch.device("meta"):
            model = LingBotDepth(**config)
    else:
        # Initialise on the CPU so a seed gives the same weights whatever the target device.
        with torch.random.fork_rng(devices=[]):
            if seed is not None:
                torch.manual_seed(seed)
            model = LingBotDepth(**config)
    return model.to(device=target, dtype=dtype).eval()


def load_model(
    path_or_preset: str | Path,
    device: DeviceLike = "cpu",
    dtype: torch.dtype | None = None,
    strict: bool = True,
) -> LingBotDepth:
    """Return an eval-mode network from a preset (seed-0 demo weights), a checkpoint or a downloaded repo id."""
    if isinstance(path_or_preset, str) and path_or_preset in PRESETS:
        # Heads fitted on the CPU in float32, so every device and dtype gets the same demo weights.
        model = shape_demo_heads(build_model(path_or_preset, "cpu", seed=PRESET_SEED))
        return model.to(device=torch.device(device), dtype=dtype)
    text = str(path_or_preset)
    path = Path(resolve_checkpoint(text))  # absolute, so every error says where it looked
    if not path.exists():
        if is_repo_id(text):
            try:
                path = cached_checkpoint(text)
            except WeightsError as exc:  # the model's callers see one error type for every checkpoint problem
                raise CheckpointError(str(exc)) from None
        else:
            raise CheckpointError(f"{text!r} is neither a preset ({sorted(PRESETS)}) nor an existing file ({path})")
    config, state = read_checkpoint(path)
    model = _instantiate(config, path, on_meta=strict)
    diff = compare_state_dict(model, state)
    if strict and not diff.clean:
        raise CheckpointError(
            f"{path}: checkpoint does not match the network: {diff}",
            missing=diff.missing,
            unexpected=diff.unexpected,
            mismatched=list(diff.mismatched),
        )
    if not diff.clean:
        log.warning("%s: loading non-strictly: %s", path, diff)
    usable = {k: v for k, v in state.items() if k not in diff.unexpected and k not in diff.mismatched}
    # Strict loads start from a meta model and adopt the file's tensors (no random init).
    model.load_state_dict(usable, strict=strict, assign=strict)
    return model.to(device=torch.device(device), dtype=dtype or torch.float32).eval()


def _instantiate(config: dict[str, Any], path: Path, on_meta: bool) -> LingBotDepth:
    try:
        if on_meta:
            with torch.device("meta"):
                return LingBotDepth(**config)
        return build_model(config, "cpu", seed=PRESET_SEED)
    except (TypeError, ValueError, KeyError) as exc:
        raise CheckpointError(f"{path}: model_config does not describe a supported network: {exc}") from exc


@dataclass
class StateDictDiff:
    """How a state dict differs from a network's, so errors can name every offending tensor."""

    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    mismatched: dict[str, str] = field(default_factory=dict)  # key -> what differs

    @property
    def clean(self) -> bool:
        """True when the state dict fits the network exactly."""
        return not (self.missing or self.unexpected or self.mismatched)

    def __str__(self) -> str:
        parts = []
        if self.missing:
            parts.append(f"missing {len(self.missing)}: {', '.join(self.missing)}")
        if self.unexpected:
            parts.append(f"unexpected {len(self.unexpected)}: {', '.join(self.unexpected)}")
        if self.mismatched:
            items = (f"{key} ({why})" for key, why in self.mismatched.items())
            parts.append(f"mismatched {len(self.mismatched)}: {', '.join(items)}")
        return "; ".join(parts) or "no differences"


def compare_state_dict(model: torch.nn.Module, state: Mapping[str, Tensor]) -> StateDictDiff:
    """Compare key sets, shapes and floating-point-ness of a state dict against the network."""
    expected = model.state_dict()
    diff = StateDictDiff(
        missing=[key for key in expected if key not in state],
        unexpected=[key for key in state if key not in expected],
    )
    for key, value in state.items():
        want = expected.get(key)
        if want is None:
            continue
        if tuple(value.shape) != tuple(want.shape):
            diff.mismatched[key] = f"checkpoint {tuple(value.shape)}, network {tuple(want.shape)}"
        elif not value.is_floating_point():
            diff.mismatched[key] = f"checkpoint dtype {value.dtype}, network {want.dtype}"
    return diff
