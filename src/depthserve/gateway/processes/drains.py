"""Backends an operator drained, recorded in the gateway's private directory so every process applies them.

A drain is also sent to each sibling at once (peers.py), but a sibling that is still starting (its socket
not up yet) or was restarted would miss that message: each process reads the record when it adds a
backend and once more when its own socket is up, after which the messages reach it.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from depthserve.gateway.processes.share import ProcessShare
from depthserve.gateway.upstream.pool import BackendPool

DRAINED_FILE = "drained"


def record_drain(share: ProcessShare, address: str, drained: bool) -> None:
    """Note an operator's drain (or undrain) of `address` for every process, now and to come."""
    path = share.directory / DRAINED_FILE
    with share.state.locked():  # two processes draining at once must not lose one another's change
        current = drained_addresses(share)
        current = current | {address} if drained else current - {address}
        spare = path.with_name(DRAINED_FILE + ".new")
        spare.write_text("".join(f"{each}\n" for each in sorted(current)))
        os.replace(spare, path)  # readers see the old list or the new one, never half of one


def drained_addresses(share: ProcessShare) -> frozenset[str]:
    """The addresses drained by an operator and not undrained since."""
    try:
        return frozenset(Path(share.directory / DRAINED_FILE).read_text().split())
    except FileNotFoundError:
        return frozenset()


def apply_recorded_drains(pool: BackendPool, share: ProcessShare) -> None:
    """Drain, in this process's pool, every backend the record names (those it knows)."""
    for address in drained_addresses(share):
        with contextlib.suppress(KeyError):
            if not pool.backends[address].drained:
                pool.set_drained(address, True)
