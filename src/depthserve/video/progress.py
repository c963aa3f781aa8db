"""How far a video is: frames done of the total, frames per second, and the time left at that pace."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Progress:
    """Counts frames written; `snapshot` is what a job's status shows."""

    total: int
    clock: Callable[[], float] = time.monotonic
    done: int = 0
    started_at: float = field(default=0.0)

    def __post_init__(self) -> None:
        self.started_at = self.clock()

    def restart(self) -> None:
        """Count the pace from now (a job's frames start after it waited for a place)."""
        self.started_at = self.clock()

    def frame_done(self) -> None:
        """One more frame written."""
        self.done += 1

    def fps(self) -> float | None:
        """Frames written per second since the start, or None before the first."""
        elapsed = self.clock() - self.started_at
        return self.done / elapsed if self.done and elapsed > 0 else None

    def snapshot(self) -> dict[str, Any]:
        """`{frames_done, frames_total, fps, eta_s}` (fps and eta null until a frame is done)."""
        fps = self.fps()
        eta = None if fps is None else round((self.total - self.done) / fps, 1)
        return {
            "frames_done": self.done,
            "frames_total": self.total,
            "fps": None if fps is None else round(fps, 2),
            "eta_s": eta,
        }
