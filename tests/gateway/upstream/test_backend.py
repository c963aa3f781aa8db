"""A backend takes new requests only while accepting: an operator's drain and discovery's removal both stop it."""

from __future__ import annotations

from depthserve.discovery.backend_spec import BackendSpec
from depthserve.gateway.upstream.backend import Backend
from depthserve.gateway.upstream.backend_health import DRAINING, LEAVING, READY
from depthserve.gateway.upstream.backend_stats import BackendStats
from depthserve.testing.fake_transport import FakeTransport


def test_a_drained_or_leaving_backend_takes_no_new_requests_and_says_why() -> None:
    backend = Backend(BackendSpec("w1:1"), FakeTransport("w1:1"), BackendStats())
    backend.health.check_passed(0, 1)
    assert backend.accepting and backend.state(0) == READY
    backend.drained = True
    assert not backend.accepting and backend.state(0) == DRAINING  # the operator's drain wins over health
    backend.leaving = True
    assert not backend.accepting and backend.state(0) == LEAVING  # and leaving over a drain
    backend.drained = backend.leaving = False
    assert backend.accepting
