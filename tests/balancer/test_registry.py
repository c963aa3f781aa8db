"""The registry: every policy builds by name with defaults, and unknown option names are refused by name."""

from __future__ import annotations

import pytest

from depthserve.balancer import RequestInfo, make_policy, policy_names
from depthserve.testing.snapshots import pool

NAMES = [
    "round_robin",
    "weighted_round_robin",
    "random",
    "least_connections",
    "least_latency",
    "p2c",
    "score",
    "consistent_hash",
    "ip_hash",
    "learned",
]


def test_every_policy_is_registered() -> None:
    assert sorted(NAMES) == policy_names()


@pytest.mark.parametrize("name", NAMES)
def test_builds_from_empty_options_and_picks(name: str) -> None:
    policy = make_policy(name, {}, seed=1)
    assert policy.name == name
    assert sorted(policy.pick(pool(3), RequestInfo())) == ["w0", "w1", "w2"]
    assert make_policy(name).pick(pool(0), RequestInfo()) == ()


@pytest.mark.parametrize("name", NAMES)
def test_unknown_option_names_are_refused_by_name(name: str) -> None:
    with pytest.raises(ValueError, match="'bogus_option'"):
        make_policy(name, {"bogus_option": 1})


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("p2c", {"choice_count": "3", "active_request_bias": "0.5", "use_reports": "false"}),
        ("score", {"w_queue": 3, "hot_penalty": "1"}),
        ("consistent_hash", {"header": "X-Tenant", "algorithm": "maglev", "bounded_load": 1.25}),
        ("least_latency", {"metric": "ewma", "error_penalty": 0}),
    ],
)
def test_options_from_text_config_are_accepted(name: str, options: dict[str, object]) -> None:
    make_policy(name, options)


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("p2c", {"choice_count": 2.5}, "whole number"),
        ("p2c", {"choice_count": True}, "number"),
        ("p2c", {"use_reports": "maybe"}, "true or false"),
        ("score", {"w_latency": float("nan")}, "NaN"),
        ("least_latency", {"metric": 3}, "metric"),
    ],
)
def test_bad_values_are_refused_with_the_option_name(name: str, options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_policy(name, options)
