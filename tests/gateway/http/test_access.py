"""Who may call drain/undrain and the observability routes: the rules, then a real gateway on and off loopback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from depthserve.gateway.edge.api_keys import ApiKeys
from depthserve.gateway.errors import GatewayError
from depthserve.gateway.http.access import RouteAccess, is_loopback
from depthserve.settings import GatewaySettings
from depthserve.testing.processes import Proc, start_gateway, start_worker

ALICE = {"x-api-key": "secret-a"}
ALICE_LINE, ADMIN_LINE = "alice:plain:secret-a", "ops:plain:admin-secret"
ADMIN = {"authorization": "Bearer admin-secret"}
OBSERVED = ("/metrics", "/dashboard", "/v1/cluster", "/v1/cluster/history")


def access(monkeypatch: pytest.MonkeyPatch, api: str = "", admin: str = "", **flags: bool) -> RouteAccess:
    monkeypatch.setenv("DEPTHSERVE_ADMIN_KEYS", admin)
    return RouteAccess(GatewaySettings(backends=["127.0.0.1:1"], **flags), ApiKeys.from_sources(env_value=api))


def status(check: object, *args: object) -> int:
    assert callable(check)
    try:
        check(*args)
    except GatewayError as error:
        return error.status
    return 200


def test_loopback_addresses() -> None:
    assert all(is_loopback(host) for host in ("127.0.0.1", "127.3.4.5", "::1", "::ffff:127.0.0.1"))
    assert not any(is_loopback(host) for host in ("10.1.2.3", "192.0.2.2", "::ffff:10.0.0.1", "fd00::2", "", None, "x"))


def test_without_admin_keys_control_answers_loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    rules = access(monkeypatch)
    assert status(rules.check_admin, {}, "10.1.2.3") == 403
    assert status(rules.check_admin, {}, "127.0.0.1") == 200
    with_keys = access(monkeypatch, api=ALICE_LINE)
    assert status(with_keys.check_admin, {}, "127.0.0.1") == 401  # a local caller still shows its API key
    assert status(with_keys.check_admin, ALICE, "127.0.0.1") == 200
    assert status(with_keys.check_admin, ALICE, "10.1.2.3") == 403


def test_with_admin_keys_control_needs_one_from_anywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    rules = access(monkeypatch, api=ALICE_LINE, admin=ADMIN_LINE)
    assert status(rules.check_admin, ADMIN, "10.1.2.3") == 200
    assert status(rules.check_admin, ALICE, "127.0.0.1") == 403  # an API key is not an admin key
    assert status(rules.check_admin, {}, "127.0.0.1") == 401
    assert status(rules.check_admin, {"x-api-key": "nope"}, "10.1.2.3") == 401


def test_observability_is_open_unless_protected(monkeypatch: pytest.MonkeyPatch) -> None:
    assert status(access(monkeypatch, api=ALICE_LINE).check_observer, {}, "10.1.2.3") == 200
    protected = access(monkeypatch, api=ALICE_LINE, admin=ADMIN_LINE, protect_observability=True)
    assert [status(protected.check_observer, key, "10.1.2.3") for key in ({}, ALICE, ADMIN)] == [401, 200, 200]
    assert status(protected.check_health, {}, "10.1.2.3") == 200  # health stays open
    keyless = access(monkeypatch, protect_observability=True)
    assert [status(keyless.check_observer, {}, host) for host in ("10.1.2.3", "127.0.0.1")] == [403, 200]
    health = access(monkeypatch, api=ALICE_LINE, protect_health=True)  # as before: keys on both
    assert [status(health.check_observer, key, "10.1.2.3") for key in ({}, ALICE)] == [401, 200]
    assert [status(health.check_health, key, "10.1.2.3") for key in ({}, ALICE)] == [401, 200]


def own_address() -> str | None:
    """A non-loopback IPv4 address of this machine, if it has one (no packet is sent to find it)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("192.0.2.1", 9))
            address = str(probe.getsockname()[0])
    except OSError:
        return None
    return None if is_loopback(address) else address


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[str]:
    proc, address = start_worker(tmp_path, "--warmup-levels", "0")
    yield address
    proc.stop()


def test_off_loopback_a_gateway_without_keys_refuses_drain_and_protected_views(tmp_path: Path, worker: str) -> None:
    outside = own_address()
    if outside is None:
        pytest.skip("this machine has no non-loopback address; the rules are tested above")
    config = tmp_path / "gateway.yaml"
    config.write_text("protect_observability: true\n")
    gateway, local_url = start_gateway(tmp_path, [worker], "--host", "0.0.0.0", "--config", str(config))
    remote_url = local_url.replace("127.0.0.1", outside)
    try:
        refused = httpx.post(f"{remote_url}/v1/cluster/{worker}/drain", timeout=10)
        assert refused.status_code == 403 and refused.json()["reason"] == "forbidden"
        assert "loopback" in refused.json()["error"] and "admin" in refused.json()["error"]
        assert [httpx.get(f"{remote_url}{path}", timeout=10).status_code for path in OBSERVED] == [403] * 4
        assert httpx.get(f"{remote_url}/healthz", timeout=10).status_code == 200
        assert [httpx.get(f"{local_url}{path}", timeout=10).status_code for path in OBSERVED] == [200] * 4
        drained = httpx.post(f"{local_url}/v1/cluster/{worker}/drain", timeout=10)
        assert drained.status_code == 200 and drained.json()["state"] == "draining"
    finally:
        gateway.stop()


def drain_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "depthserve", "drain", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_admin_keys_guard_drain_and_protect_observability_takes_any_key(tmp_path: Path, worker: str) -> None:
    keys, admins, config = tmp_path / "keys", tmp_path / "admins", tmp_path / "gateway.yaml"
    keys.write_text("alice:plain:secret-a\n")
    admins.write_text("ops:plain:admin-secret\n")
    config.write_text("protect_observability: true\n")
    gateway: Proc | None = None
    try:
        gateway, url = start_gateway(
            tmp_path, [worker], "--api-keys-file", str(keys), "--admin-keys-file", str(admins), "--config", str(config)
        )
        drain = f"{url}/v1/cluster/{worker}/drain"
        assert httpx.post(drain, timeout=10).status_code == 401
        as_user = httpx.post(drain, headers=ALICE, timeout=10)
        assert as_user.status_code == 403 and "admin key" in as_user.json()["error"]
        assert httpx.post(drain, headers=ADMIN, timeout=10).json()["state"] == "draining"
        keyless = drain_cli(worker, "--undrain", "--url", url)
        assert keyless.returncode == 1 and "admin key" in keyless.stdout
        assert drain_cli(worker, "--undrain", "--url", url, "--admin-key", "admin-secret").returncode == 0
        by_env = drain_cli(worker, "--url", url, env={"DEPTHSERVE_ADMIN_KEY": "admin-secret"})
        assert by_env.returncode == 0 and f"{worker}: draining" in by_env.stdout
        for path in OBSERVED:
            codes = [httpx.get(f"{url}{path}", headers=key, timeout=10).status_code for key in ({}, ALICE, ADMIN)]
            assert codes == [401, 200, 200], path
        assert httpx.get(f"{url}/healthz", timeout=10).status_code == 200
        status = [sys.executable, "-m", "depthserve", "status", "--url", url]
        refused = subprocess.run(status, capture_output=True, text=True, timeout=60)
        assert refused.returncode == 1 and "401" in refused.stdout
        shown = subprocess.run([*status, "--api-key", "secret-a"], capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0 and worker in shown.stdout, shown.stdout
    finally:
        if gateway is not None:
            gateway.stop()
