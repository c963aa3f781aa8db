"""GET /dashboard in headless Chromium on a running cluster: live data arrives and every backend appears."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlencode

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request

from depthserve.gateway.http.dashboard import dashboard_html, history
from depthserve.telemetry.history import RequestHistory
from depthserve.testing.observed import ObservedCluster, observed_cluster

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
REQUIRE_SERVICES = os.environ.get("DEPTHSERVE_REQUIRE_SERVICES") == "1"


def chromium() -> str:
    """Chromium's path; skip without it, or fail where CI says it must be installed (scripts/setup does)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        message = "chromium is not installed (Debian package chromium; scripts/test installs it)"
        if REQUIRE_SERVICES:
            pytest.fail(message + " (DEPTHSERVE_REQUIRE_SERVICES=1)")
        pytest.skip(message)
    return found


def headless(url: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run headless Chromium on `url`, giving page scripts a few seconds of (virtual) time to fetch and render."""
    command = [
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=4000",
        *args,
        url,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=90)


@pytest.fixture(scope="module")
def busy_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ObservedCluster]:
    """Two workers behind a gateway, with requests flowing the whole time, so the charts have data."""
    stop = threading.Event()
    failures: list[BaseException] = []
    with observed_cluster(tmp_path_factory.mktemp("dashboard")) as cluster:

        def traffic() -> None:
            while not stop.is_set():
                try:
                    cluster.send(4)
                except Exception as exc:  # keep the traffic flowing; the failure is reported below
                    failures.append(exc)
                time.sleep(0.05)

        sender = threading.Thread(target=traffic, daemon=True)
        sender.start()
        time.sleep(3.0)  # a few completed seconds of history
        try:
            yield cluster
        finally:
            stop.set()
            sender.join(30)
    assert not failures, f"requests failed while the dashboard was open: {failures[:3]}"


@pytest.mark.slow
def test_dashboard_shows_every_backend_live_in_chromium(busy_cluster: ObservedCluster, tmp_path: Path) -> None:
    url = busy_cluster.gateway_url + "/dashboard"
    result = headless(url, tmp_path / "profile", "--dump-dom")
    dom = result.stdout
    assert result.returncode == 0, result.stderr[-2000:]
    assert 'data-live="1"' in dom, "the page never rendered data from the gateway:\n" + dom[-2000:]
    rows = dict(re.findall(r'data-backend="([^"]+)" data-state="([^"]+)"', dom))
    assert rows == dict.fromkeys(busy_cluster.workers, "ready")
    qps = re.search(r'id="qps">([^<]*)<', dom)
    assert qps is not None and float(qps.group(1)) > 0, "QPS should show the traffic that is flowing"

    ARTIFACTS.mkdir(exist_ok=True)
    screenshot = ARTIFACTS / "dashboard.png"
    screenshot.unlink(missing_ok=True)
    shot = headless(
        url, tmp_path / "profile", "--hide-scrollbars", "--window-size=1400,900", f"--screenshot={screenshot}"
    )
    assert shot.returncode == 0, shot.stderr[-2000:]
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_dashboard_page_is_self_contained() -> None:
    page = dashboard_html()
    assert "<script>" in page and "<canvas" in page
    assert not re.search(r'(src|href)\s*=\s*"(https?:)?//', page), "the page must load nothing from elsewhere"


@pytest.mark.slow
def test_dashboard_and_history_are_served(busy_cluster: ObservedCluster) -> None:
    page = httpx.get(busy_cluster.gateway_url + "/dashboard")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    points = httpx.get(busy_cluster.gateway_url + "/v1/cluster/history").json()["points"]
    assert any(p["qps"] > 0 for p in points)


@pytest.mark.parametrize(
    ("given", "window"),
    [("7", 7), ("60", 60), ("\u00b2", 5), ("\u0663", 5), ("0", 5), ("61", 5), ("9" * 5000, 5), ("x", 5)],
)
async def test_history_window_is_ascii_digits_in_range_or_the_default(given: str, window: int) -> None:
    app = Starlette()
    app.state.metrics = SimpleNamespace(history=RequestHistory())
    query = urlencode({"window_s": given}).encode()
    reply = await history(Request({"type": "http", "app": app, "query_string": query, "headers": []}))
    assert reply.status_code == 200 and json.loads(reply.body)["window_s"] == window
