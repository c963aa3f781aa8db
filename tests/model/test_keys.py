"""The module tree reproduces the published checkpoint's keys, shapes and sizes exactly."""

from __future__ import annotations

import math
import time
from pathlib import Path

from depthserve.model import PRESETS, build_model

TABLE = Path(__file__).with_name("published_keys.tsv")
PUBLISHED_TENSORS = 473  # model.md §2.3: state-dict entries, incl. the image_mean/std buffers
PUBLISHED_PARAMETERS = 321_161_858  # excludes the 6 buffer floats
FP32_BYTES = 1_284_647_456  # model.md: fp32 storage of every state-dict tensor


def _published() -> list[tuple[str, tuple[int, ...]]]:
    rows = [line.split("\t") for line in TABLE.read_text().splitlines()]
    return [(key, tuple(int(n) for n in shape.split(","))) for key, shape in rows]


def test_vitl14_matches_published_keys_in_order() -> None:
    start = time.perf_counter()
    model = build_model("vitl14", device="meta")
    assert time.perf_counter() - start < 20
    state = model.state_dict()
    assert [(key, tuple(value.shape)) for key, value in state.items()] == _published()
    assert len(state) == PUBLISHED_TENSORS
    assert sum(p.numel() for p in model.parameters()) == PUBLISHED_PARAMETERS
    assert sum(4 * v.numel() for v in state.values()) == FP32_BYTES
    assert {name for name, _ in model.named_buffers()} == {"encoder.image_mean", "encoder.image_std"}


def test_published_table_is_self_consistent() -> None:
    rows = _published()
    assert len(rows) == PUBLISHED_TENSORS
    assert sum(math.prod(shape) for _, shape in rows) == PUBLISHED_PARAMETERS + 6


def test_tiny_preset_has_same_key_pattern() -> None:
    tiny = build_model("tiny", device="meta")
    state = tiny.state_dict()
    assert tuple(state["encoder.backbone.pos_embed"].shape) == (1, 65, 128)
    assert tuple(state["neck.input_blocks.0.weight"].shape) == (128, 130, 1, 1)
    assert 1_600_000 < sum(p.numel() for p in tiny.parameters()) < 1_700_000

    def pattern(keys: list[str]) -> list[str]:
        return [key for key in keys if ".blocks." not in key]  # tiny has 4 blocks, not 24

    assert pattern(list(state)) == pattern([key for key, _ in _published()])
    assert PRESETS["tiny"]["num_tokens_range"] == [16, 256]
