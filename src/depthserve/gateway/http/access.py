"""Who may call the gateway's own routes: health, observability, and control (drain/undrain).

- Control routes need the admin role: an admin key (`admin_keys_file`, DEPTHSERVE_ADMIN_KEYS) when any
  is configured; without admin keys only loopback clients may call them (and, when API keys are on,
  with a valid API key). A proxy on the same machine makes every client look local: configure
  admin keys behind one.
- Observability routes (/metrics, /dashboard, /v1/cluster, /v1/cluster/history) need an API key or an
  admin key with `protect_observability`; with no key of either kind configured, loopback clients only.
- `protect_health` keeps its meaning: an API key (when keys are on) on the health and observability routes.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from typing import Any

from depthserve.gateway.edge.api_keys import ADMIN_ENV_VAR, ApiKeys, unauthorized
from depthserve.gateway.errors import GatewayError


def is_loopback(host: str | None) -> bool:
    """Whether a client address is this machine's loopback (127.0.0.0/8, ::1, or IPv4-mapped loopback)."""
    if not host:
        return False
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return bool(address.is_loopback or (mapped is not None and mapped.is_loopback))


def _forbidden(message: str) -> GatewayError:
    return GatewayError(403, "forbidden", message)


class RouteAccess:
    """The access rules of the gateway's own routes, built once from settings and the API keys."""

    def __init__(self, settings: Any, api_keys: ApiKeys) -> None:
        self.api_keys = api_keys
        self.admin_keys = ApiKeys.from_sources(
            settings.admin_keys_file, os.environ.get(ADMIN_ENV_VAR), env_name=ADMIN_ENV_VAR
        )
        self.protect_health = settings.protect_health
        self.protect_observability = settings.protect_observability

    def check_api(self, headers: Mapping[str, str], client_host: str | None) -> None:
        """Routes of the inference API: an API key when keys are configured (401 without)."""
        self.api_keys.authenticate(headers)

    def check_health(self, headers: Mapping[str, str], client_host: str | None) -> None:
        """Liveness, readiness and the OpenAPI document: open unless protect_health (then 401 without a key)."""
        if self.protect_health:
            self.api_keys.authenticate(headers)

    def check_observer(self, headers: Mapping[str, str], client_host: str | None) -> None:
        """Metrics, dashboard and cluster view: 401 without a key, or 403 off loopback when no key is configured."""
        if not self.protect_observability:
            self.check_health(headers, client_host)
            return
        if not self.api_keys.enabled and not self.admin_keys.enabled:
            if not is_loopback(client_host):
                raise _forbidden(
                    "protect_observability is on and no API or admin key is configured: "
                    "this route answers only clients on the gateway's machine (loopback)"
                )
            return
        if self.api_keys.match(headers) is None and self.admin_keys.match(headers) is None:
            raise unauthorized()

    def check_admin(self, headers: Mapping[str, str], client_host: str | None) -> None:
        """Control routes: an admin key, or (without admin keys) a loopback client; 401/403 otherwise."""
        if self.admin_keys.enabled:
            if self.admin_keys.match(headers) is not None:
                return
            if self.api_keys.match(headers) is not None:
                raise _forbidden("this route needs an admin key (admin_keys_file), not an API key")
            raise GatewayError(401, "unauthorized", "missing or invalid admin key")
        if not is_loopback(client_host):
            raise _forbidden(
                "drain and undrain answer only clients on the gateway's machine (loopback) unless admin keys "
                "are configured (admin_keys_file or DEPTHSERVE_ADMIN_KEYS)"
            )
        self.api_keys.authenticate(headers)  # with API keys on, a local caller still shows one
