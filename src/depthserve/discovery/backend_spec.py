"""Backend specs: `HOST:PORT[@WEIGHT|@auto]` from flags, or records from discovery with model and version tags."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

AUTO = "auto"


@dataclass(frozen=True)
class BackendSpec:
    """A backend address with its static weight (None = `auto`, by measured throughput) and what it serves.

    `model` None means untagged: the backend takes any model the gateway is asked for (a plain
    `--backends` list); `version` None means the backend is in every version's pool of its model.
    """

    address: str
    weight: float | None = 1.0  # None = auto
    model: str | None = None
    version: str | None = None
    id: str = ""  # the worker's own id in a registry, for operators
    hardware: str = ""  # what the worker says it runs on, for operators
    source: str = "static"  # which discovery source named it

    @property
    def auto(self) -> bool:
        """Whether the weight follows the backend's measured throughput."""
        return self.weight is None

    def serves(self, model: str, version: str | None = None) -> bool:
        """Whether this backend belongs to the pool of `model` (and `version`, when one is asked for)."""
        if self.model is not None and self.model != model:
            return False
        return version is None or self.version is None or self.version == version


def check_address(address: str, context: str) -> str:
    """Return a `HOST:PORT` address unchanged, or raise ValueError naming `context`."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"backend {context!r} is not HOST:PORT[@WEIGHT]")
    return address


def _weight(raw: Any, context: str, default_auto: bool) -> float | None:
    if raw is None or raw == "":
        return None if default_auto else 1.0
    if raw == AUTO:
        return None
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise ValueError(f"backend {context!r}: weight must be a number or 'auto'") from None
    if not 0 < value < 1e6:
        raise ValueError(f"backend {context!r}: weight must be positive")
    return value


def parse_backend(spec: str, default_auto: bool = False, source: str = "static") -> BackendSpec:
    """Read `HOST:PORT`, `HOST:PORT@2.5` or `HOST:PORT@auto`; raise ValueError with the reason."""
    address, _, weight = spec.strip().partition("@")
    return BackendSpec(check_address(address, spec), _weight(weight, spec, default_auto), source=source)


def _tag(record: Mapping[str, Any], key: str) -> str | None:
    value = record.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str | int | float):
        raise ValueError(f"backend field {key!r} must be a string, got {value!r}")
    return str(value)


def spec_from_record(record: Mapping[str, Any], source: str, default_auto: bool = False) -> BackendSpec:
    """Read a discovery record `{address, model?, version?, weight?, id?, hardware?}`; ValueError if malformed."""
    address = record.get("address")
    if not isinstance(address, str):
        raise ValueError(f"backend record {dict(record)!r} has no 'address'")
    unknown = set(record) - {"address", "model", "version", "weight", "id", "hardware"}
    if unknown:
        raise ValueError(f"backend {address!r}: unknown fields {sorted(map(str, unknown))}")  # any YAML key type
    return BackendSpec(
        check_address(address.strip(), address),
        _weight(record.get("weight"), address, default_auto),
        model=_tag(record, "model"),
        version=_tag(record, "version"),
        id=_tag(record, "id") or "",
        hardware=_tag(record, "hardware") or "",
        source=source,
    )
