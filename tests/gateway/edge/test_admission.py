"""Admission control: global and per-model caps, a bounded priority queue, fast 503s, and no leaked slots."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from depthserve.gateway.edge.admission import AdmissionController
from depthserve.gateway.errors import GatewayError
from depthserve.testing.fakes import FakeClock


def later(seconds: float = 60.0) -> float:
    """A deadline on the controller's default clock."""
    return time.monotonic() + seconds


async def until(condition: Callable[[], bool]) -> None:
    """Let other tasks run until `condition` holds (no wall-clock waits)."""
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


class Holder:
    """A request that holds its slot until released, recording when it got in."""

    def __init__(
        self,
        controller: AdmissionController,
        order: list[str],
        name: str,
        model: str = "m",
        clock: Callable[[], float] = time.monotonic,
        client: str = "",
        lane: str = "",
    ) -> None:
        self.release = asyncio.Event()
        self.entered = asyncio.Event()

        async def run(priority: str) -> None:
            async with controller.admit(model, clock() + 60, priority, client, lane):
                order.append(name)
                self.entered.set()
                await self.release.wait()

        self.run = run

    def start(self, priority: str = "normal") -> asyncio.Task[None]:
        return asyncio.create_task(self.run(priority))


class Fronts:
    """Requests of model "m" that record whether admission marked them for the front, each held until released."""

    def __init__(self, controller: AdmissionController) -> None:
        self.controller = controller
        self.fronts: dict[str, bool] = {}
        self.release: dict[str, asyncio.Event] = {}
        self.tasks: list[asyncio.Task[None]] = []

    def start(self, name: str, client: str) -> None:
        release = self.release[name] = asyncio.Event()

        async def request() -> None:
            async with self.controller.admit("m", later(), client=client) as front:
                self.fronts[name] = front
                await release.wait()

        self.tasks.append(asyncio.create_task(request()))

    async def finish(self) -> None:
        for event in self.release.values():
            event.set()
        await asyncio.gather(*self.tasks)


async def heavy_at_capacity(
    controller: AdmissionController, order: list[str], capacity: int
) -> tuple[list[Holder], list[asyncio.Task[None]]]:
    """A heavy client holding the workers' whole capacity of model "m", with one more request queued."""
    heavy = [Holder(controller, order, f"h{i}", client="heavy") for i in range(capacity + 1)]
    tasks = [holder.start() for holder in heavy]
    await until(lambda: controller.model_in_flight("m") == capacity and controller.queued["normal"] == 1)
    return heavy, tasks


async def test_admits_immediately_under_limits() -> None:
    controller = AdmissionController(max_in_flight=2, max_queue=0)
    async with controller.admit("m", later()), controller.admit("other", later()):
        assert controller.in_flight == 2 and controller.model_in_flight("m") == 1
    assert controller.in_flight == 0 and controller.admitted == 2 and not controller.rejected


async def test_queued_requests_admitted_in_fifo_order() -> None:
    controller = AdmissionController(max_in_flight=1, max_queue=10)
    order: list[str] = []
    holders = {name: Holder(controller, order, name) for name in "abcd"}
    tasks = [holders["a"].start()]
    await holders["a"].entered.wait()
    for waiting, name in enumerate("bcd", start=1):
        tasks.append(holders[name].start())
        await until(lambda: controller.queued["normal"] == waiting)  # noqa: B023 (awaited before the loop moves on)
    for name in "abcd":
        await holders[name].entered.wait()
        assert controller.in_flight == 1
        holders[name].release.set()
    await asyncio.gather(*tasks)
    assert order == list("abcd") and controller.in_flight == 0 and controller.admitted == 4


async def test_queue_full_rejects_at_once() -> None:
    controller = AdmissionController(max_in_flight=1, max_queue=1)
    order: list[str] = []
    first, second = Holder(controller, order, "a"), Holder(controller, order, "b")
    tasks = [first.start(), second.start()]
    await until(lambda: controller.queued["normal"] == 1)
    with pytest.raises(GatewayError) as info:
        async with controller.admit("m", later(3600)):
            pytest.fail("must not be admitted")
    err = info.value
    assert (err.status, err.reason) == (503, "queue_full") and err.retry_after is not None and err.retry_after >= 1
    assert controller.rejected["queue_full"] == 1
    first.release.set()
    second.release.set()
    await asyncio.gather(*tasks)
    assert controller.in_flight == 0


async def test_deadline_while_queued() -> None:
    controller = AdmissionController(max_in_flight=1, max_queue=5)
    holder = Holder(controller, [], "a")
    task = holder.start()
    await holder.entered.wait()
    with pytest.raises(GatewayError) as info:
        async with controller.admit("m", later(0.01)):
            pytest.fail("must not be admitted")
    assert (info.value.status, info.value.reason) == (503, "deadline")
    assert controller.queued["normal"] == 0 and controller.rejected["deadline"] == 1
    with pytest.raises(GatewayError, match="deadline"):
        async with controller.admit("m", later(-1)):
            pytest.fail("must not be admitted")
    holder.release.set()
    await task
    assert controller.in_flight == 0


async def test_high_priority_overtakes_normal() -> None:
    controller = AdmissionController(max_in_flight=1, max_queue=10)
    order: list[str] = []
    holders = {name: Holder(controller, order, name) for name in ("first", "normal", "low", "high")}
    tasks = [holders["first"].start()]
    await holders["first"].entered.wait()
    tasks += [holders["normal"].start("normal"), holders["low"].start("low"), holders["high"].start("high")]
    await until(lambda: sum(controller.queued.values()) == 3)
    for holder in holders.values():
        holder.release.set()
    await asyncio.gather(*tasks)
    assert order == ["first", "high", "normal", "low"]


async def test_high_arrival_sheds_newest_low_waiter() -> None:
    controller = AdmissionController(max_in_flight=1, max_queue=2)
    order: list[str] = []
    holders = {name: Holder(controller, order, name) for name in ("first", "low1", "low2", "high")}
    first = holders["first"].start()
    await holders["first"].entered.wait()
    low1, low2 = holders["low1"].start("low"), holders["low2"].start("low")
    await until(lambda: controller.queued["low"] == 2)
    high = holders["high"].start("high")
    with pytest.raises(GatewayError) as info:
        await low2  # the newest low waiter is pushed out
    assert (info.value.status, info.value.reason) == (503, "queue_full")
    assert controller.shed == 1 and controller.queued == {"high": 1, "normal": 0, "low": 1}
    with pytest.raises(GatewayError, match="queue full"):
        async with controller.admit("m", later(), "low"):  # a low arrival sheds nobody
            pytest.fail("must not be admitted")
    for holder in holders.values():
        holder.release.set()
    await asyncio.gather(first, low1, high)
    assert order == ["first", "high", "low1"] and controller.in_flight == 0


async def test_model_limit_blocks_only_that_model() -> None:
    controller = AdmissionController(max_in_flight=4, max_queue=10, model_limits={"big": 1})
    order: list[str] = []
    big1 = Holder(controller, order, "big1", model="big")
    big2 = Holder(controller, order, "big2", model="big")
    small = Holder(controller, order, "small", model="small")
    tasks = [big1.start(), big2.start("high")]
    await until(lambda: controller.queued["high"] == 1)
    tasks.append(small.start("low"))  # a blocked high waiter for "big" must not hold back "small"
    await small.entered.wait()
    assert order == ["big1", "small"] and controller.model_in_flight("big") == 1
    big1.release.set()
    await big2.entered.wait()
    big2.release.set()
    small.release.set()
    await asyncio.gather(*tasks)
    assert controller.in_flight == 0 and controller.model_in_flight("big") == 0


async def test_cancelled_waiter_leaves_no_trace() -> None:
    controller = AdmissionController(max_in_flight=1, max_queue=5)
    order: list[str] = []
    first, gone, last = (Holder(controller, order, name) for name in ("first", "gone", "last"))
    tasks = [first.start(), gone.start()]
    await until(lambda: controller.queued["normal"] == 1)
    tasks.append(last.start())
    await until(lambda: controller.queued["normal"] == 2)
    tasks[1].cancel()
    await asyncio.gather(tasks[1], return_exceptions=True)
    assert controller.queued["normal"] == 1 and controller.in_flight == 1
    first.release.set()
    await last.entered.wait()
    last.release.set()
    await asyncio.gather(tasks[0], tasks[2])
    assert order == ["first", "last"] and controller.in_flight == 0 and controller.admitted == 2


async def test_cancel_after_handoff_passes_slot_on() -> None:
    controller = AdmissionController(max_in_flight=1, max_queue=5)
    order: list[str] = []
    first, gone, last = (Holder(controller, order, name) for name in ("first", "gone", "last"))
    tasks = [first.start(), gone.start(), last.start()]
    await until(lambda: controller.queued["normal"] == 2)
    first.release.set()
    await until(lambda: controller.queued["normal"] == 1)  # slot handed to "gone", which has not run yet
    tasks[1].cancel()
    await last.entered.wait()
    last.release.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert order == ["first", "last"] and controller.in_flight == 0


async def test_retry_after_is_backlog_over_release_rate() -> None:
    clock = FakeClock()
    controller = AdmissionController(max_in_flight=1, max_queue=5, clock=clock)
    assert controller.retry_after() == 1.0  # no history yet
    for _ in range(4):
        async with controller.admit("m", clock() + 60):
            clock.advance(1.0)  # releases at t+1..t+4: 4 in the 3 s since the first
    holders = [Holder(controller, [], str(n), clock=clock) for n in range(6)]
    tasks = [holder.start() for holder in holders]
    await until(lambda: controller.queued["normal"] == 5)
    with pytest.raises(GatewayError) as info:
        async with controller.admit("m", clock() + 60):
            pytest.fail("must not be admitted")
    assert info.value.retry_after == pytest.approx((5 + 1) / (4 / 3))
    for holder in holders:
        holder.release.set()
    await asyncio.gather(*tasks)


def test_unknown_priority_is_value_error() -> None:
    with pytest.raises(ValueError, match="priority"):
        AdmissionController(1, 1).admit("m", later(), "urgent")


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), max_in_flight=st.integers(1, 4), max_queue=st.integers(0, 6))
def test_random_admit_and_cancel_never_exceed_limits(seed: int, max_in_flight: int, max_queue: int) -> None:
    rng = random.Random(seed)
    limits = {"a": 1, "b": 2}
    controller = AdmissionController(max_in_flight, max_queue, model_limits=limits)
    outcomes: list[str] = []

    async def request() -> None:
        model = rng.choice(["a", "b", "c"])
        deadline = later(rng.choice([0.0005, 0.002, 60.0]))
        try:
            async with controller.admit(model, deadline, rng.choice(["high", "normal", "low"]), rng.choice("xyz")):
                assert controller.in_flight <= max_in_flight
                assert controller.model_in_flight(model) <= limits.get(model, max_in_flight)
                # the active clients' count kept as counts equals the set union it replaces
                holders = controller._client_in_flight.keys() - controller._pace._last_served.keys()
                assert controller._pace._unserved_holders == len(holders)
                for _ in range(rng.randrange(4)):
                    await asyncio.sleep(0)
            outcomes.append("ok")
        except GatewayError as err:
            outcomes.append(err.reason)

    async def scenario() -> None:
        tasks = []
        for _ in range(40):
            tasks.append(asyncio.create_task(request()))
            if rng.random() < 0.3:
                rng.choice(tasks).cancel()
            for _ in range(rng.randrange(3)):
                await asyncio.sleep(0)
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert not [r for r in results if isinstance(r, Exception)]  # limit checks inside the body held
        cancelled = sum(isinstance(r, asyncio.CancelledError) for r in results)
        assert controller.in_flight == 0 and sum(controller.queued.values()) == 0
        assert controller.model_in_flight("a") == controller.model_in_flight("b") == 0
        assert len(outcomes) + cancelled == 40 and controller.admitted >= outcomes.count("ok")
        # a waiter shed just as it is cancelled counts as rejected but ends cancelled, hence <=
        assert all(outcomes.count(reason) <= count for reason, count in controller.rejected.items())

    asyncio.run(scenario())


async def test_the_workers_capacity_caps_a_model_and_unknown_capacity_caps_nothing() -> None:
    capacity: dict[str, int | None] = {"capped": 2, "unknown": None}
    controller = AdmissionController(max_in_flight=8, max_queue=8, capacity=capacity.__getitem__)
    order: list[str] = []
    holders = [Holder(controller, order, str(i), model="capped") for i in range(3)]
    tasks = [holder.start() for holder in holders]
    await until(lambda: controller.queued["normal"] == 1)
    assert controller.model_in_flight("capped") == 2  # the third waits in the gateway, not at a worker
    async with controller.admit("unknown", later()), controller.admit("unknown", later()):
        assert controller.model_in_flight("unknown") == 2  # a fresh gateway (no reports yet) still admits
    holders[0].release.set()
    await holders[2].entered.wait()
    for holder in holders:
        holder.release.set()
    await asyncio.gather(*tasks)
    assert controller.in_flight == 0


async def test_clients_take_turns_however_long_one_clients_line_is() -> None:
    controller = AdmissionController(max_in_flight=1, max_queue=100)
    order: list[str] = []
    entered: dict[str, asyncio.Event] = {}
    release = asyncio.Event()

    async def request(name: str, client: str) -> None:
        entered[name] = asyncio.Event()
        async with controller.admit("m", later(), client=client):
            order.append(name)
            await release.wait()

    gate = asyncio.create_task(request("gate", "heavy"))
    await until(lambda: controller.in_flight == 1)
    tasks = [asyncio.create_task(request(f"h{i}", "heavy")) for i in range(5)]
    await until(lambda: controller.queued["normal"] == 5)
    tasks += [asyncio.create_task(request(f"l{i}", "light")) for i in range(2)]
    await until(lambda: controller.queued["normal"] == 7)
    release.set()  # every holder leaves at once: the order is the order of hand-over
    await asyncio.gather(gate, *tasks)
    assert order == ["gate", "h0", "l0", "h1", "l1", "h2", "h3", "h4"]


async def test_a_freed_slot_goes_to_the_waiting_client_holding_fewest() -> None:
    controller = AdmissionController(max_in_flight=2, max_queue=100)
    order: list[str] = []
    heavy, light = Holder(controller, order, "H0", client="heavy"), Holder(controller, order, "L0", client="light")

    async def request(name: str, client: str) -> None:
        async with controller.admit("m", later(), client=client):
            order.append(name)

    tasks = [heavy.start(), light.start()]
    await until(lambda: controller.in_flight == 2)
    tasks += [asyncio.create_task(request(name, "heavy")) for name in ("h1", "h2")]
    await until(lambda: controller.queued["normal"] == 2)
    tasks.append(asyncio.create_task(request("l1", "light")))  # queued last, the heavy line's turn first
    await until(lambda: controller.queued["normal"] == 3)
    light.release.set()  # the light client now holds none, the heavy one still holds H0
    await until(lambda: "l1" in order)
    assert order[2:] == ["l1"]  # by turns h1 would have gone first
    heavy.release.set()
    await asyncio.gather(*tasks)
    assert order[2:] == ["l1", "h1", "h2"]


async def test_a_full_room_turns_the_heavy_client_away_and_sheds_for_a_light_one() -> None:
    controller = AdmissionController(max_in_flight=1, max_queue=3)
    release = asyncio.Event()
    outcomes: dict[str, str] = {}

    async def request(name: str, client: str) -> None:
        try:
            async with controller.admit("m", later(), client=client):
                await release.wait()
            outcomes[name] = "ok"
        except GatewayError as error:
            outcomes[name] = error.reason

    tasks = [asyncio.create_task(request(f"h{i}", "heavy")) for i in range(4)]
    await until(lambda: controller.in_flight == 1 and controller.queued["normal"] == 3)
    await request("h4", "heavy")  # the heavy client has the longest line: its newcomer is turned away
    assert outcomes["h4"] == "queue_full"
    tasks.append(asyncio.create_task(request("l0", "light")))
    await until(lambda: "h3" in outcomes)  # the light newcomer took the heavy client's newest place
    assert outcomes["h3"] == "queue_full" and controller.shed == 1
    release.set()
    await asyncio.gather(*tasks)
    assert outcomes == {"h0": "ok", "h1": "ok", "h2": "ok", "h3": "queue_full", "h4": "queue_full", "l0": "ok"}


async def test_a_request_that_would_wait_past_its_budget_is_refused_at_the_door() -> None:
    clock = FakeClock()
    controller = AdmissionController(max_in_flight=1, max_queue=100, clock=clock, max_queue_wait_s=1.0)
    for _ in range(10):  # served at 10 requests per second
        async with controller.admit("m", clock() + 60):
            clock.advance(0.1)
    order: list[str] = []
    holder = Holder(controller, order, "a", clock=clock)
    tasks = [holder.start()]
    await holder.entered.wait()
    queued = [Holder(controller, order, f"q{i}", clock=clock) for i in range(9)]
    tasks += [q.start() for q in queued]
    await until(lambda: controller.queued["normal"] == 9)  # 9 ahead at 10/s: a tenth would wait ~1 s
    with pytest.raises(GatewayError) as info:
        async with controller.admit("m", clock() + 60):
            pytest.fail("must not be admitted")
    assert info.value.reason == "queue_full" and "about 1.0s" in info.value.message
    assert controller.queued["normal"] == 9  # refused at the door, not queued
    with pytest.raises(GatewayError) as door:  # the same answer before the body is read
        controller.check_door("m", clock() + 60, "")
    assert door.value.reason == "queue_full"
    # Another client is served at half the rate (two clients take turns): ~0.2 s, over half of 0.3 s.
    with pytest.raises(GatewayError) as info:
        async with controller.admit("m", clock() + 0.3, client="other"):
            pytest.fail("must not be admitted")
    assert info.value.reason == "queue_full" and controller.queued["normal"] == 9
    holder.release.set()
    for q in queued:
        q.release.set()
    await asyncio.gather(*tasks)


async def test_a_light_client_takes_an_express_slot_past_the_workers_capacity() -> None:
    capacity = 4  # two workers, each running one request with one queued
    controller = AdmissionController(max_in_flight=16, max_queue=16, capacity=lambda model: capacity)
    order: list[str] = []
    heavy, tasks = await heavy_at_capacity(controller, order, 4)
    light = [Holder(controller, order, f"l{i}", client="light") for i in range(3)]
    for holder in light[:2]:  # holding under half of the heavy client's 4: past the cap, ahead of the heavy waiter
        tasks.append(holder.start())
        await holder.entered.wait()
    assert controller.express == 2 and controller.model_in_flight("m") == 6
    tasks.append(light[2].start())  # holding half the heaviest's count now: it waits like anyone
    await until(lambda: controller.queued["normal"] == 2)
    video = Holder(controller, order, "v", client="video")
    tasks.append(video.start("low"))  # low priority never goes express
    await until(lambda: controller.queued["low"] == 1)
    others = [Holder(controller, order, f"o{i}", client=f"other{i}") for i in range(3)]
    for holder in others[:2]:
        tasks.append(holder.start())
        await holder.entered.wait()
    tasks.append(others[2].start())  # light too, but the workers' capacity (4) is all express may add
    await until(lambda: controller.queued["normal"] == 3)
    assert controller.express == 4 and order == ["h0", "h1", "h2", "h3", "l0", "l1", "o0", "o1"]
    for holder in heavy + light + others + [video]:
        holder.release.set()
    await asyncio.gather(*tasks)
    assert controller.in_flight == 0 and controller.model_in_flight("m") == 0
    assert controller._express_in_flight == {}  # every express slot given back


async def test_a_configured_model_limit_is_never_passed_by_an_express_slot() -> None:
    controller = AdmissionController(max_in_flight=16, max_queue=16, model_limits={"m": 2}, capacity=lambda model: 4)
    order: list[str] = []
    heavy = [Holder(controller, order, f"h{i}", client="heavy") for i in range(2)]
    light = Holder(controller, order, "l", client="light")
    tasks = [holder.start() for holder in heavy]
    await until(lambda: controller.model_in_flight("m") == 2)
    tasks.append(light.start())
    await until(lambda: controller.queued["normal"] == 1)  # model_limits is the operator's word: no express
    assert controller.express == 0
    for holder in [*heavy, light]:
        holder.release.set()
    await asyncio.gather(*tasks)
    assert order == ["h0", "h1", "l"] and controller.in_flight == 0


async def test_a_light_clients_queued_request_is_marked_for_the_front_when_it_gets_a_slot() -> None:
    controller = AdmissionController(max_in_flight=4, max_queue=16, capacity=lambda model: 4)  # no room for express
    requests = Fronts(controller)
    for i in range(4):
        requests.start(f"h{i}", "heavy")
    await until(lambda: len(requests.fronts) == 4)
    requests.start("h4", "heavy")
    await until(lambda: controller.queued["normal"] == 1)
    requests.start("l", "light")  # the gateway is full: it queues, behind h4
    await until(lambda: controller.queued["normal"] == 2)
    requests.release["h0"].set()  # one slot frees: the light client holds fewest and goes, marked for the front
    await until(lambda: "l" in requests.fronts)
    assert requests.fronts == {"h0": False, "h1": False, "h2": False, "h3": False, "l": True}
    requests.release["h1"].set()
    await until(lambda: "h4" in requests.fronts)
    assert requests.fronts["h4"] is False  # the heavy client is not light beside one holding 1: it keeps its place
    await requests.finish()
    assert controller.in_flight == 0 and controller.express == 0


async def test_no_express_slot_in_a_crowd_of_equals() -> None:
    controller = AdmissionController(max_in_flight=16, max_queue=16, capacity=lambda model: 4)
    order: list[str] = []
    crowd = [Holder(controller, order, f"c{i}", client=f"c{i}") for i in range(4)]
    tasks = [holder.start() for holder in crowd]
    await until(lambda: controller.model_in_flight("m") == 4)
    late = Holder(controller, order, "late", client="late")
    tasks.append(late.start())  # nobody holds half the capacity: it waits its turn, as it would have
    await until(lambda: controller.queued["normal"] == 1)
    assert controller.express == 0
    for holder in [*crowd, late]:
        holder.release.set()
    await asyncio.gather(*tasks)
    assert order[-1] == "late" and controller.in_flight == 0


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), clients=st.integers(1, 5))
def test_whether_a_client_is_light_beside_a_heavy_one_is_what_a_scan_of_every_holder_says(
    seed: int, clients: int
) -> None:
    rng = random.Random(seed)
    clock = FakeClock()
    controller = AdmissionController(max_in_flight=1000, max_queue=0, clock=clock, capacity=lambda model: int(model))
    names = "abcde"[:clients]
    models = [str(capacity) for capacity in range(-1, 12)]  # a model's name is its workers' capacity
    held: list[str] = []  # one entry per slot taken, by client

    def by_scan(model: str, client: str) -> bool:
        """The rule written as a scan of every client holding a slot."""
        heaviest = max((n for other, n in controller._client_in_flight.items() if other != client), default=0)
        return heaviest * 2 >= int(model) and controller._client_in_flight.get(client, 0) * 2 < heaviest

    for _ in range(300):
        if held and rng.random() < 0.45:
            controller._release("m", held.pop(rng.randrange(len(held))))
        else:
            client = rng.choice(names)
            controller._take("m", client)
            held.append(client)
        for model in models:
            controller._model_cap(model)  # read the capacity, as _has_room does before _under_share
            for client in names + "z":  # and one that holds nothing
                assert controller._under_share(model, client) == by_scan(model, client)
        for client in names:  # the count behind it
            others = [n for other, n in controller._client_in_flight.items() if other != client]
            assert controller._holdings.most_held_by_other(client) == max(others, default=0)


async def test_a_light_client_holding_less_than_half_the_heaviest_goes_express_again() -> None:
    controller = AdmissionController(max_in_flight=16, max_queue=16, capacity=lambda model: 4)
    order: list[str] = []
    heavy, tasks = await heavy_at_capacity(controller, order, 4)
    light = [Holder(controller, order, name, client=name[0]) for name in ("a1", "b1", "a2", "a3")]
    for holder in light[:3]:  # a holds 0, b 0, then a 1: each under half of the heavy client's 4, past the cap
        tasks.append(holder.start())
        await holder.entered.wait()
    assert controller.express == 3
    tasks.append(light[3].start())  # a holds 2 now, half the heaviest's count: it waits its turn
    await until(lambda: controller.queued["normal"] == 2)
    assert controller.express == 3 and order == ["h0", "h1", "h2", "h3", "a1", "b1", "a2"]
    for holder in heavy + light:
        holder.release.set()
    await asyncio.gather(*tasks)
    assert controller.in_flight == 0 and controller._express_in_flight == {}


async def test_a_light_request_queued_while_express_slots_are_full_takes_the_next_one_that_frees() -> None:
    controller = AdmissionController(max_in_flight=16, max_queue=16, capacity=lambda model: 2)
    requests = Fronts(controller)
    for i in range(3):
        requests.start(f"h{i}", "heavy")
    await until(lambda: len(requests.fronts) == 2 and controller.queued["normal"] == 1)
    for name in ("a", "b"):  # the express slots: as many as the workers' capacity (2)
        requests.start(name, name)
        await until(lambda name=name: name in requests.fronts)
    requests.start("c", "c")
    await until(lambda: controller.queued["normal"] == 2)  # no express slot left: c waits, ahead of h2
    requests.release["a"].set()  # an express slot frees while the heavy client still holds the workers' capacity
    await until(lambda: "c" in requests.fronts)
    assert requests.fronts["c"] is True and "h2" not in requests.fronts and controller.express == 3
    await requests.finish()
    assert controller.in_flight == 0 and controller._express_in_flight == {}


async def test_an_express_slot_handed_to_a_request_cancelled_meanwhile_is_given_back_as_one() -> None:
    controller = AdmissionController(max_in_flight=16, max_queue=16, capacity=lambda model: 1)
    order: list[str] = []
    heavy, tasks = await heavy_at_capacity(controller, order, 1)
    light = Holder(controller, order, "a", client="a")
    tasks.append(light.start())  # the one express slot
    await light.entered.wait()
    gone = Holder(controller, order, "b", client="b")
    tasks.append(gone.start())
    await until(lambda: controller.queued["normal"] == 2)
    light.release.set()
    await until(lambda: controller.queued["normal"] == 1)  # the express slot handed to b, which has not run yet
    tasks[-1].cancel()
    await until(lambda: "a" in order and controller.model_in_flight("m") == 1)
    assert controller._express_in_flight == {} and "b" not in order
    for holder in heavy:
        holder.release.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert controller.in_flight == 0 and controller._express_in_flight == {}


async def test_express_slots_leave_the_workers_capacity_to_the_heavy_clients_queue() -> None:
    controller = AdmissionController(max_in_flight=16, max_queue=16, capacity=lambda model: 2)
    order: list[str] = []
    heavy, tasks = await heavy_at_capacity(controller, order, 2)
    light = Holder(controller, order, "l", client="light")
    tasks.append(light.start())
    await light.entered.wait()
    heavy[0].release.set()  # a worker slot frees: the heavy client's next request takes it, the express one aside
    await heavy[2].entered.wait()
    assert order == ["h0", "h1", "l", "h2"] and controller.model_in_flight("m") == 3
    for holder in [*heavy, light]:
        holder.release.set()
    await asyncio.gather(*tasks)
    assert controller.in_flight == 0


async def test_a_request_bound_to_an_idle_backend_passes_the_surplus_of_a_busy_one() -> None:
    """Under a hash policy a busy backend's surplus may fill the model's slots, as any surplus may, but a request
    bound to a backend with room still goes at once; a slot the busy backend frees is not room for its surplus
    while the model is at its cap."""
    lanes = {"a:1": 2, "b:1": 2}  # each backend runs one request with one queued: the model's cap is 4
    controller = AdmissionController(16, 16, capacity=lambda model: 4, lane_capacity=lanes.get)
    order: list[str] = []
    busy = [Holder(controller, order, f"a{i}", client=f"c{i}", lane="a:1") for i in range(6)]
    tasks = [holder.start() for holder in busy]
    await until(lambda: controller.queued["normal"] == 2)  # a's two, then the model's other two, are taken
    assert order == ["a0", "a1", "a2", "a3"]
    idle = Holder(controller, order, "b0", client="d", lane="b:1")
    tasks.append(idle.start())
    await idle.entered.wait()  # backend b has room: it does not wait behind a's surplus
    assert controller.model_in_flight("m") == 5 and controller.queued["normal"] == 2
    busy[0].release.set()
    await until(lambda: controller.model_in_flight("m") == 4)
    assert controller.queued["normal"] == 2  # the model is at its cap and a has no room: a's surplus waits
    idle.release.set()
    await busy[4].entered.wait()  # below the cap again: the next waiter goes
    for holder in busy:
        holder.release.set()
    await asyncio.gather(*tasks)
    assert controller.in_flight == 0 and controller._lanes.in_flight == {}  # every bound slot given back


async def test_a_bound_request_whose_backend_is_unknown_is_held_to_the_models_cap() -> None:
    controller = AdmissionController(16, 16, capacity=lambda model: 2, lane_capacity=lambda backend: None)
    order: list[str] = []
    holders = [Holder(controller, order, f"h{i}", client="c", lane="new:1") for i in range(3)]
    tasks = [holder.start() for holder in holders]
    await until(lambda: controller.queued["normal"] == 1)
    assert order == ["h0", "h1"]  # no report from the backend yet: the pool-wide cap still holds
    for holder in holders:
        holder.release.set()
    await asyncio.gather(*tasks)


async def test_the_door_estimates_a_bound_request_by_its_backends_rate() -> None:
    """A client bound to a slow backend is refused by that backend's pace, not promised the whole pool's; one bound
    to a backend with room is not asked to wait at all."""
    clock = FakeClock()
    lanes = {"slow:1": 1, "fast:1": 1}
    controller = AdmissionController(
        16, 64, clock=clock, capacity=lambda model: 2, max_queue_wait_s=5.0, lane_capacity=lanes.get
    )

    async def served(client: str, lane: str) -> None:
        async with controller.admit("m", clock() + 60, "normal", client, lane):
            clock.advance(1 / 21)

    for _ in range(40):  # backend fast ends 20 requests a second, slow 1: the pool's rate is 21
        for _ in range(20):
            await served("f", "fast:1")
        await served("s", "slow:1")
    order: list[str] = []
    slow = [Holder(controller, order, f"s{i}", clock=clock, client="s", lane="slow:1") for i in range(7)]
    tasks = [holder.start() for holder in slow]
    await until(lambda: controller.queued["normal"] == 5)  # two in, five wait: a sixth would be 6 s at 1 a second
    assert controller.expected_wait("s") is not None and controller.expected_wait("s") < 1.0  # the pool's pace
    with pytest.raises(GatewayError) as refused:
        controller.check_door("m", clock() + 60, "s", "slow:1")
    assert refused.value.reason == "queue_full" and "about 6.0s" in refused.value.message
    controller.check_door("m", clock() + 60, "f", "fast:1")  # fast has room: nothing to estimate
    for holder in slow:
        holder.release.set()
    await asyncio.gather(*tasks)
    assert controller.in_flight == 0 and controller._lanes.in_flight == {}
