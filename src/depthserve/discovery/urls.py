"""Turn `--discovery` URLs into sources: `redis://`, `etcd://`, `file://`, `dns://`."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlsplit

from depthserve.discovery.dns_source import DnsSource, parse_dns_url
from depthserve.discovery.etcd_registry import parse_etcd_url
from depthserve.discovery.etcd_source import EtcdSource
from depthserve.discovery.file_source import FileSource
from depthserve.discovery.redis_registry import RedisSource, split_url
from depthserve.discovery.source import DiscoverySource

SCHEMES = ("redis", "rediss", "etcd", "file", "dns")


def file_path(url: str) -> Path:
    """The path of a `file:///PATH` URL."""
    parts = urlsplit(url)
    if parts.netloc not in ("", "localhost") or not parts.path:
        raise ValueError(f"file URL {url!r} must be file:///ABSOLUTE/PATH.yaml")
    return Path(unquote(parts.path))


def check_url(url: str) -> str:
    """Validate a discovery URL without connecting; ValueError naming the problem."""
    scheme = urlsplit(url).scheme
    if scheme in ("redis", "rediss"):
        split_url(url)
    elif scheme == "etcd":
        parse_etcd_url(url)
    elif scheme == "file":
        file_path(url)
    elif scheme == "dns":
        parse_dns_url(url)
    else:
        raise ValueError(f"discovery URL {url!r}: scheme must be one of {', '.join(SCHEMES)}")
    return url


def make_source(url: str, poll_s: float = 1.0, default_auto: bool = False) -> DiscoverySource:
    """Build the source a URL names."""
    scheme = urlsplit(check_url(url)).scheme
    if scheme == "file":
        return FileSource(file_path(url), poll_s, default_auto)
    if scheme == "dns":
        return DnsSource(url, poll_s, default_auto)
    if scheme == "etcd":
        return EtcdSource(url, default_auto)  # watched: poll_s does not apply
    return RedisSource(url, poll_s, default_auto)
