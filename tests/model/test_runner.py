"""The numpy runner the worker calls: types, batching equivalence and typed validation."""

from __future__ import annotations

import numpy as np
import pytest

from depthserve.model import LingBotDepth, ModelInputError, PredictItem, predict, predict_batch

K = np.array([[60.0, 0.0, 40.0], [0.0, 60.0, 30.0], [0.0, 0.0, 1.0]], dtype=np.float32)


def _item(seed: int, with_depth: bool = True, with_k: bool = True) -> PredictItem:
    rng = np.random.default_rng(seed)
    image = rng.integers(0, 256, (60, 80, 3), dtype=np.uint8)
    depth = (rng.random((60, 80)) * 3 + 0.2).astype(np.float32) if with_depth else None
    if depth is not None:
        depth[:20] = 0.0
    return PredictItem(image, depth, K if with_k else None)


def test_predict_returns_numpy_arrays(tiny: LingBotDepth) -> None:
    item = _item(0)
    out = predict(tiny, item.image, item.depth, item.intrinsics, apply_mask=False)
    assert out["depth"].dtype == np.float32 and out["depth"].shape == (60, 80)
    assert out["mask"].dtype == np.bool_ and out["mask"].shape == (60, 80)
    assert out["points"].dtype == np.float32 and out["points"].shape == (60, 80, 3)
    assert "points" not in predict(tiny, item.image)


def test_mixed_batch_equals_single_predictions(tiny: LingBotDepth) -> None:
    items = [_item(1), _item(2, with_depth=False), _item(3, with_k=False), _item(4, False, False)]
    batched = predict_batch(tiny, items, resolution_level=5, apply_mask=False)
    for item, result in zip(items, batched, strict=True):
        alone = predict(tiny, item.image, item.depth, item.intrinsics, resolution_level=5, apply_mask=False)
        assert result.keys() == alone.keys()
        for key in alone:
            np.testing.assert_allclose(result[key], alone[key], atol=1e-5, rtol=1e-5)


def test_batch_needs_one_size(tiny: LingBotDepth) -> None:
    small = PredictItem(np.zeros((30, 40, 3), np.uint8))
    with pytest.raises(ValueError, match="one image size"):
        predict_batch(tiny, [_item(0), small])
    assert predict_batch(tiny, []) == []


@pytest.mark.parametrize(
    ("image", "depth", "intrinsics"),
    [
        (np.zeros((60, 80, 3), np.float32), None, None),  # image must be uint8
        (np.zeros((60, 80), np.uint8), None, None),  # image must be HxWx3
        (np.zeros((60, 80, 3), np.uint8), np.zeros((60, 81), np.float32), None),  # size differs
        (np.zeros((60, 80, 3), np.uint8), np.zeros((60, 80), np.uint16), None),  # millimetres?
        (np.zeros((60, 80, 3), np.uint8), None, np.full((3, 3), np.nan, np.float32)),
        (np.zeros((60, 80, 3), np.uint8), None, np.eye(4, dtype=np.float32)),
    ],
)
def test_invalid_inputs_raise_model_input_error(
    tiny: LingBotDepth, image: np.ndarray, depth: np.ndarray | None, intrinsics: np.ndarray | None
) -> None:
    with pytest.raises(ModelInputError):
        predict(tiny, image, depth, intrinsics)


@pytest.mark.parametrize(("level", "num_tokens"), [(-1, None), (10, None), (True, None), (9, 0)])
def test_invalid_options_raise_model_input_error(tiny: LingBotDepth, level: int, num_tokens: int | None) -> None:
    with pytest.raises(ModelInputError):
        predict(tiny, np.zeros((8, 8, 3), np.uint8), resolution_level=level, num_tokens=num_tokens)


def test_predict_from_threads_matches_serial(tiny: LingBotDepth) -> None:
    from concurrent.futures import ThreadPoolExecutor

    items = [_item(seed) for seed in range(4)]
    serial = [predict(tiny, i.image, i.depth, i.intrinsics, apply_mask=False) for i in items]
    with ThreadPoolExecutor(max_workers=2) as pool:
        threaded = list(pool.map(lambda i: predict(tiny, i.image, i.depth, i.intrinsics, apply_mask=False), items))
    for one, two in zip(serial, threaded, strict=True):
        np.testing.assert_array_equal(one["depth"], two["depth"])


def test_precision_runs_the_network_under_autocast_close_to_fp32(tiny: LingBotDepth) -> None:
    item = _item(5)
    full = predict(tiny, item.image, item.depth, apply_mask=False, precision="fp32")
    np.testing.assert_array_equal(full["depth"], predict(tiny, item.image, item.depth, apply_mask=False)["depth"])
    for precision in ("bf16", "fp16"):
        low = predict(tiny, item.image, item.depth, apply_mask=False, precision=precision)
        assert low["depth"].dtype == np.float32  # outputs are float32 whatever the compute precision
        relative = np.abs(low["depth"] - full["depth"]) / full["depth"]
        assert 0 < relative.max() < 0.05, precision  # really computed in lower precision, and close


def test_an_unknown_precision_is_refused(tiny: LingBotDepth) -> None:
    with pytest.raises(ValueError, match="precision must be one of"):
        predict(tiny, _item(6).image, precision="int8")
