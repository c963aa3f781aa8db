"""Policies chosen per model in the gateway's YAML config and weights given with the address."""

from __future__ import annotations

from pathlib import Path

import httpx

from depthserve.testing.processes import start_gateway, start_worker, wait_until


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


def test_policy_seed_makes_a_random_policy_pick_the_same_backends_again(tmp_path: Path, rgb_png: bytes) -> None:
    # bench/policies.py --same-draws seeds the live gateway's policies as the simulator seeds its own.
    workers = [start_worker(tmp_path, name=f"worker{i}") for i in range(2)]
    addresses = [address for _, address in workers]

    def picks(seed: int) -> list[str]:
        flags = ("--policy", "random", "--policy-seed", str(seed), "--slow-start-s", "0")  # weights stay equal
        gateway, url = start_gateway(tmp_path, addresses, *flags)
        try:
            view = f"{url}/v1/cluster"
            wait_until(lambda: {b["state"] for b in httpx.get(view).json()["backends"]} == {"ready"}, gateway, 30.0)
            headers = {"Content-Type": "image/png"}
            replies = [httpx.post(f"{url}/v1/depth", content=rgb_png, headers=headers, timeout=30) for _ in range(24)]
            assert all(reply.status_code == 200 for reply in replies)
            return [reply.headers["x-backend"] for reply in replies]
        finally:
            gateway.stop()

    try:
        first, again, other = picks(7), picks(7), picks(8)
    finally:
        for worker, _ in workers:
            worker.stop()
    assert first == again and set(first) == set(addresses), "the same seed, the same draws"
    assert other != first
