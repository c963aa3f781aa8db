"""Torch stages give what predict_batch gives, in turn or overlapped, and split a batch that runs out of memory."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from depthserve.model import LingBotDepth, PredictItem, predict, predict_batch
from depthserve.protocol.depth_api import DepthInputs
from depthserve.testing.small_device import SmallDevice
from depthserve.worker.batch_budget import BatchBudget, OutOfDeviceMemory, run_within_budget
from depthserve.worker.overlap import OverlapPipeline
from depthserve.worker.runners.base import Prepared
from depthserve.worker.runners.torch_stages import TorchStages, grid_key

K = np.array([[60.0, 0.0, 40.0], [0.0, 60.0, 30.0], [0.0, 0.0, 1.0]], dtype=np.float32)
LEVEL = 5


def item(seed: int, with_depth: bool = True, with_k: bool = True) -> PredictItem:
    rng = np.random.default_rng(seed)
    image = rng.integers(0, 256, (60, 80, 3), dtype=np.uint8)
    depth = None
    if with_depth:
        depth = (rng.random((60, 80)) * 3 + 0.2).astype(np.float32)
        depth[: 10 * (seed % 4)] = 0.0  # a different number of depth tokens per item
        depth[rng.random((60, 80)) < 0.1] = np.nan
    return PredictItem(image, depth, K if with_k else None)


def prepared(items: list[PredictItem], apply_mask: bool = False) -> list[Prepared]:
    out = []
    for it in items:
        inputs = DepthInputs(image=it.image, resolution_level=LEVEL, apply_mask=apply_mask)
        out.append(Prepared(inputs, 60, 80, image=it.image, depth=it.depth, intrinsics=it.intrinsics))
    return out


def assert_same(results: list[dict[str, np.ndarray]], expected: list[dict[str, np.ndarray]]) -> None:
    assert len(results) == len(expected)
    for got, want in zip(results, expected, strict=True):
        assert got.keys() == want.keys()
        for name in want:
            np.testing.assert_array_equal(got[name], want[name])


MIXED = [item(1), item(2, with_depth=False), item(3, with_k=False), item(4, False, False), item(5)]


@pytest.mark.parametrize("apply_mask", [False, True])
def test_stages_in_turn_give_what_predict_batch_gives(tiny_model: LingBotDepth, apply_mask: bool) -> None:
    stages = TorchStages(tiny_model, tiny_model.device, "fp32")
    results = stages.stage_out(stages.compute(stages.stage_in(prepared(MIXED, apply_mask))))
    assert_same(results, predict_batch(tiny_model, MIXED, LEVEL, apply_mask=apply_mask, precision="fp32"))
    assert "points" not in results[2] and results[0]["points"].shape == (60, 80, 3)


async def test_overlapped_batches_give_what_each_alone_gives(tiny_model: LingBotDepth) -> None:
    pipeline = OverlapPipeline(TorchStages(tiny_model, tiny_model.device, "fp32"), depth=2)
    batches = [MIXED[:2], MIXED[2:4], MIXED[4:]]
    results = await asyncio.gather(*(pipeline.run(prepared(batch)) for batch in batches))
    for batch, result in zip(batches, results, strict=True):
        assert_same(result, predict_batch(tiny_model, batch, LEVEL, apply_mask=False, precision="fp32"))
    pipeline.close()


def test_stages_run_at_the_chosen_precision(tiny_model: LingBotDepth) -> None:
    stages = TorchStages(tiny_model, tiny_model.device, "bf16")
    (result,) = stages.stage_out(stages.compute(stages.stage_in(prepared([MIXED[0]]))))
    full = predict(tiny_model, MIXED[0].image, MIXED[0].depth, K, LEVEL, apply_mask=False)
    relative = np.abs(result["depth"] - full["depth"]) / full["depth"]
    assert 0 < relative.max() < 0.05


def test_a_batch_of_two_sizes_is_refused(tiny_model: LingBotDepth) -> None:
    stages = TorchStages(tiny_model, tiny_model.device, "fp32")
    odd = prepared([MIXED[0]]) + [Prepared(DepthInputs(image=np.zeros((30, 40, 3), np.uint8)), 30, 40,
                                           image=np.zeros((30, 40, 3), np.uint8))]  # fmt: skip
    with pytest.raises(ValueError, match="one image size"):
        stages.stage_in(odd)


async def test_out_of_memory_splits_the_batch_and_every_item_gets_its_own_result(tiny_model: LingBotDepth) -> None:
    small = SmallDevice(tiny_model, max_items=2)
    stages = TorchStages(small, tiny_model.device, "fp32")  # type: ignore[arg-type]
    pipeline = OverlapPipeline(stages, depth=2)
    budget = BatchBudget(lambda: None, max_batch=8)  # no measured budget: only the failure says it is too big
    batch = prepared(MIXED)
    results = await run_within_budget(budget, grid_key(batch[0], tiny_model.num_tokens_range), batch, pipeline.run)
    expected = [predict(tiny_model, it.image, it.depth, it.intrinsics, LEVEL, apply_mask=False) for it in MIXED]
    for got, want in zip(results, expected, strict=True):
        assert not isinstance(got, Exception)
        for name in want:
            np.testing.assert_allclose(got[name], want[name], atol=1e-5, rtol=1e-5)
    assert max(small.batches) <= 2
    small.max_items = 0  # not even one item fits now
    (alone,) = await run_within_budget(budget, grid_key(batch[0], tiny_model.num_tokens_range), batch[:1], pipeline.run)
    assert isinstance(alone, OutOfDeviceMemory) and "did not fit device memory" in str(alone)
    pipeline.close()
