"""Scenarios: every shipped one reads, a typo is refused naming the file, capacity follows fleet and mix."""

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
