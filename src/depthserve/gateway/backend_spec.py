"""Parse `HOST:PORT[@WEIGHT|@auto]` backend specs, so weights can be given where the address is."""

from __future__ import annotations

from dataclasses import dataclass

AUTO = "auto"


@dataclass(frozen=True)
class BackendSpec:
    """A backend address with its static weight, or `auto` to weigh it by measured throughput."""

    address: str
    weight: float | None = 1.0  # None = auto

    @property
    def auto(self) -> bool:
        """Whether the weight follows the backend's measured throughput."""
        return self.weight is None


def parse_backend(spec: str, default_auto: bool = False) -> BackendSpec:
    """Read `HOST:PORT`, `HOST:PORT@2.5` or `HOST:PORT@auto`; raise ValueError with the reason."""
    address, _, weight = spec.strip().partition("@")
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"backend {spec!r} is not HOST:PORT[@WEIGHT]")
    if not weight:
        return BackendSpec(address, None if default_auto else 1.0)
    if weight == AUTO:
        return BackendSpec(address, None)
    try:
        value = float(weight)
    except ValueError:
        raise ValueError(f"backend {spec!r}: weight must be a number or 'auto'") from None
    if not 0 < value < 1e6:
        raise ValueError(f"backend {spec!r}: weight must be positive")
    return BackendSpec(address, value)
