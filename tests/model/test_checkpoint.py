"""Checkpoints in the published layout load exactly; broken or unsafe ones fail loudly."""

from __future__ import annotations

import json
import re
import traceback
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from depthserve.model import CheckpointError, LingBotDepth, build_model, load_model, save_checkpoint


def _write(path: Path, model: LingBotDepth, **changes: Any) -> Path:
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state.update(changes.get("state", {}))
    for key in changes.get("drop", ()):
        del state[key]
    torch.save({"model_config": model.model_config, "model": state, **changes.get("extra", {})}, path)
    return path


def _outputs(model: LingBotDepth, samples: tuple[torch.Tensor, torch.Tensor]) -> dict[str, torch.Tensor]:
    image, depth = samples
    return model.infer(image, depth, apply_mask=False)


def _fresh() -> LingBotDepth:
    return build_model("tiny", seed=123)  # weights unlike the preset's, so loading must work


def test_torch_checkpoint_round_trip_is_bit_identical(tmp_path: Path, samples: Any) -> None:
    model = _fresh()
    loaded = load_model(_write(tmp_path / "model.pt", model))
    assert not loaded.training
    for key, value in _outputs(model, samples).items():
        assert torch.equal(value, _outputs(loaded, samples)[key]), key


def test_folder_with_model_pt_loads(tmp_path: Path) -> None:
    model = _fresh()
    _write(tmp_path / "model.pt", model)
    loaded = load_model(tmp_path)
    assert torch.equal(loaded.encoder.backbone.pos_embed, model.encoder.backbone.pos_embed)


def test_safetensors_with_metadata_config(tmp_path: Path, samples: Any) -> None:
    model = _fresh()
    path = tmp_path / "weights.safetensors"
    save_checkpoint(model, path)
    loaded = load_model(path)
    for key, value in _outputs(model, samples).items():
        assert torch.equal(value, _outputs(loaded, samples)[key]), key


def test_safetensors_with_sidecar_config(tmp_path: Path) -> None:
    model = _fresh()
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(tmp_path / "w.safetensors"))
    with pytest.raises(CheckpointError, match="config"):
        load_model(tmp_path / "w.safetensors")
    (tmp_path / "config.json").write_text(json.dumps({"model_config": model.model_config}))
    loaded = load_model(tmp_path / "w.safetensors")
    key = "neck.input_blocks.0.weight"
    assert torch.equal(loaded.state_dict()[key], model.state_dict()[key])


def test_missing_tensor_is_named(tmp_path: Path) -> None:
    path = _write(tmp_path / "m.pt", _fresh(), drop=["mask_head.output_blocks.4.bias"])
    with pytest.raises(CheckpointError, match=r"missing 1: mask_head\.output_blocks\.4\.bias") as info:
        load_model(path)
    assert info.value.missing == ["mask_head.output_blocks.4.bias"]


def test_misshaped_tensor_is_named(tmp_path: Path) -> None:
    bad = {"encoder.backbone.pos_embed": torch.zeros(1, 50, 128)}
    with pytest.raises(CheckpointError, match=r"encoder\.backbone\.pos_embed \(checkpoint \(1, 50, 128\)"):
        load_model(_write(tmp_path / "m.pt", _fresh(), state=bad))


def test_unexpected_key_is_reported(tmp_path: Path) -> None:
    path = _write(tmp_path / "m.pt", _fresh(), state={"scale_head.weight": torch.zeros(3)})
    with pytest.raises(CheckpointError, match=r"unexpected 1: scale_head\.weight") as info:
        load_model(path)
    assert info.value.unexpected == ["scale_head.weight"]
    model = load_model(path, strict=False)  # tolerated, with a warning, when asked
    assert "scale_head.weight" not in model.state_dict()


def test_non_strict_keeps_initial_weights_for_missing(tmp_path: Path) -> None:
    path = _write(tmp_path / "m.pt", _fresh(), drop=["encoder.backbone.mask_token"])
    assert load_model(path, strict=False).encoder.backbone.mask_token.shape == (1, 128)


class _Exploit:
    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (print, ("arbitrary code ran",))


def test_pickled_object_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path / "evil.pt", _fresh(), extra={"payload": _Exploit()})
    with pytest.raises(CheckpointError, match="not only tensors"):
        load_model(path)
    assert "arbitrary code ran" not in capsys.readouterr().out


@pytest.mark.parametrize("damage", ["truncated", "html page", "random bytes", "pickled object", "empty"])
def test_unusable_files_name_the_absolute_path_and_never_advise_unsafe_loading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    good = _write(tmp_path / "good.pt", _fresh()).read_bytes()
    contents = {
        "truncated": good[: len(good) // 2],  # an interrupted download
        "html page": b"<!DOCTYPE html><html><body>Not Found</body></html>",
        "random bytes": bytes(range(256)) * 4,
        "empty": b"",
    }
    if damage == "pickled object":
        _write(tmp_path / "model.pt", _fresh(), extra={"payload": _Exploit()})
    else:
        (tmp_path / "model.pt").write_bytes(contents[damage])
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CheckpointError) as info:
        load_model("model.pt")
    assert str(info.value).startswith(f"{tmp_path.resolve() / 'model.pt'}: ")
    shown = "".join(traceback.format_exception(info.value))  # what a crash would print
    assert "weights_only" not in shown and "arbitrary code" not in shown


def test_a_missing_file_is_named_by_its_absolute_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CheckpointError, match=re.escape(str(tmp_path.resolve() / "weights" / "model.pt"))):
        load_model("weights/model.pt")


def test_a_repo_id_not_downloaded_names_the_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEPTHSERVE_WEIGHTS_CACHE_DIR", str(tmp_path))
    with pytest.raises(CheckpointError, match="depthserve weights download someone/lingbot-depth"):
        load_model("someone/lingbot-depth")


def test_remap_depth_out_defaults_to_exp_when_absent(tmp_path: Path) -> None:
    model = _fresh()
    config = {k: v for k, v in model.model_config.items() if k != "remap_depth_out"}
    torch.save({"model_config": config, "model": model.state_dict()}, tmp_path / "m.pt")
    assert load_model(tmp_path / "m.pt").remap_depth_out == "exp"
    config["remap_depth_out"] = "linear"
    torch.save({"model_config": config, "model": model.state_dict()}, tmp_path / "m.pt")
    assert load_model(tmp_path / "m.pt").remap_depth_out == "linear"


@pytest.mark.parametrize(
    "payload",
    [{"model": {}}, {"model_config": "tiny", "model": {}}, [1, 2], {"model_config": {"encoder": 1}, "model": {}}],
)
def test_malformed_files_raise_checkpoint_error(tmp_path: Path, payload: Any) -> None:
    torch.save(payload, tmp_path / "m.pt")
    with pytest.raises(CheckpointError):
        load_model(tmp_path / "m.pt")


def test_unknown_names_raise_checkpoint_error(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="neither a preset"):
        load_model("no-such-preset")
    (tmp_path / "m.bin").write_bytes(b"")
    with pytest.raises(CheckpointError, match="unknown checkpoint type"):
        load_model(tmp_path / "m.bin")


def test_presets_are_seeded_and_deterministic() -> None:
    first, second = load_model("tiny"), load_model("tiny")
    for key, value in first.state_dict().items():
        assert torch.equal(value, second.state_dict()[key]), key
    key = "neck.input_blocks.0.weight"
    assert not torch.equal(first.state_dict()[key], _fresh().state_dict()[key])
