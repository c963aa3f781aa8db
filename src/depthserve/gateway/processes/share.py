"""A gateway process's place among its siblings: the shared block, its number and how many there are."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from depthserve.gateway.processes.shared import SharedState

SHARED_ENV = "DEPTHSERVE_INTERNAL_GATEWAY_SHARED"  # the shared block's directory, set by serve.py for its children


@dataclass(frozen=True)
class ProcessShare:
    """What one of a gateway's processes shares with the others."""

    state: SharedState
    index: int
    processes: int

    @property
    def directory(self) -> Path:
        """The private directory holding the block and the processes' sockets."""
        return self.state.directory

    def socket(self, index: int) -> Path:
        """Where process `index` answers its siblings."""
        return self.directory / f"process-{index}.sock"

    @classmethod
    def from_env(cls, processes: int) -> ProcessShare | None:
        """Join the block serve.py made (None for a gateway of one process), taking the next process number."""
        directory = os.environ.get(SHARED_ENV)
        if processes <= 1 or not directory:
            return None
        state = SharedState(Path(directory))
        return cls(state, state.claim_index() % processes, processes)
