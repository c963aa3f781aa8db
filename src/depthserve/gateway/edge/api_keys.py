"""API keys, kept only as SHA-256 hashes, mapping a presented key to the name used for rate limits and logs.

Entry syntax, one per file line or per comma-separated item of DEPTHSERVE_API_KEYS (admin keys:
`--admin-keys-file` and DEPTHSERVE_ADMIN_KEYS, same syntax; see access.py):

    NAME:SHA256HEX         the key's hash, as printed by `new_key()` (an optional `sha256:` prefix is allowed)
    NAME:plain:KEY         the key itself; it is hashed at load time and the plain text is not kept

NAME is letters, digits and `_.@-`. In files, blank lines and lines starting with `#` are ignored. Several keys
may share a NAME (rotation); the same key twice is an error. Plain keys may not contain a comma in the env var.
A 401 from `authenticate` should carry `CHALLENGE_HEADERS` (`WWW-Authenticate: Bearer`); GatewayError has no
header field, so the HTTP layer adds them.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable, Mapping
from pathlib import Path

from depthserve.gateway.errors import GatewayError

ENV_VAR = "DEPTHSERVE_API_KEYS"
ADMIN_ENV_VAR = "DEPTHSERVE_ADMIN_KEYS"
CHALLENGE_HEADERS = {"WWW-Authenticate": "Bearer"}
_NAME = re.compile(r"[A-Za-z0-9_.@-]+")
_HEX = re.compile(r"[0-9a-fA-F]{64}")
_FORMAT = "expected NAME:SHA256HEX or NAME:plain:KEY"


def hash_key(key: str) -> str:
    """Hash a key the way it is stored and compared (SHA-256, lower-case hex)."""
    return hashlib.sha256(key.encode()).hexdigest()


def new_key() -> tuple[str, str]:
    """Mint a random key; give the key to the client and put only the hash in the config."""
    key = "ds_" + secrets.token_urlsafe(32)
    return key, hash_key(key)


def unauthorized() -> GatewayError:
    """The one 401 for a missing or wrong key, so a caller learns nothing about which keys exist."""
    return GatewayError(401, "unauthorized", "missing or invalid API key")


def _parse_entry(entry: str, where: str) -> tuple[str, str]:
    """Turn one entry into (name, hash); errors name the place but never echo the entry (it may be a key)."""
    name, sep, rest = entry.partition(":")
    if not sep or not _NAME.fullmatch(name):
        raise ValueError(f"{where}: {_FORMAT}")
    if rest.startswith("plain:"):
        key = rest.removeprefix("plain:")
        if not key:
            raise ValueError(f"{where}: empty plain key for {name!r}")
        return name, hash_key(key)
    digest = rest.removeprefix("sha256:")
    if not _HEX.fullmatch(digest):
        raise ValueError(f"{where}: {_FORMAT} (the hash must be 64 hex digits)")
    return name, digest.lower()


class ApiKeys:
    """The configured key hashes; `authenticate` turns request headers into a key name or a 401."""

    def __init__(self, entries: Iterable[tuple[str, str]] = ()) -> None:
        self._hashes: list[tuple[bytes, str]] = []  # (hash as bytes, name): compared one by one in constant time
        for name, digest in entries:
            if any(hmac.compare_digest(digest.encode(), known) for known, _ in self._hashes):
                raise ValueError(f"API key for {name!r} duplicates another configured key")
            self._hashes.append((digest.encode(), name))

    @classmethod
    def from_sources(cls, file: Path | None = None, env_value: str | None = None, env_name: str = ENV_VAR) -> ApiKeys:
        """Load keys from a file and from the `env_name` variable's value; ValueError names the bad line or entry."""
        entries: list[tuple[str, str]] = []
        if file is not None:
            for number, line in enumerate(file.read_text().splitlines(), start=1):
                text = line.strip()
                if text and not text.startswith("#"):
                    entries.append(_parse_entry(text, f"{file}: line {number}"))
        if env_value:
            for number, item in enumerate(env_value.split(","), start=1):
                if item.strip():
                    entries.append(_parse_entry(item.strip(), f"{env_name} entry {number}"))
        return cls(entries)

    @property
    def enabled(self) -> bool:
        """Whether any key is configured; without keys every request is allowed."""
        return bool(self._hashes)

    @property
    def names(self) -> frozenset[str]:
        """The configured key names (identities), for config checks and per-key limits."""
        return frozenset(name for _, name in self._hashes)

    def authenticate(self, headers: Mapping[str, str]) -> str | None:
        """Return the key's name (None when auth is off) from `authorization: Bearer` or `x-api-key`, else 401."""
        if not self._hashes:
            return None
        found = self.match(headers)
        if found is None:
            raise unauthorized()
        return found

    def match(self, headers: Mapping[str, str]) -> str | None:
        """The name of the configured key the request shows, or None (no key shown, or not one of these)."""
        presented = _presented_key(headers)
        if presented is None or not self._hashes:
            return None
        digest = hash_key(presented).encode()
        found: str | None = None
        for known, name in self._hashes:  # no early exit: the time taken does not depend on which key matched
            if hmac.compare_digest(digest, known):
                found = name
        return found


def _presented_key(headers: Mapping[str, str]) -> str | None:
    scheme, _, token = headers.get("authorization", "").strip().partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    key = headers.get("x-api-key", "").strip()
    return key or None
