"""What a worker advertises and registers: reachable addresses, never a wildcard."""

from __future__ import annotations

import pytest

from depthserve.settings import WorkerSettings
from depthserve.worker.registration import advertised_address, registration_for, worker_entry


def test_advertised_address() -> None:
    assert advertised_address(WorkerSettings(host="10.0.0.5"), 50051) == "10.0.0.5:50051"
    assert advertised_address(WorkerSettings(host="0.0.0.0", advertise="gpu-7.lan"), 50051) == "gpu-7.lan:50051"
    assert advertised_address(WorkerSettings(host="0.0.0.0", advertise="203.0.113.4:6000"), 50051) == "203.0.113.4:6000"
    # Bound to every address: the one this machine uses towards the registry.
    assert advertised_address(WorkerSettings(host="0.0.0.0"), 50051, ("127.0.0.1", 6379)) == "127.0.0.1:50051"
    assert advertised_address(WorkerSettings(host="::1"), 50051) == "[::1]:50051"
    assert advertised_address(WorkerSettings(host="::", advertise="2001:db8::5"), 50051) == "[2001:db8::5]:50051"
    assert advertised_address(WorkerSettings(host="::", advertise="[2001:db8::5]:7000"), 50051) == "[2001:db8::5]:7000"
    with pytest.raises(ValueError, match="--advertise"):
        advertised_address(WorkerSettings(host="0.0.0.0"), 50051)


def test_entry_and_which_urls_register() -> None:
    settings = WorkerSettings(name="lingbot-depth", version="v2", weight=3.0, discovery="redis://127.0.0.1:6379")
    fields = worker_entry(settings, "10.0.0.5:50051", "h100")
    assert {k: fields[k] for k in ("address", "model", "version", "weight", "hardware")} == {
        "address": "10.0.0.5:50051",
        "model": "lingbot-depth",
        "version": "v2",
        "weight": 3.0,
        "hardware": "h100",
    }
    assert worker_entry(WorkerSettings(), "a:1")["weight"] == "auto"
    registration = registration_for(settings, 50051)
    assert registration is not None and registration.entry["address"] == "127.0.0.1:50051"
    assert registration_for(WorkerSettings(discovery="dns://w:1"), 1) is None  # Kubernetes keeps DNS
    assert registration_for(WorkerSettings(), 1) is None
