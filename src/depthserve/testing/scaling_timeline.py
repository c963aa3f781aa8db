"""A timeline of a gateway's scaling signal: /v1/cluster read every interval while a load runs."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import httpx


@dataclass(frozen=True)
class Sample:
    """One reading of one model pool: seconds since the start, and what the gateway said."""

    t: float
    serving: int  # workers taking traffic
    listed: int  # backends the gateway knows (serving, warming, leaving)
    desired: int
    demand: float
    waiting: int
    completions_per_s: float
    recommended: int  # the rule's count at this reading, before the stabiliser's windows


@dataclass
class Timeline:
    """Samples of one pool, taken by `record` until it is cancelled."""

    url: str
    model: str = "lingbot-depth"
    interval_s: float = 0.25
    samples: list[Sample] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    async def record(self) -> None:
        """Read /v1/cluster every interval (a failed read is skipped) until cancelled."""
        async with httpx.AsyncClient(timeout=5.0) as client:
            while True:
                try:
                    cluster = (await client.get(f"{self.url}/v1/cluster")).json()
                except (httpx.HTTPError, ValueError):
                    cluster = None
                pool = None if cluster is None else cluster["scaling"]["pools"].get(self.model)
                if pool is not None:
                    self.samples.append(
                        Sample(
                            round(time.monotonic() - self.started, 2),
                            pool["workers"],
                            len(cluster["backends"]),
                            pool["desired"],
                            pool["demand"],
                            pool["waiting"],
                            pool["completions_per_s"],
                            pool["recommended"],
                        )
                    )
                await asyncio.sleep(self.interval_s)

    def first(self, since: float, check: object) -> Sample | None:
        """The first sample at or after `since` (seconds) that satisfies `check(sample)`."""
        assert callable(check)
        return next((s for s in self.samples if s.t >= since and check(s)), None)

    def last(self, before: float, check: object) -> Sample | None:
        """The last sample before `before` (seconds) that satisfies `check(sample)`."""
        assert callable(check)
        return next((s for s in reversed(self.samples) if s.t < before and check(s)), None)

    def changes(self) -> list[Sample]:
        """The samples where the serving count or the desired count changed: the timeline's events."""
        events: list[Sample] = []
        for sample in self.samples:
            if not events or (sample.serving, sample.desired) != (events[-1].serving, events[-1].desired):
                events.append(sample)
        return events
