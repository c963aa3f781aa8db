"""The alert rules and the Grafana dashboard only name metrics the code exports, and promtool accepts them."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from depthserve.testing.observed import ObservedCluster, exported_names, observed_cluster, scrape

pytestmark = pytest.mark.slow

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RULES = DEPLOY / "prometheus" / "alerts.yml"
DASHBOARD = DEPLOY / "grafana" / "depthserve.json"
# PromQL's own words, and `up`, which Prometheus itself writes for every target.
PROMQL_WORDS = {
    "sum", "max", "min", "avg", "count", "rate", "irate", "increase", "deriv", "delta", "histogram_quantile",
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "offset", "bool",
    "topk", "bottomk", "abs", "clamp_min", "clamp_max", "le", "up",
}  # fmt: skip


def rule_exprs() -> dict[str, str]:
    """Every expression in the rules file, by the rule's name."""
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {rule.get("alert") or rule["record"]: rule["expr"] for group in groups for rule in group["rules"]}


def dashboard_exprs() -> dict[str, str]:
    """Every query of the dashboard, by panel title and ref id."""
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return {f"{p['title']} {t['refId']}": t["expr"] for p in panels for t in p["targets"]}


def metric_names(expr: str) -> set[str]:
    """The identifiers of a PromQL expression that are not functions, keywords, labels, strings or durations."""
    stripped = re.sub(r'"[^"]*"', "", expr)  # label values and strings
    stripped = re.sub(r"\{[^}]*\}", "", stripped)  # label matchers
    stripped = re.sub(r"\[[^\]]*\]", "", stripped)  # range and subquery durations
    stripped = re.sub(r"\$__\w+", "", stripped)  # Grafana variables
    stripped = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", r"\1", stripped)  # labels
    stripped = re.sub(r"\boffset\s+\d+[smhdwy]", "", stripped)
    names = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", stripped))
    return {name for name in names if name not in PROMQL_WORDS and not re.fullmatch(r"\d+[smhdwy]?|e\d*", name)}


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[set[str]]:
    """Names a live gateway and worker export, after a little traffic (so every histogram has samples)."""
    with observed_cluster(tmp_path_factory.mktemp("deploy"), workers=1) as cluster:
        cluster.send(3)
        yield names_of(cluster)


def names_of(cluster: ObservedCluster) -> set[str]:
    """Union of the gateway's and the workers' exported names."""
    names = exported_names(scrape(cluster.gateway_url + "/metrics"))
    for url in cluster.metrics_urls.values():
        names |= exported_names(scrape(url))
    return names


def test_every_metric_in_rules_and_dashboard_is_exported(exported: set[str]) -> None:
    recorded = {name for name in rule_exprs() if ":" in name}
    queries = {**rule_exprs(), **dashboard_exprs()}
    missing = {}
    used: set[str] = set()
    for where, expr in queries.items():
        names = metric_names(expr)
        used |= names
        unknown = {n for n in names if n not in exported and n not in recorded}
        if unknown:
            missing[where] = sorted(unknown)
    assert not missing, f"queries name metrics nobody exports: {missing}"
    assert len(used - recorded) >= 25, sorted(used)  # the extractor found the metrics, not nothing


def test_extractor_reads_metric_names_not_labels_or_functions() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (backend, le) (rate(depthserve_x_bucket{route=~"/v1/depth"}[5m])))'
        " > 1.3 * (depthserve:p99 offset 30m) and on (backend) up == 0"
    )
    assert metric_names(expr) == {"depthserve_x_bucket", "depthserve:p99"}


def test_alert_rules_cover_the_failures_operators_watch() -> None:
    alerts = set(rule_exprs())
    for wanted in ("BackendDown", "P99AboveSLO", "GpuHotAndLatencyRising", "QueueGrowing", "ErrorRatio"):
        assert any(wanted in name for name in alerts), wanted


def test_promtool_accepts_rules_config_and_alert_unit_tests() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus); the YAML is still parsed above")
    checks = (
        ["check", "rules", str(RULES)],
        ["check", "config", str(DEPLOY / "prometheus" / "prometheus.yml")],
        ["test", "rules", str(DEPLOY / "prometheus" / "alerts_test.yml")],  # the alerts fire on made-up series
    )
    for command in checks:
        result = subprocess.run([promtool, *command], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stdout + result.stderr
