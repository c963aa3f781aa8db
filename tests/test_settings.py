"""Settings precedence: flags over environment over the YAML file over defaults."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from depthserve.settings import GatewaySettings, WorkerSettings, load_settings


def test_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "gw.yaml"
    config.write_text("port: 9000\npolicy: round_robin\nbackends: [a:1, b:2]\nrequest_timeout_s: 5\n")
    monkeypatch.setenv("DEPTHSERVE_GATEWAY_PORT", "9100")
    settings = load_settings(GatewaySettings, config, port=None, request_timeout_s=7.0)
    assert settings.backends == ["a:1", "b:2"]  # file
    assert settings.port == 9100  # environment beats file
    assert settings.request_timeout_s == 7.0  # flag beats file
    assert load_settings(GatewaySettings, None, backends="x:1, y:2").backends == ["x:1", "y:2"]


def test_bad_values_are_refused_clearly(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="model"):
        load_settings(WorkerSettings, None, model="resnet")
    config = tmp_path / "w.yaml"
    config.write_text("queue_limt: 3\n")
    with pytest.raises(ValidationError, match="queue_limt"):
        load_settings(WorkerSettings, config)


@pytest.mark.parametrize("device", ["gpu", "cuda:x", "cuda:", "CUDA:0", "cuda:0,1"])
def test_devices_torch_cannot_name_are_refused(device: str) -> None:
    with pytest.raises(ValidationError, match="device"):
        load_settings(WorkerSettings, None, device=device)


def test_devices_torch_names_are_accepted() -> None:
    assert [load_settings(WorkerSettings, None, device=d).device for d in ("auto", "cpu", "cuda", "cuda:3")] == [
        "auto",
        "cpu",
        "cuda",
        "cuda:3",
    ]
