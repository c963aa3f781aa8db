"""Forward-pass semantics: batching, token dropping, monocular mode, masking, remaps, dtypes."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from depthserve.model import LingBotDepth, ModelInputError, build_model, preset_config
from depthserve.model.backbone import select_tokens
from depthserve.model.encoder import depth_token_keep, preprocess_depth


def test_batch_equals_each_sample_alone(tiny: LingBotDepth, samples: Any) -> None:
    image, depth = samples
    batched = tiny.infer(image, depth, apply_mask=False)
    assert batched["depth"].shape == (4, 60, 80) and batched["depth"].dtype == torch.float32
    assert batched["mask"].dtype == torch.bool
    for i in range(4):
        alone = tiny.infer(image[i], depth[i], apply_mask=False)
        assert alone["depth"].shape == (60, 80)
        torch.testing.assert_close(alone["depth"], batched["depth"][i], atol=1e-5, rtol=1e-5)
        assert torch.equal(alone["mask"], batched["mask"][i])


def test_monocular_none_equals_zeros(tiny: LingBotDepth, samples: Any) -> None:
    image, _ = samples
    none = tiny.infer(image[1], None, apply_mask=False)
    zeros = tiny.infer(image[1], torch.zeros(60, 80), apply_mask=False)
    holes = tiny.infer(image[1], torch.full((60, 80), float("nan")), apply_mask=False)
    assert torch.equal(none["depth"], zeros["depth"]) and torch.equal(none["depth"], holes["depth"])


def test_depth_changes_the_output(tiny: LingBotDepth, samples: Any) -> None:
    image, depth = samples
    mono = tiny.infer(image[1], None, apply_mask=False)["depth"]
    rgbd = tiny.infer(image[1], depth[1], apply_mask=False)["depth"]
    assert (mono - rgbd).abs().max() > 1e-4
    kept_all = tiny(image[3:], 256, depth[3:], enable_depth_mask=False)["depth_reg"]
    dropped = tiny(image[3:], 256, depth[3:])["depth_reg"]
    assert (kept_all - dropped).abs().max() > 1e-4  # token dropping is active on holes


def test_apply_mask_sets_inf_where_mask_false(samples: Any) -> None:
    image, depth = samples
    untrained = build_model("tiny", seed=0)  # raw random heads: a mask with both values
    raw = untrained.infer(image, depth, apply_mask=False)
    masked = untrained.infer(image, depth)
    mask = masked["mask"]
    assert torch.equal(mask, raw["mask"]) and 0 < mask.float().mean() < 1
    assert torch.isinf(masked["depth"][~mask]).all()
    assert torch.isfinite(masked["depth"][mask]).all()
    assert torch.equal(masked["depth"][mask], raw["depth"][mask])


def test_remap_linear_is_log_of_exp(samples: Any) -> None:
    image, depth = samples
    exp_model = build_model("tiny", seed=3)
    config = preset_config("tiny") | {"remap_depth_out": "linear"}
    linear_model = build_model(config)
    linear_model.load_state_dict(exp_model.state_dict())
    exp_out = exp_model.infer(image[:2], depth[:2], apply_mask=False)["depth"]
    linear_out = linear_model.infer(image[:2], depth[:2], apply_mask=False)["depth"]
    torch.testing.assert_close(torch.exp(linear_out), exp_out)
    assert (linear_out < 0).any()  # linear output is not forced positive


def test_num_tokens_and_level_control_the_grid(tiny: LingBotDepth, samples: Any) -> None:
    image, _ = samples
    by_level = tiny.infer(image[0], resolution_level=0, apply_mask=False)["depth"]
    by_tokens = tiny.infer(image[0], num_tokens=16, apply_mask=False)["depth"]
    assert torch.equal(by_level, by_tokens)
    with pytest.raises(ModelInputError):
        tiny.infer(image[0], resolution_level=10)


def test_bad_shapes_raise_model_input_error(tiny: LingBotDepth, samples: Any) -> None:
    image, depth = samples
    with pytest.raises(ModelInputError):
        tiny.infer(image[0], depth[0, :30])
    with pytest.raises(ModelInputError):
        tiny.infer(image[:, :1])
    with pytest.raises(ModelInputError):
        tiny.infer((image * 255).to(torch.uint8))
    with pytest.raises(ModelInputError):
        tiny.infer(image, intrinsics=torch.eye(3).expand(3, 3, 3))


def test_bfloat16_weights_run_on_cpu(samples: Any) -> None:
    image, depth = samples
    model = build_model("tiny", seed=0, dtype=torch.bfloat16)
    out = model.infer(image[:2], depth[:2], apply_mask=False)
    assert out["depth"].dtype == torch.float32 and torch.isfinite(out["depth"]).all()


def test_depth_preprocessing_and_token_validity() -> None:
    depth = torch.zeros(1, 28, 42)
    depth[0, 0, 0] = 2.0  # patch (0,0): one valid pixel keeps the token
    depth[0, 0:14, 14:28] = 1.0  # patch (0,1): log 0 counts as a hole (reference quirk)
    depth[0, 14:, 28:] = 0.005  # patch (1,2): below 1 cm is a hole
    depth[0, 14:, :14] = float("inf")
    depth[0, 14, 14] = float("nan")
    log_depth = preprocess_depth(depth, (28, 42))
    assert log_depth.shape == (1, 1, 28, 42) and torch.isfinite(log_depth).all()
    assert log_depth[0, 0, 0, 0] == pytest.approx(0.6931, abs=1e-4)
    keep = depth_token_keep(log_depth, 14)
    assert keep.tolist() == [[True, False, False, False, False, False]]


def test_select_tokens_packs_in_row_major_order() -> None:
    tokens = torch.arange(8.0).view(2, 4, 1)
    keep = torch.tensor([[False, True, False, True], [True, True, True, False]])
    packed, real = select_tokens(tokens, keep)
    assert packed[0, :2, 0].tolist() == [1.0, 3.0] and packed[1, :, 0].tolist() == [4.0, 5.0, 6.0]
    assert real is not None and real.tolist() == [[True, True, False], [True, True, True]]
    same, none = select_tokens(tokens, torch.ones(2, 4, dtype=torch.bool))
    assert same is tokens and none is None
