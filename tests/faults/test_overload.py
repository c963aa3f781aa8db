"""5x overload of two small-queue workers: refusals come at the door, each a 503 with Retry-After, not retried.

Every request is counted: answered, refused (by reason), or anything else (which must not happen).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import httpx

from depthserve.testing.processes import start_gateway, start_worker

SERVICE_MS = 100  # each worker serves 10/s: 20/s together
QUEUE_LIMIT = 2
RATE = 100.0  # 5x capacity
SECONDS = 3.0


async def test_five_times_overload_is_refused_at_the_door_without_a_retry_storm(tmp_path: Path, rgb_png: bytes) -> None:
    workers = [
        start_worker(
            tmp_path,
            "--synthetic-ms",
            str(SERVICE_MS),
            "--queue-limit",
            str(QUEUE_LIMIT),
            "--warmup-levels",
            "0",
            name=f"w{i}",
        )
        for i in range(2)
    ]
    config = tmp_path / "overload.yaml"
    config.write_text("probe_inference_every: 0\n")
    gateway, url = start_gateway(tmp_path, [address for _, address in workers], "--config", str(config))
    outcomes: Counter[tuple[int, str]] = Counter()
    without_retry_after = 0

    async def one(client: httpx.AsyncClient) -> None:
        nonlocal without_retry_after
        reply = await client.post(f"{url}/v1/depth", content=rgb_png, headers={"Content-Type": "image/png"})
        reason = "" if reply.status_code == 200 else reply.json().get("reason", "")
        outcomes[reply.status_code, reason] += 1
        if reply.status_code == 503 and "retry-after" not in reply.headers:
            without_retry_after += 1

    try:
        async with httpx.AsyncClient(http2=True, http1=False, timeout=30) as client:
            sending = []
            for _ in range(int(RATE * SECONDS)):
                sending.append(asyncio.create_task(one(client)))
                await asyncio.sleep(1.0 / RATE)
            await asyncio.gather(*sending)
        view = httpx.get(f"{url}/v1/cluster", timeout=5).json()
        answered = outcomes[200, ""]
        refused = sum(count for (status, _), count in outcomes.items() if status == 503)
        retries = view["retries"]
        print(
            f"\n5x overload: sent {len(sending)}, answered {answered}, refused {refused} "
            f"{dict(outcomes)}, retries {retries} ({retries / max(refused, 1):.3f} per refusal), "
            f"refused at the door {view['admission']['rejected']}"
        )
        assert answered + refused == len(sending)  # every request answered or refused: no 5xx else, no timeout
        assert answered > 0 and refused > 0 and without_retry_after == 0
        assert retries < 0.1 * refused  # a full worker's refusal is not retried onto another full worker
        assert view["admission"]["rejected"].get("pool_full", 0) > 0  # most refused before reaching a worker
    finally:
        gateway.stop()
        for proc, _ in workers:
            proc.stop()
