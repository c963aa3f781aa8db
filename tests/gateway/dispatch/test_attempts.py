"""Retries, per-try timeouts, hedges and deadlines on fake backends, on a virtual clock: exact and instant."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from tritonclient.grpc import service_pb2 as pb

from depthserve.balancer.types import RequestInfo
from depthserve.gateway.config import DispatchConfig
from depthserve.gateway.dispatch.dispatcher import Dispatcher
from depthserve.gateway.errors import GatewayError
from depthserve.gateway.upstream.backend import Backend
from depthserve.gateway.upstream.calls import Outcome
from depthserve.gateway.upstream.pool import BackendPool
from depthserve.gateway.upstream.transport import Fault
from depthserve.settings import GatewaySettings
from depthserve.testing import virtual_time
from depthserve.testing.fake_transport import FakeFleet, Step
from depthserve.testing.fakes import FixedOrder

INFO = RequestInfo(model="lingbot-depth")
REQUEST = pb.ModelInferRequest(model_name="lingbot-depth")


def gateway(addresses: list[str], **overrides: Any) -> tuple[Dispatcher, FakeFleet, Counter[Outcome]]:
    """A dispatcher over fake backends, all ready, tried in the order given; counts every settled call."""
    fleet = FakeFleet()
    settings = GatewaySettings(**{"backends": addresses, "slow_start_s": 0, "probe_inference_every": 0, **overrides})
    pool = BackendPool.from_settings(settings, clock=asyncio.get_running_loop().time, transports=fleet)
    for backend in pool.backends.values():
        backend.health.check_passed(pool.clock(), settings.healthy_threshold)
    settled: Counter[Outcome] = Counter()

    def count(backend: Backend, outcome: Outcome, latency_ms: float) -> None:
        settled[outcome] += 1

    pool.outcome_listeners.append(count)
    return Dispatcher(pool, DispatchConfig.of(settings), FixedOrder()), fleet, settled


def nothing_in_flight(dispatcher: Dispatcher) -> bool:
    return all(backend.stats.in_flight == 0 for backend in dispatcher.pool.backends.values())


def test_a_backend_that_refuses_the_connection_is_retried_on_the_next() -> None:
    async def main() -> None:
        dispatcher, fleet, settled = gateway(["a:1", "b:1"])
        fleet["a:1"].then(Step(fault=Fault.UNAVAILABLE, details="connection refused"))
        _, backend = await dispatcher.infer(REQUEST, INFO, 10.0, "r1")
        assert backend == "b:1" and dispatcher.budget.retries == 1
        assert dispatcher.pool.backends["a:1"].stats.errors == 1  # the refusal counts against a
        assert settled == {Outcome.FAILED: 1, Outcome.OK: 1} and nothing_in_flight(dispatcher)

    virtual_time.run(main())


def test_a_full_worker_moves_the_request_on_without_blaming_it() -> None:
    async def main() -> None:
        dispatcher, fleet, settled = gateway(["a:1", "b:1"])
        fleet["a:1"].then(Step(fault=Fault.BUSY, details="queue full"))
        _, backend = await dispatcher.infer(REQUEST, INFO, 10.0, "r1")
        assert backend == "b:1"
        assert dispatcher.pool.backends["a:1"].stats.errors == 0  # overload is not a fault
        assert settled == {Outcome.ABANDONED: 1, Outcome.OK: 1}

    virtual_time.run(main())


def test_a_hung_backend_that_stops_answering_health_costs_one_per_try_timeout() -> None:
    async def main() -> None:
        dispatcher, fleet, settled = gateway(["a:1", "b:1"], per_try_timeout_s=2.0, health_timeout_s=0.5)
        fleet["a:1"].then(Step(hang=True))
        fleet["a:1"].health_step = Step(hang=True)  # wedged: its health check times out too
        loop = asyncio.get_running_loop()
        start = loop.time()
        _, backend = await dispatcher.infer(REQUEST, INFO, 10.0, "r1")
        # 2 s per-try timeout, then the 0.5 s health check that says a is stuck, not slow: then b answers.
        assert backend == "b:1" and loop.time() - start == pytest.approx(2.5)
        assert settled == {Outcome.FAILED: 1, Outcome.OK: 1} and nothing_in_flight(dispatcher)

    virtual_time.run(main())


def test_a_slow_request_on_a_healthy_backend_is_504_and_not_sent_elsewhere() -> None:
    async def main() -> None:
        dispatcher, fleet, settled = gateway(["a:1", "b:1"], per_try_timeout_s=2.0)
        fleet["a:1"].then(Step(latency_s=5.0))  # answers health checks, but this request takes too long
        with pytest.raises(GatewayError) as caught:
            await dispatcher.infer(REQUEST, INFO, 10.0, "r1")
        assert (caught.value.status, caught.value.reason) == (504, "per_try_timeout")
        assert fleet.calls() == {"a:1": 1, "b:1": 0}  # one request cannot tie up a second worker
        assert dispatcher.pool.backends["a:1"].stats.errors == 0 and settled == {Outcome.ABANDONED: 1}

    virtual_time.run(main())


def test_the_overall_deadline_ends_the_request_at_its_moment() -> None:
    async def main() -> None:
        dispatcher, fleet, settled = gateway(["a:1", "b:1"], per_try_timeout_s=10.0)
        for address in ("a:1", "b:1"):
            fleet[address].default = Step(hang=True)
        loop = asyncio.get_running_loop()
        start = loop.time()
        with pytest.raises(GatewayError) as caught:
            await dispatcher.infer(REQUEST, INFO, 1.5, "r1")
        assert (caught.value.status, caught.value.reason) == (504, "deadline")
        assert loop.time() - start == pytest.approx(1.5)
        assert fleet.calls() == {"a:1": 1, "b:1": 0}  # the client's own deadline is no backend's fault
        assert settled == {Outcome.ABANDONED: 1} and nothing_in_flight(dispatcher)

    virtual_time.run(main())


def test_a_client_error_is_answered_at_once_and_never_retried() -> None:
    async def main() -> None:
        dispatcher, fleet, _ = gateway(["a:1", "b:1"])
        fleet["a:1"].then(Step(fault=Fault.INVALID_REQUEST, details="not an image"))
        with pytest.raises(GatewayError) as caught:
            await dispatcher.infer(REQUEST, INFO, 10.0, "r1")
        assert (caught.value.status, caught.value.message) == (400, "not an image")
        assert fleet.calls() == {"a:1": 1, "b:1": 0}

    virtual_time.run(main())


def recent_latencies(dispatcher: Dispatcher, ms: float, count: int = 40) -> None:
    """Fill the latency window as that many replies would, so the hedge has a p95 to wait for."""
    for _ in range(count):
        dispatcher.latencies.add(ms)


def test_a_hedge_wins_over_a_slow_first_attempt_which_is_then_cancelled() -> None:
    async def main() -> None:
        dispatcher, fleet, settled = gateway(["a:1", "b:1"], hedge=True, hedge_min_ms=5.0)
        recent_latencies(dispatcher, 10.0)
        fleet["a:1"].then(Step(latency_s=3.0))
        fleet["b:1"].then(Step(latency_s=0.01))
        loop = asyncio.get_running_loop()
        start = loop.time()
        _, backend = await dispatcher.infer(REQUEST, INFO, 10.0, "hedged")
        assert backend == "b:1" and dispatcher.hedges == 1
        assert loop.time() - start == pytest.approx(0.02)  # the p95 (10 ms), then the hedge's own 10 ms
        assert fleet["a:1"].cancelled == 1  # the loser stops working on it
        assert settled[Outcome.ABANDONED] == 1 and nothing_in_flight(dispatcher)

    virtual_time.run(main())


def test_no_hedge_is_sent_when_the_first_attempt_answers_in_time() -> None:
    async def main() -> None:
        dispatcher, fleet, _ = gateway(["a:1", "b:1"], hedge=True, hedge_min_ms=5.0)
        recent_latencies(dispatcher, 10.0)
        fleet["a:1"].then(Step(latency_s=0.005))
        _, backend = await dispatcher.infer(REQUEST, INFO, 10.0, "quick")
        assert backend == "a:1" and dispatcher.hedges == 0
        assert fleet.calls() == {"a:1": 1, "b:1": 0}

    virtual_time.run(main())


def test_every_exit_path_settles_each_call_once_and_frees_its_slot() -> None:
    async def main() -> None:
        dispatcher, fleet, settled = gateway(["a:1", "b:1"], max_outstanding_per_backend=1, per_try_timeout_s=1.0)
        pool = dispatcher.pool
        fleet["a:1"].then(Step(fault=Fault.UNAVAILABLE), Step(fault=Fault.BUSY), Step(latency_s=0.5))
        for i in range(3):  # failed then retried, busy then moved on, ok
            await dispatcher.infer(REQUEST, INFO, 10.0, f"r{i}")
        # Cancelled before it ran: the task never started its call, yet the call is settled.
        never = dispatcher.start_attempt("a:1", REQUEST, "never", asyncio.get_running_loop().time() + 5)
        assert pool.backends["a:1"].stats.in_flight == 1
        never.cancel()
        await asyncio.gather(never, return_exceptions=True)
        # Cancelled mid-call (a client that went away): the call there ends too.
        fleet["a:1"].then(Step(latency_s=5.0))
        running = asyncio.ensure_future(dispatcher.infer(REQUEST, INFO, 10.0, "gone"))
        await asyncio.sleep(0.1)
        assert fleet["a:1"].in_flight == 1
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        assert fleet["a:1"].in_flight == 0 and fleet["a:1"].cancelled == 1
        assert nothing_in_flight(dispatcher) and pool.slots.waiting == 0
        checkouts = sum(len(t.calls) for t in fleet.transports.values()) + 1  # + the one that never ran
        assert sum(settled.values()) == checkouts
        assert settled == {Outcome.FAILED: 1, Outcome.ABANDONED: 3, Outcome.OK: 3}

    virtual_time.run(main())


def test_a_request_waits_in_the_gateway_for_a_slot_and_takes_the_first_one_freed() -> None:
    async def main() -> None:
        dispatcher, fleet, _ = gateway(["a:1", "b:1"], max_outstanding_per_backend=1)
        fleet["a:1"].default = Step(latency_s=1.0)
        fleet["b:1"].default = Step(latency_s=0.2)
        loop = asyncio.get_running_loop()
        start = loop.time()
        replies = await asyncio.gather(*(dispatcher.infer(REQUEST, INFO, 10.0, f"r{i}") for i in range(3)))
        assert [backend for _, backend in replies] == ["a:1", "b:1", "b:1"]  # the third waits for b, freed first
        assert loop.time() - start == pytest.approx(1.0)
        assert dispatcher.pool.slots.waited == 1

    virtual_time.run(main())
