"""The drain record: a process that could not hear a drain (starting, restarted) still applies it."""

from __future__ import annotations

from depthserve.discovery.backend_spec import BackendSpec
from depthserve.gateway.processes.drains import apply_recorded_drains, drained_addresses, record_drain
from depthserve.gateway.processes.share import ProcessShare
from depthserve.gateway.processes.shared import SharedState
from depthserve.gateway.upstream.pool import BackendPool
from depthserve.settings import GatewaySettings
from depthserve.testing.fake_transport import FakeFleet


async def test_a_process_that_missed_a_drain_applies_it_from_the_record() -> None:
    directory = SharedState.create(2)
    states = [SharedState(directory), SharedState(directory)]
    speaker, late = ProcessShare(states[0], 0, 2), ProcessShare(states[1], 1, 2)
    known = BackendPool.from_settings(GatewaySettings(backends=["a:1", "b:2"]), transports=FakeFleet())
    later = BackendPool.from_settings(GatewaySettings(backends=["b:2"]), transports=FakeFleet())
    try:
        record_drain(speaker, "a:1", True)  # its message to the late process found no socket (CI saw this)
        # The late process knew the backend before the drain: it applies the record once its socket is up.
        apply_recorded_drains(known, late)
        assert {address: b.drained for address, b in known.backends.items()} == {"a:1": True, "b:2": False}
        # A backend a process adds afterwards (discovery) starts drained there too.
        later.recorded_drains = lambda: drained_addresses(late)
        assert later.add(BackendSpec("a:1")).drained and not later.backends["b:2"].drained
        record_drain(speaker, "a:1", False)  # undrained: no process applies it any more
        assert drained_addresses(late) == frozenset() and not later.add(BackendSpec("c:3")).drained
    finally:
        await known.close()
        await later.close()
        for state in states:
            state.close()
        SharedState.remove(directory)
