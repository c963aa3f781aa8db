"""Choose a model version per request: an explicit version, a header match, or a weighted (canary) split.

Pure and synchronous like a policy: the pool asks it which version's pool to snapshot, with the
versions that have a ready backend; randomness comes from the constructor's seedable RNG.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Set
from dataclasses import dataclass, field

from depthserve.settings import VersionRouteConfig

DEFAULT_HEADER = "x-model-version"


@dataclass(frozen=True)
class HeaderRule:
    """Send a request whose header `header` equals `value` to `version`."""

    header: str
    value: str
    version: str


@dataclass(frozen=True)
class VersionRoute:
    """How one model's traffic is spread over its versions."""

    weights: Mapping[str, float] = field(default_factory=dict)  # version -> share; empty = all versions as one pool
    header: str = DEFAULT_HEADER  # a request naming a version in this header gets exactly that version
    rules: tuple[HeaderRule, ...] = ()

    @classmethod
    def from_config(cls, config: VersionRouteConfig) -> VersionRoute:
        """Build from the settings model; the header names become lower case, as requests carry them."""
        rules = tuple(HeaderRule(r.header.lower(), r.value, r.version) for r in config.match)
        return cls(dict(config.weights), config.header.lower(), rules)


class VersionSplitter:
    """Picks the version for each request from per-model routes; a model without a route is one pool."""

    def __init__(self, routes: Mapping[str, VersionRoute] | None = None, seed: int | None = None) -> None:
        self.routes = dict(routes or {})
        self._rng = random.Random(seed)

    @classmethod
    def from_config(cls, config: Mapping[str, VersionRouteConfig], seed: int | None = None) -> VersionSplitter:
        """Build from the `versions` section of the gateway settings."""
        return cls({model: VersionRoute.from_config(route) for model, route in config.items()}, seed)

    def choose(self, model: str, ready: Set[str], headers: Mapping[str, str]) -> str | None:
        """Give the version for a request (None = any version); `ready` are versions with a ready backend.

        A header naming a version wins, then the first matching rule, then the weighted split over
        the weighted versions that are ready (if none is ready, every version may serve).
        """
        route = self.routes.get(model)
        header = route.header if route else DEFAULT_HEADER
        named = headers.get(header)
        if named:
            return named
        if route is None:
            return None
        for rule in route.rules:
            if headers.get(rule.header) == rule.value:
                return rule.version
        live = [(version, weight) for version, weight in route.weights.items() if weight > 0 and version in ready]
        if not live:
            return None
        total = sum(weight for _, weight in live)
        draw = self._rng.random() * total
        for version, weight in live:
            draw -= weight
            if draw < 0:
                return version
        return live[-1][0]

    def describe(self) -> dict[str, object]:
        """Summarise the routes for /v1/cluster."""
        return {
            model: {
                "weights": dict(route.weights),
                "header": route.header,
                "match": [{"header": r.header, "value": r.value, "version": r.version} for r in route.rules],
            }
            for model, route in self.routes.items()
        }
