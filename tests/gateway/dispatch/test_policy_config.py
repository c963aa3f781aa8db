"""Policies chosen per model in the gateway's YAML config and weights given with the address."""

from __future__ import annotations

from pathlib import Path

import httpx

from depthserve.testing.processes import start_gateway, start_worker


def test_config_file_sets_per_model_policy_and_weights(tmp_path: Path, rgb_png: bytes) -> None:
    worker, address = start_worker(tmp_path)
    config = tmp_path / "gateway.yaml"
    config.write_text(
        f"policy: round_robin\npolicies:\n  other-model: {{name: round_robin}}\nbackends: ['{address}@2.5']\n"
    )
    gateway, url = start_gateway(tmp_path, [f"{address}@2.5"], "--config", str(config))
    try:
        view = httpx.get(f"{url}/v1/cluster").json()
        assert view["policies"] == {"other-model": "round_robin"}
        assert view["backends"][0]["weight"] == 2.5
        reply = httpx.post(f"{url}/v1/depth", content=rgb_png, headers={"Content-Type": "image/png"}, timeout=30)
        assert reply.status_code == 200 and reply.headers["x-backend"] == address
    finally:
        gateway.stop()
        worker.stop()
