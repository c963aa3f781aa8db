"""Backends from DNS, polled: A/AAAA records of a name (a Kubernetes headless service) or SRV records.

URL forms (gRPC's `dns:[//authority/]host[:port]`): `dns://NAME:PORT` asks the system resolver;
`dns://NAMESERVER[:PORT]/NAME:PORT` asks that server; a NAME starting with `_` (for example
`_grpc._tcp.workers.default.svc.cluster.local`) is an SRV lookup giving hosts and ports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar
from urllib.parse import urlsplit

import dns.asyncresolver
import dns.exception
import dns.nameserver
import dns.rdatatype
import dns.resolver

from depthserve.discovery.backend_spec import BackendSpec
from depthserve.discovery.errors import DiscoveryError, foreign_errors
from depthserve.discovery.source import Backends, PollingSource

LIFETIME_S = 2.0  # one lookup, retries included


@dataclass(frozen=True)
class DnsTarget:
    """What to look up, and where."""

    name: str
    port: int | None  # None only for SRV, whose records carry ports
    nameserver: tuple[str, int] | None = None

    @property
    def srv(self) -> bool:
        """Whether this is an SRV lookup."""
        return self.name.startswith("_")


def _host_port(text: str, default_port: int | None) -> tuple[str, int | None]:
    host, sep, port = text.rpartition(":")
    if not sep or "]" in port:
        return text.strip("[]"), default_port
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"bad port in {text!r}")
    return host.strip("[]"), int(port)


def parse_dns_url(url: str) -> DnsTarget:
    """Read `dns://NAME:PORT` or `dns://NAMESERVER[:PORT]/NAME[:PORT]`; ValueError with the reason."""
    parts = urlsplit(url)
    if parts.scheme != "dns":
        raise ValueError(f"DNS URL {url!r} must start with dns://")
    nameserver = None
    target = parts.netloc
    if parts.path not in ("", "/"):
        host, port = _host_port(parts.netloc, 53)
        nameserver = (host, port or 53) if host else None
        target = parts.path.lstrip("/")
    name, port = _host_port(target, None)
    if not name:
        raise ValueError(f"DNS URL {url!r} names no host")
    if port is None and not name.startswith("_"):
        raise ValueError(f"DNS URL {url!r} needs a port (dns://NAME:PORT), or an SRV name (_service._proto.NAME)")
    return DnsTarget(name, port, nameserver)


class DnsSource(PollingSource):
    """Backends from a DNS name, re-resolved every poll; no records (NXDOMAIN, empty answer) means none."""

    name: ClassVar[str] = "dns"

    def __init__(self, url: str, poll_s: float = 1.0, default_auto: bool = False) -> None:
        super().__init__(poll_s)
        self.target = parse_dns_url(url)
        self.default_auto = default_auto
        self.resolver = dns.asyncresolver.Resolver(configure=self.target.nameserver is None)
        if self.target.nameserver is not None:
            self.resolver.nameservers = [dns.nameserver.Do53Nameserver(*self.target.nameserver)]
        self.resolver.lifetime = LIFETIME_S

    async def _addresses(self, name: str) -> list[str]:
        found = []
        for rdtype in (dns.rdatatype.A, dns.rdatatype.AAAA):
            try:
                answer = await self.resolver.resolve(name, rdtype, search=False)
            except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
                continue
            found += [rdata.to_text() for rdata in answer]
        return found

    def _spec(self, host: str, port: int) -> BackendSpec:
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        return BackendSpec(address, None if self.default_auto else 1.0, source=self.name)

    async def read(self) -> Backends:
        """Resolve once: the A/AAAA records with the URL's port, or the SRV records' targets and ports."""
        target = self.target
        with foreign_errors(f"DNS {target.name}"):
            if not target.srv:
                assert target.port is not None
                return frozenset(self._spec(host, target.port) for host in await self._addresses(target.name))
            try:
                answer = await self.resolver.resolve(target.name, dns.rdatatype.SRV, search=False)
            except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
                return frozenset()
            specs = set()
            for record in answer:
                host = record.target.to_text().rstrip(".")
                for address in await self._addresses(host):
                    specs.add(self._spec(address, record.port))
            return frozenset(specs)


__all__ = ["DiscoveryError", "DnsSource", "DnsTarget", "parse_dns_url"]
