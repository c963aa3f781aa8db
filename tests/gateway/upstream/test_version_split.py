"""Version choice: a canary split holds its share, a header routes every request, unready versions get none."""

from __future__ import annotations

from collections import Counter

from depthserve.gateway.upstream.version_split import VersionRoute, VersionSplitter
from depthserve.settings import VersionRouteConfig

CANARY = VersionSplitter.from_config(
    {
        "depth": VersionRouteConfig(
            weights={"v1": 90, "v2": 10}, match=[{"header": "X-Tenant", "value": "beta", "version": "v2"}]
        )
    },
    seed=7,
)


def test_canary_share_over_a_thousand_requests() -> None:
    picks = Counter(CANARY.choose("depth", {"v1", "v2"}, {}) for _ in range(1000))
    assert set(picks) == {"v1", "v2"}
    assert 80 <= picks["v2"] <= 120, picks  # 8-12% of 1,000


def test_header_routes_every_request() -> None:
    assert {CANARY.choose("depth", {"v1", "v2"}, {"x-model-version": "v2"}) for _ in range(1000)} == {"v2"}
    assert {CANARY.choose("depth", {"v1", "v2"}, {"x-tenant": "beta"}) for _ in range(1000)} == {"v2"}
    # The header names a version even when none of it is ready: the pool then says so, it is not re-routed.
    assert CANARY.choose("depth", {"v1"}, {"x-model-version": "v3"}) == "v3"


def test_unready_versions_get_no_share() -> None:
    assert {CANARY.choose("depth", {"v1"}, {}) for _ in range(200)} == {"v1"}
    assert CANARY.choose("depth", set(), {}) is None  # nothing weighted is ready: any version may serve
    assert CANARY.choose("other", {"v1"}, {}) is None  # no route: one pool of every version


def test_seeded_choice_is_deterministic_and_header_name_configurable() -> None:
    routes = {"m": VersionRoute({"a": 1, "b": 1})}
    first, again = VersionSplitter(routes, seed=3), VersionSplitter(routes, seed=3)
    picks = [first.choose("m", {"a", "b"}, {}) for _ in range(50)]
    assert picks == [again.choose("m", {"a", "b"}, {}) for _ in range(50)] and set(picks) == {"a", "b"}
    custom = VersionSplitter.from_config({"m": VersionRouteConfig(header="X-Canary-Version")})
    assert custom.choose("m", {"a"}, {"x-canary-version": "b"}) == "b"
    assert custom.describe() == {"m": {"weights": {}, "header": "x-canary-version", "match": []}}
