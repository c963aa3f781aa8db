"""The host's depth-token rule equals the encoder's own, bit for bit, on any depth map and grid."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from depthserve.model.encoder import depth_token_keep as device_keep
from depthserve.model.encoder import preprocess_depth
from depthserve.model.grid import token_grid
from depthserve.model.token_keep import depth_token_keep, nearest_indices


def encoder_keep(depth: np.ndarray, rows: int, cols: int) -> np.ndarray:
    log_depth = preprocess_depth(torch.from_numpy(depth)[None], (rows * 14, cols * 14))
    return device_keep(log_depth, 14)[0].numpy()


def holey_depth(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    depth = rng.uniform(0.0, 5.0, (height, width)).astype(np.float32)
    depth[rng.random((height, width)) < rng.uniform(0.0, 1.0)] = 0.0  # holes, up to all of them
    depth[rng.random((height, width)) < 0.05] = np.nan
    depth[rng.random((height, width)) < 0.05] = np.inf
    depth[rng.random((height, width)) < 0.05] = 1.0  # log 0: counts as a hole
    depth[rng.random((height, width)) < 0.05] = 0.01  # at the threshold: a hole
    if rng.random() < 0.5:
        depth[: height // 2] = 0.0  # a missing band, so whole rows of tokens go
    return depth


@settings(max_examples=60, deadline=None)
@given(
    height=st.integers(1, 90),
    width=st.integers(1, 90),
    tokens=st.integers(1, 80),
    seed=st.integers(0, 2**32 - 1),
)
def test_host_rule_equals_the_encoders(height: int, width: int, tokens: int, seed: int) -> None:
    rows, cols = token_grid(height, width, tokens)
    depth = holey_depth(np.random.default_rng(seed), height, width)
    np.testing.assert_array_equal(depth_token_keep(depth, rows, cols), encoder_keep(depth, rows, cols))


def test_the_serving_size_keeps_what_the_encoder_keeps() -> None:
    rows, cols = token_grid(480, 640, 3600)  # 640x480 at level 9: a 52x69 grid, a 728x966 canvas
    depth = holey_depth(np.random.default_rng(3), 480, 640)
    keep = depth_token_keep(depth, rows, cols)
    assert keep.shape == (52 * 69,) and 0 < keep.sum() < keep.size  # the band removed tokens
    np.testing.assert_array_equal(keep, encoder_keep(depth, rows, cols))


def test_nearest_indices_match_torch_for_awkward_ratios() -> None:
    for in_size, out_size in [(480, 728), (640, 966), (7, 14), (14, 7), (3, 1000), (1000, 3), (1, 5), (5, 5)]:
        source = torch.arange(in_size, dtype=torch.float32)[None, None, None, :]
        expected = torch.nn.functional.interpolate(source, size=(1, out_size), mode="nearest")[0, 0, 0].long()
        np.testing.assert_array_equal(nearest_indices(in_size, out_size), expected.numpy())


def test_a_forward_given_the_host_rule_equals_one_that_reads_counts_back(
    tiny: torch.nn.Module, samples: tuple[torch.Tensor, torch.Tensor]
) -> None:
    image, depth = samples  # monocular, full, NaN/inf half, bottom rows missing: four different counts
    rows, cols = token_grid(image.shape[2], image.shape[3], 64)
    keep = np.stack([depth_token_keep(d.numpy(), rows, cols) for d in depth])
    counts = keep.sum(axis=1)
    with torch.inference_mode():
        expected = tiny(image, 64, depth)
        given = tiny(image, 64, depth, keep=torch.from_numpy(keep), kept=(int(counts.min()), int(counts.max())))
    for key in ("depth_reg", "mask"):
        torch.testing.assert_close(given[key], expected[key], rtol=0, atol=0)
