"""Scenarios: every shipped one reads, a typo is refused naming the file, capacity counts fleet, mix, own time."""

from __future__ import annotations

from pathlib import Path

import pytest

from depthserve.sim.scenario import Scenario, load_scenario, shipped_scenarios


def test_every_shipped_scenario_reads_and_names_policies_that_exist() -> None:
    from depthserve.balancer import policy_names

    shipped = shipped_scenarios()
    assert {"four_workers", "mixed_fleet_1000", "drift", "failures", "diurnal_sessions"} <= set(shipped)
    for path in shipped.values():
        scenario = load_scenario(path)
        assert scenario.workers > 0 and scenario.capacity_rps() > 0
        for policy in scenario.policies:
            assert policy.split("+queue")[0].removesuffix("@auto") in policy_names(), (path.name, policy)


def test_a_typo_in_a_scenario_is_an_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nfleet: [{kind: A100, count: 2}]\nduraton_s: 5\n")
    with pytest.raises(ValueError, match="(?s)bad.yaml.*duraton_s"):
        load_scenario(path)


def test_capacity_counts_full_batches_at_each_kinds_speed() -> None:
    scenario = Scenario.model_validate(
        {
            "fleet": [{"kind": "H200", "count": 2}, {"kind": "T4", "count": 4}],
            "worker": {"max_batch": 4, "fixed_ms": 20, "per_cost_ms": 5},
            "mix": [{"level": 9}],
        }
    )
    per_speed = 4 / ((20 + 5 * 4) / 1000)  # 100 requests a second at speed 1
    assert scenario.capacity_rps() == pytest.approx(per_speed * (2 * 2.0 + 4 * 0.25))
    assert scenario.rate_at(0.5) == pytest.approx(0.5 * scenario.capacity_rps())


def test_capacity_counts_the_workers_own_time_unscaled_by_speed() -> None:
    # bench/policies.py's cluster: 20 ms devices at speeds 1 and 0.25, 0.6 ms of each worker's own time a request
    # (a 20 ms worker kept busy completes 48.5 req/s live): 121.9 req/s complete, not the devices' 125, so "95%" is 95%.
    fleet = [{"kind": "fast", "count": 2, "speed": 1.0}, {"kind": "slow", "count": 2, "speed": 0.25}]
    worker = {"max_batch": 1, "fixed_ms": 20, "per_cost_ms": 0, "overhead_ms": 0.6}
    scenario = Scenario.model_validate({"fleet": fleet, "worker": worker, "mix": [{"level": 0}]})
    assert scenario.capacity_rps() == pytest.approx(2 / 0.0206 + 2 / 0.0806)
    assert scenario.capacity_rps() == pytest.approx(121.90, abs=0.01)


def test_fleet_addresses_are_one_per_worker_and_clients_count_up_from_the_first() -> None:
    from depthserve.sim.world import World

    fleet = [{"kind": "fast", "count": 2, "addresses": ["127.0.0.1:50461", "127.0.0.1:50462"]}, {"kind": "T4"}]
    scenario = Scenario.model_validate({"fleet": fleet, "arrivals": {"clients": 3, "first_client": "127.0.0.10"}})
    assert list(World(scenario).workers) == ["127.0.0.1:50461", "127.0.0.1:50462", "t4-0002:50051"]
    assert [str(scenario.arrivals.first_client + c) for c in range(3)] == ["127.0.0.10", "127.0.0.11", "127.0.0.12"]
    with pytest.raises(ValueError, match="1 addresses for 2 workers"):
        Scenario.model_validate({"fleet": [{"kind": "A100", "count": 2, "addresses": ["a:1"]}]})
    twice = [{"kind": "A100", "count": 1, "addresses": ["a:1"]}, {"kind": "T4", "count": 1, "addresses": ["a:1"]}]
    with pytest.raises(ValueError, match="two workers at a:1"):
        World(Scenario.model_validate({"fleet": twice}))
