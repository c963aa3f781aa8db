"""Runs of the real gateway core on a virtual clock: the same code as production, every request accounted
for, reproducible from the seed, events felt."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import depthserve.sim
from depthserve.balancer.policies.p2c import PowerOfTwoChoices
from depthserve.gateway.dispatch.core import GatewayCore
from depthserve.sim import runner
from depthserve.sim.command import summary
from depthserve.sim.scenario import Scenario

SMALL = {
    "seed": 9,
    "duration_s": 6,
    "warmup_s": 1,
    "fleet": [{"kind": "fast", "count": 2, "speed": 1.0}, {"kind": "slow", "count": 2, "speed": 0.25}],
    "worker": {"max_batch": 2, "queue_limit": 32, "fixed_ms": 10, "per_cost_ms": 5, "sigma": 0.5},
    "load": 0.6,
}


def small(**changes: object) -> Scenario:
    return Scenario.model_validate({**SMALL, **changes})


def test_the_simulator_drives_the_production_core_and_copies_none_of_it(monkeypatch: object) -> None:
    built: list[GatewayCore] = []
    real_build = GatewayCore.build

    def spy(*args: object, **kwargs: object) -> GatewayCore:
        core = real_build(*args, **kwargs)  # type: ignore[arg-type]
        built.append(core)
        return core

    monkeypatch.setattr(GatewayCore, "build", spy)  # type: ignore[attr-defined]
    runner.run(small(), "p2c", 0.6)
    (core,) = built
    assert type(core.dispatcher).__module__ == "depthserve.gateway.dispatch.dispatcher"
    assert type(core.pool).__module__ == "depthserve.gateway.upstream.pool"
    assert type(core.edge.admission).__module__ == "depthserve.gateway.edge.admission"
    assert isinstance(core.dispatcher.default_policy, PowerOfTwoChoices)
    production = {"Dispatcher", "Attempts", "BackendPool", "AdmissionController", "HealthChecker", "Forwarder"}
    for path in Path(depthserve.sim.__file__).parent.glob("*.py"):
        classes = {node.name for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ClassDef)}
        assert not classes & production, (path.name, classes & production)


def test_every_request_is_answered_or_refused_with_a_reason() -> None:
    result = runner.run(small(), "least_latency", 0.6)
    stats = result.stats
    assert stats.sent > 500 and stats.sent == stats.ok + stats.failures
    assert result.served_by_kind["fast"] > 2 * result.served_by_kind["slow"]  # it favours the fast workers


def test_a_run_is_reproducible_from_its_seed_in_another_process_too(tmp_path: Path) -> None:
    first = json.dumps(summary([runner.run(small(), "p2c", 0.6)]))
    again = json.dumps(summary([runner.run(small(), "p2c", 0.6)]))
    assert _without_wall(first) == _without_wall(again)
    other_seed = json.dumps(summary([runner.run(small(seed=10), "p2c", 0.6)]))
    assert _without_wall(other_seed) != _without_wall(first)
    script = (
        "import json; from depthserve.sim import runner; from depthserve.sim.command import summary; "
        "from depthserve.sim.scenario import Scenario; "
        f"print(json.dumps(summary([runner.run(Scenario.model_validate({SMALL!r}), 'p2c', 0.6)])))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}  # another process, another string hash
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert _without_wall(done.stdout.strip()) == _without_wall(first)


def _without_wall(text: str) -> object:
    data = json.loads(text)
    for run in data["runs"]:
        run.pop("wall_s")
    return data


def test_a_killed_worker_costs_retries_not_requests() -> None:
    uniform = [{"kind": "A100", "count": 4}]
    scenario = small(fleet=uniform, events=[{"at_s": 3, "action": "kill", "workers": [0]}], duration_s=8)
    result = runner.run(scenario, "round_robin", 0.5)
    stats = result.stats
    assert stats.sent == stats.ok + stats.failures
    assert result.retries > 0  # calls to the dead worker went elsewhere
    assert stats.failures <= stats.sent * 0.01, dict(stats.failed)
    assert any("kill 1 worker" in line for line in result.events)


def test_static_weights_go_only_to_the_policies_a_scenario_names() -> None:
    def fast_share(scenario: Scenario) -> float:
        served = runner.run(scenario, "random", 0.3).served_by_kind
        return served["fast"] / (served["fast"] + served["slow"])

    assert fast_share(small()) > 0.7  # weights default to the kinds' speeds (4:1): weighted random
    assert 0.4 < fast_share(small(weighted=["weighted_round_robin"])) < 0.6  # a plain --backends list: even


def test_time_outside_the_dispatch_path_shifts_what_clients_see_and_not_the_picks() -> None:
    plain = runner.run(small(), "least_latency", 0.6)
    edged = runner.run(small(edge_ms=5.0), "least_latency", 0.6)
    assert plain.served_by_kind == edged.served_by_kind  # the gateway never sees it: the same picks
    p50, edged_p50 = plain.stats.latency.quantile(0.5), edged.stats.latency.quantile(0.5)
    assert p50 is not None and edged_p50 is not None and 4.0 < edged_p50 - p50 < 6.0


def test_a_jitter_seed_moves_the_gateways_own_timing_and_keeps_the_draws() -> None:
    plain = summary([runner.run(small(), "p2c", 0.6)])
    runs = {jitter: summary([runner.run(small(jitter_seed=jitter), "p2c", 0.6)]) for jitter in (1, 2)}
    again = summary([runner.run(small(jitter_seed=1), "p2c", 0.6)])
    assert _without_wall(json.dumps(again)) == _without_wall(json.dumps(runs[1]))  # reproducible per jitter seed
    each = (plain, *runs.values())
    assert len({json.dumps(s["runs"][0]["sent"]) for s in each}) == 1  # the same arrivals
    outcomes = {json.dumps(_without_wall(json.dumps(s))) for s in each}
    assert len(outcomes) == 3  # the health checks' jitter alone moves the picks and latencies
