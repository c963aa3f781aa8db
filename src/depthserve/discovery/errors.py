"""The one boundary where Redis, etcd, DNS, YAML and socket errors become DiscoveryError."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import aetcd.exceptions
import dns.exception
import grpc
import redis.exceptions
import yaml


class DiscoveryError(Exception):
    """A source could not be read (or a worker could not register); the message says which and why."""


@contextmanager
def foreign_errors(what: str) -> Iterator[None]:
    """Re-raise any foreign failure inside the block as DiscoveryError prefixed with `what`."""
    try:
        yield
    except DiscoveryError:
        raise
    except (
        redis.exceptions.RedisError,
        aetcd.exceptions.ClientError,
        grpc.RpcError,  # aetcd passes some through untranslated (a refresh on a dropped stream)
        dns.exception.DNSException,
        yaml.YAMLError,
        OSError,
        ValueError,
    ) as exc:
        raise DiscoveryError(f"{what}: {type(exc).__name__}: {exc}") from exc
    except TimeoutError as exc:
        raise DiscoveryError(f"{what}: timed out") from exc
