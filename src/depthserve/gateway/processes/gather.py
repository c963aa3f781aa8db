"""One answer for the whole gateway from each process's own: metrics labelled by process, cluster counts summed.

Metrics keep one series per process (label `process`), which the shipped Prometheus rules and
Grafana panels sum; gauges of the pool (a backend's state, its load report) are each process's own
view, as Envoy's worker threads each have theirs. In /v1/cluster the admission, rate-limit, retry
and hedge counts are summed, each backend's in-flight count and call counts too; its state, weight,
load and latency are the answering process's view, and `processes` lists what each process said.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

PROCESS_LABEL = "process"
_SUMMED = ("rate_limited", "retries", "retries_refused", "hedges", "waiting_for_backend")
_BACKEND_SUMMED = ("in_flight", "served", "errors")


class _Merged:
    """A collector yielding the parsed families of every process, each sample labelled with its process."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        yield from self._families


def merge_metrics(texts: Mapping[int, bytes]) -> bytes:
    """Join Prometheus expositions of several processes into one, every series labelled `process`."""
    families: dict[str, Metric] = {}
    for index in sorted(texts):
        for family in text_string_to_metric_families(texts[index].decode()):
            merged = families.setdefault(family.name, Metric(family.name, family.documentation, family.type))
            label = str(index)
            merged.samples.extend(s._replace(labels={**s.labels, PROCESS_LABEL: label}) for s in family.samples)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Merged(list(families.values())))
    return generate_latest(registry)


def _add(into: dict[str, Any], other: Mapping[str, Any]) -> None:
    for key, value in other.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            into[key] = into.get(key, 0) + value


def merge_cluster(own_index: int, views: Mapping[int, dict[str, Any]]) -> dict[str, Any]:
    """The answering process's /v1/cluster with the counts of every process summed in."""
    merged = json.loads(json.dumps(views[own_index]))  # a copy to add into
    admission = merged["admission"]
    for index, view in views.items():
        if index == own_index:
            continue
        theirs = view.get("admission", {})
        for key in ("in_flight", "admitted", "express"):
            admission[key] = admission.get(key, 0) + theirs.get(key, 0)
        for key in ("queued", "rejected"):
            admission[key] = dict(admission.get(key, {}))
            _add(admission[key], theirs.get(key, {}))
        for key in _SUMMED:
            merged[key] = merged.get(key, 0) + view.get(key, 0)
        by_address = {backend.get("address"): backend for backend in merged.get("backends", [])}
        for backend in view.get("backends", []):
            mine = by_address.get(backend.get("address"))
            if mine is not None:
                _add(mine, {key: backend.get(key, 0) for key in _BACKEND_SUMMED if key in backend})
    merged["processes"] = [
        {"process": index, "admission": view.get("admission", {}), "rate_limited": view.get("rate_limited", 0)}
        for index, view in sorted(views.items())
    ]
    return merged
