"""UploadBudget: bodies per client and in total, counted as bytes arrive; a stalled upload holds nothing shared."""

from __future__ import annotations

import pytest

from depthserve.gateway.edge.upload_budget import UploadBudget
from depthserve.gateway.errors import GatewayError


def refusal(budget: UploadBudget, client: str, size: int) -> GatewayError:
    with pytest.raises(GatewayError) as caught, budget.lease(client) as lease:
        lease.add(size)
    return caught.value


def test_a_stalled_upload_holds_only_its_clients_upload_slot() -> None:
    budget = UploadBudget(total_bytes=1000, client_bytes=600, client_uploads=2)
    stalled = [budget.lease("addr:attacker"), budget.lease("addr:attacker")]
    assert budget.held == 0 and budget.uploading == 2  # declared sizes are never reserved: nothing is held
    with pytest.raises(GatewayError) as caught:
        budget.lease("addr:attacker")
    assert (caught.value.status, caught.value.reason) == (429, "too_many_uploads")
    assert caught.value.retry_after is not None
    with budget.lease("addr:someone-else") as lease:  # other clients are not touched
        lease.add(500)
        lease.received()
        assert budget.held == 500
    for lease in stalled:
        lease.close()
    assert budget.held == 0 and budget.clients == 0 and budget.uploading == 0
    assert budget.refused == {"too_many_uploads": 1}


def test_a_received_body_frees_its_upload_slot_but_its_bytes_stay_counted() -> None:
    budget = UploadBudget(total_bytes=1000, client_bytes=1000, client_uploads=1)
    first = budget.lease("key:a")
    first.add(300)
    first.received()
    second = budget.lease("key:a")  # the first body is complete: a second upload may start
    assert budget.held == 300 and budget.client_held("key:a") == 300 and budget.uploading == 1
    second.close()
    first.close()
    first.close()  # idempotent
    assert budget.held == 0 and budget.clients == 0


def test_a_client_past_its_bytes_gets_429_and_the_total_past_its_bytes_503() -> None:
    budget = UploadBudget(total_bytes=1000, client_bytes=600, client_uploads=8)
    error = refusal(budget, "key:greedy", 601)
    assert (error.status, error.reason) == (429, "upload_quota")
    holders = [budget.lease(f"key:{name}") for name in "abc"]
    for lease in holders:
        lease.add(300)
    error = refusal(budget, "key:d", 101)
    assert (error.status, error.reason) == (503, "upload_memory_full")
    assert error.retry_after is not None
    assert budget.held == 900  # refused bytes were never counted
    for lease in holders:
        lease.close()
    assert budget.held == 0 and budget.clients == 0
    assert budget.refused == {"upload_quota": 1, "upload_memory_full": 1}


def test_bytes_are_counted_as_they_arrive_and_a_lease_keeps_them_until_closed() -> None:
    budget = UploadBudget(total_bytes=10_000, client_bytes=10_000, client_uploads=4)
    with budget.lease("addr:1.2.3.4") as lease:
        for _ in range(10):
            lease.add(100)
        assert (lease.size, budget.held, budget.client_held("addr:1.2.3.4")) == (1000, 1000, 1000)
    assert budget.held == 0 and budget.client_held("addr:1.2.3.4") == 0


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError):
        UploadBudget(total_bytes=0, client_bytes=1, client_uploads=1)


def test_a_discarded_body_gives_its_bytes_back_but_still_counts_as_an_upload() -> None:
    budget = UploadBudget(total_bytes=1000, client_bytes=1000, client_uploads=1)
    lease = budget.lease("key:a")
    lease.add(700)
    lease.discard()  # refused: its bytes are dropped while the rest of the upload is drained
    assert budget.held == 0 and budget.uploading == 1 and lease.size == 0
    with pytest.raises(GatewayError):
        budget.lease("key:a")  # still sending: its upload slot is held until the drain ends
    lease.close()
    assert budget.held == 0 and budget.uploading == 0 and budget.clients == 0
