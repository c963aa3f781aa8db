"""The simulated cluster follows the gateway's scaling signal: workers join on a burst and drain after it."""

from __future__ import annotations

from depthserve.sim import runner
from depthserve.sim.scenario import Scenario


def test_a_burst_adds_workers_after_their_warm_up_and_the_quiet_after_it_drains_them() -> None:
    scenario = Scenario.model_validate(
        {
            "seed": 2,
            "duration_s": 40,
            "warmup_s": 1,
            "fleet": [{"kind": "A100", "count": 2}],
            "worker": {"max_batch": 2, "fixed_ms": 10, "per_cost_ms": 5, "sigma": 0.2},
            "load": 0.3,
            "arrivals": {"bursts": [{"at_s": 5, "for_s": 10, "factor": 5}]},
            "gateway": {"scale_min_workers": 2, "scale_max_workers": 12, "scale_down_window_s": 5},
            "autoscale": {"kind": "A100", "interval_s": 0.5, "warmup_s": 2},
            "policies": ["p2c"],
        }
    )
    result = runner.run(scenario, "p2c", 0.3)
    log = result.scaling
    assert log is not None and log.added >= 2 and log.drained >= 1
    burst = [s for s in log.steps if 5 <= s.at < 15]
    after = [s for s in log.steps if s.at >= 35]
    assert max(s.desired for s in burst) > 2  # it asked for more during the burst
    assert max(s.serving for s in burst) > 2  # and they served once warm
    assert after[-1].serving < max(s.serving for s in burst)  # drained after the quiet window
    assert max(s.serving + s.warming for s in log.steps) <= 12  # never past its bound
    stats = result.stats
    assert stats.sent == stats.ok + stats.failures  # drains lose nothing
