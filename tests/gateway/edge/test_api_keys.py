"""API keys: hashed storage, bearer and x-api-key auth, one indistinct 401, and strict config parsing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from depthserve.gateway.edge.api_keys import CHALLENGE_HEADERS, ApiKeys, hash_key, new_key
from depthserve.gateway.errors import GatewayError

ALICE_KEY = "alice-secret-key"
BOB_KEY = "bob-secret-key"


def keys() -> ApiKeys:
    return ApiKeys.from_sources(None, f"alice:plain:{ALICE_KEY}, bob:{hash_key(BOB_KEY)}")


def message_of_401(api_keys: ApiKeys, headers: dict[str, str]) -> str:
    with pytest.raises(GatewayError) as info:
        api_keys.authenticate(headers)
    assert (info.value.status, info.value.reason, info.value.retry_after) == (401, "unauthorized", None)
    return info.value.message


def test_bearer_and_x_api_key_accepted() -> None:
    api_keys = keys()
    assert api_keys.authenticate({"authorization": f"Bearer {ALICE_KEY}"}) == "alice"
    assert api_keys.authenticate({"authorization": f"bearer  {BOB_KEY} "}) == "bob"
    assert api_keys.authenticate({"x-api-key": BOB_KEY}) == "bob"
    assert api_keys.authenticate({"authorization": "Basic xyz", "x-api-key": ALICE_KEY}) == "alice"


def test_missing_and_wrong_keys_get_the_same_401() -> None:
    api_keys = keys()
    messages = {
        message_of_401(api_keys, headers)
        for headers in (
            {},
            {"authorization": "Bearer nope"},
            {"authorization": "Bearer "},
            {"authorization": ALICE_KEY},  # no scheme
            {"x-api-key": "nope"},
            {"x-api-key": hash_key(ALICE_KEY)},  # the stored hash is not a key
        )
    }
    assert messages == {"missing or invalid API key"}
    assert CHALLENGE_HEADERS == {"WWW-Authenticate": "Bearer"}


def test_disabled_without_keys_allows_everything() -> None:
    api_keys = ApiKeys.from_sources(None, "")
    assert not api_keys.enabled and api_keys.authenticate({}) is None
    assert keys().enabled


def test_file_and_env_parsing(tmp_path: Path) -> None:
    key, hashed = new_key()
    path = tmp_path / "keys.txt"
    lines = ["# team keys", "", f"ci:{hashed.upper()}", "  # indented comment", f"ci:plain:{ALICE_KEY}"]
    path.write_text("\n".join([*lines, f"ops:sha256:{hash_key(BOB_KEY)}", ""]))
    api_keys = ApiKeys.from_sources(path, f"web:plain:{'w' * 40},,")
    assert api_keys.names == {"ci", "ops", "web"}
    assert api_keys.authenticate({"x-api-key": key}) == "ci"
    assert api_keys.authenticate({"x-api-key": ALICE_KEY}) == "ci"  # two keys for one name: rotation
    assert api_keys.authenticate({"x-api-key": BOB_KEY}) == "ops"
    assert api_keys.authenticate({"x-api-key": "w" * 40}) == "web"


@pytest.mark.parametrize(
    "bad_line",
    ["no-separator", "bad name:plain:SECRET", "ci:plain:", "ci:abc123", ":plain:key", "ci:sha256:" + "g" * 64],
)
def test_malformed_file_line_names_its_number(tmp_path: Path, bad_line: str) -> None:
    path = tmp_path / "keys.txt"
    path.write_text(f"# header\nok:plain:fine\n{bad_line}\n")
    with pytest.raises(ValueError, match="line 3") as info:
        ApiKeys.from_sources(path, None)
    assert bad_line not in str(info.value)  # never echoes the line: it may hold a key


def test_malformed_env_entry_names_its_position() -> None:
    with pytest.raises(ValueError, match="DEPTHSERVE_API_KEYS entry 2"):
        ApiKeys.from_sources(None, "a:plain:one,oops")
    with pytest.raises(ValueError, match="duplicates"):
        ApiKeys.from_sources(None, f"a:plain:{ALICE_KEY},b:{hash_key(ALICE_KEY)}")


def _everything_in(obj: Any, seen: set[int] | None = None) -> list[Any]:
    """Every value reachable from an object's attributes and containers."""
    seen = seen if seen is not None else set()
    if id(obj) in seen:
        return []
    seen.add(id(obj))
    found = [obj]
    children: list[Any] = []
    if isinstance(obj, dict):
        children = [*obj.keys(), *obj.values()]
    elif isinstance(obj, list | tuple | set | frozenset):
        children = list(obj)
    elif hasattr(obj, "__dict__"):
        children = list(vars(obj).values())
    for child in children:
        found += _everything_in(child, seen)
    return found


def test_plain_keys_are_not_retained() -> None:
    values = _everything_in(keys())
    assert any(isinstance(v, bytes) and v == hash_key(ALICE_KEY).encode() for v in values)
    assert not any(
        (isinstance(v, str) and ALICE_KEY in v) or (isinstance(v, bytes) and ALICE_KEY.encode() in v) for v in values
    )


def test_new_key_is_random_and_hash_matches() -> None:
    (key1, hashed1), (key2, _) = new_key(), new_key()
    assert key1 != key2 and len(key1) > 40 and hash_key(key1) == hashed1 and len(hashed1) == 64
