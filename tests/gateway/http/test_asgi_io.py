"""BodyReader over a scripted ASGI receive: a refused upload's bytes are given back before its drain."""

from __future__ import annotations

import asyncio

import pytest
from starlette.types import Message

from depthserve.gateway.edge.upload_budget import UploadBudget
from depthserve.gateway.errors import GatewayError
from depthserve.gateway.http.asgi_io import BodyReader


class ScriptedUpload:
    """An ASGI receive fed chunk by chunk by the test, as a client sending slowly would."""

    def __init__(self) -> None:
        self.chunks: asyncio.Queue[Message] = asyncio.Queue()

    def send(self, size: int, more: bool = True) -> None:
        self.chunks.put_nowait({"type": "http.request", "body": bytes(size), "more_body": more})

    async def receive(self) -> Message:
        return await self.chunks.get()


async def settle() -> None:
    """Let the readers take what was sent (a few turns of the loop)."""
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_refused_upload_frees_its_bytes_while_it_drains_so_the_other_one_completes() -> None:
    budget = UploadBudget(total_bytes=100, client_bytes=100, client_uploads=4)
    first, second = ScriptedUpload(), ScriptedUpload()
    leases = [budget.lease("addr:a"), budget.lease("addr:b")]
    uploads = (first, second)
    readers = [BodyReader(up.receive, 1000, False, lease=lease) for up, lease in zip(uploads, leases, strict=True)]
    reads = [asyncio.create_task(reader.read(None)) for reader in readers]
    first.send(40)
    second.send(40)
    await settle()
    second.send(30)  # 110 > 100: the second is refused and drains the rest of its body
    await settle()
    assert budget.held == 40  # its 40 bytes were given back before the drain, not after it
    first.send(50, more=False)  # fits only because the refused body no longer counts
    assert len(await reads[0]) == 90
    second.send(10, more=False)
    with pytest.raises(GatewayError) as caught:
        await reads[1]
    assert caught.value.reason == "upload_memory_full"
    for lease in leases:
        lease.close()
    assert budget.held == 0 and budget.uploading == 0
