"""BodyReader over a scripted ASGI receive: a refused upload's bytes are given back before its drain; send_piece
never loses a cancel."""

from __future__ import annotations

import asyncio

import pytest
from starlette.types import Message

from depthserve.gateway.edge.upload_budget import UploadBudget
from depthserve.gateway.errors import GatewayError
from depthserve.gateway.http.asgi_io import BodyReader, send_piece


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


async def test_a_cancel_that_lands_as_a_piece_is_taken_stops_the_stream() -> None:
    # The race behind a video that went on to its last frame after its client hung up: the client's
    # hang-up cancels the task streaming the reply just as granian takes a piece into its buffer.
    loop = asyncio.get_running_loop()
    taken: asyncio.Future[None] = loop.create_future()
    sent: list[Message] = []

    def send(message: Message) -> asyncio.Future[None]:
        sent.append(message)
        return taken

    streaming = asyncio.ensure_future(send_piece(send, b"frame", 30.0))
    await settle()
    taken.set_result(None)  # granian took the piece...
    streaming.cancel()  # ...as the hang-up was seen
    with pytest.raises(asyncio.CancelledError):
        await streaming
    assert [message["body"] for message in sent] == [b"frame"]


async def test_a_piece_the_client_never_reads_times_out() -> None:
    never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    with pytest.raises(TimeoutError):
        await send_piece(lambda message: never, b"frame", 0.05)
