"""`depthserve_build_info`: which version runs where, so a dashboard can tell a rollout from a regression."""

from __future__ import annotations

import platform
from collections.abc import Iterator

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from depthserve import __version__


class BuildInfo(Collector):
    """Exports a constant 1 labelled with the package version, the component and the Python version."""

    def __init__(self, component: str) -> None:
        self._component = component

    def collect(self) -> Iterator[Metric]:
        """Yield the one build-info sample."""
        family = GaugeMetricFamily(
            "depthserve_build_info",
            "Always 1; labels say which depthserve version and component this process runs.",
            labels=["version", "component", "python"],
        )
        family.add_metric([__version__, self._component, platform.python_version()], 1.0)
        yield family
