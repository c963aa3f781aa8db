"""What the worker is told of a request's priority: express slots go first, a client never asks for the front itself."""

from __future__ import annotations

from depthserve.gateway.dispatch.forwarding import for_worker
from depthserve.protocol.depth_api import HIGH_PRIORITY, LOW_PRIORITY, DepthInputs, build_request, set_priority
from depthserve.protocol.infer_wire import depth_request_wire, priority_of


def test_an_express_request_is_marked_for_the_front_of_the_worker_queue() -> None:
    wire = depth_request_wire("m", DepthInputs(image=b""), "r", {"image": [b"png"]})
    assert priority_of(for_worker(wire, express=True)) == HIGH_PRIORITY
    assert for_worker(wire, express=False) is wire  # nothing to say: the bytes go as they are


def test_a_client_may_ask_to_wait_but_its_own_priority_1_goes_as_the_default() -> None:
    asked_front, asked_wait = (
        build_request("m", DepthInputs(image=b"png")),
        build_request("m", DepthInputs(image=b"png")),
    )
    set_priority(asked_front, HIGH_PRIORITY)
    set_priority(asked_wait, LOW_PRIORITY)
    assert priority_of(for_worker(asked_front, express=False)) == 0
    assert priority_of(for_worker(asked_wait, express=False)) == LOW_PRIORITY
