"""Job limits per caller and in total: jobs queued or running, and bytes kept in the job store.

A job's charge is what it holds in the store: while queued or running it is active and keeps its
payload; once ended it keeps its result (nothing when it failed or was cancelled). Every job also
counts RECORD_BYTES for its record, so a flood of tiny jobs is bounded too. The caller is the API key
name, or "addr:HOST" without API keys. Stores apply the limits in the same atomic step as the state
change: MemoryJobStore through `Ledger`, RedisJobStore in its Lua scripts; both name a broken limit
by one of the codes below and leave the wording to `quota_error` and `result_refusal`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from depthserve.jobs.errors import QuotaExceeded

RECORD_BYTES = 1024  # what a job's record costs, whatever its payload or result
ACTIVE_RETRY_S = 2.0  # jobs finish within seconds: worth asking again soon
BYTES_RETRY_S = 30.0  # stored bytes free only when results are deleted or expire
CALLER_ACTIVE, TOTAL_ACTIVE, CALLER_BYTES, TOTAL_BYTES = "caller_active", "total_active", "caller_bytes", "total_bytes"
_MIB = 1024 * 1024


@dataclass(frozen=True)
class JobLimits:
    """The limits a store enforces (None: no limit), and where the in-process store keeps what memory cannot."""

    max_active_per_caller: int | None = None
    max_active: int | None = None
    max_stored_bytes_per_caller: int | None = None
    max_stored_bytes: int | None = None
    memory_bytes: int | None = None  # in-process store: payloads and results held in memory, all together
    spool_dir: Path | None = None  # in-process store: where the others go (default: the temp directory)

    @classmethod
    def from_settings(cls, settings: Any) -> JobLimits:
        """The slice of gateway or worker settings (JobFields) that limits jobs."""
        return cls(
            max_active_per_caller=settings.job_max_active_per_caller,
            max_active=settings.job_max_active,
            max_stored_bytes_per_caller=int(settings.job_max_stored_mb_per_caller * _MIB),
            max_stored_bytes=int(settings.job_max_stored_mb * _MIB),
            memory_bytes=int(settings.job_memory_mb * _MIB),
            spool_dir=settings.job_spool_dir,
        )

    def as_lua_args(self) -> list[int]:
        """The four limits as script arguments, -1 for none."""
        values = (self.max_active_per_caller, self.max_active, self.max_stored_bytes_per_caller, self.max_stored_bytes)
        return [-1 if value is None else value for value in values]


@dataclass(frozen=True)
class Usage:
    """What one caller and everyone hold now."""

    active: int = 0
    stored_bytes: int = 0
    total_active: int = 0
    total_stored_bytes: int = 0


def _over(limit: int | None, value: int) -> bool:
    return limit is not None and value > limit


def new_job_refusal(limits: JobLimits, usage: Usage, payload_bytes: int) -> str | None:
    """The limit a new job with this payload would break (caller's first), or None if it fits."""
    charge = payload_bytes + RECORD_BYTES
    if _over(limits.max_active_per_caller, usage.active + 1):
        return CALLER_ACTIVE
    if _over(limits.max_stored_bytes_per_caller, usage.stored_bytes + charge):
        return CALLER_BYTES
    if _over(limits.max_active, usage.total_active + 1):
        return TOTAL_ACTIVE
    if _over(limits.max_stored_bytes, usage.total_stored_bytes + charge):
        return TOTAL_BYTES
    return None


def result_refusal(limits: JobLimits, usage: Usage, old_bytes: int, result_bytes: int) -> str | None:
    """The byte limit a result would break by replacing a job's charge of `old_bytes`, or None if it fits."""
    delta = result_bytes + RECORD_BYTES - old_bytes
    if _over(limits.max_stored_bytes_per_caller, usage.stored_bytes + delta):
        return CALLER_BYTES
    if _over(limits.max_stored_bytes, usage.total_stored_bytes + delta):
        return TOTAL_BYTES
    return None


def growth_refusal(limits: JobLimits, usage: Usage, extra_bytes: int) -> str | None:
    """The byte limit a result written piece by piece would break by growing `extra_bytes`, or None."""
    if _over(limits.max_stored_bytes_per_caller, usage.stored_bytes + extra_bytes):
        return CALLER_BYTES
    if _over(limits.max_stored_bytes, usage.total_stored_bytes + extra_bytes):
        return TOTAL_BYTES
    return None


def _mib(value: int | None) -> str:
    return f"{(value or 0) / _MIB:g} MiB"


def quota_error(code: str, limits: JobLimits) -> QuotaExceeded:
    """The error for a refused new job: the caller's own limit (429) or the store's (503), saying what to do."""
    if code == CALLER_ACTIVE:
        message = (
            f"you have {limits.max_active_per_caller} jobs queued or running, the most allowed per caller "
            "(job_max_active_per_caller); submit more when some have finished"
        )
        return QuotaExceeded(message, "caller", ACTIVE_RETRY_S)
    if code == CALLER_BYTES:
        message = (
            f"your jobs keep {_mib(limits.max_stored_bytes_per_caller)} of payloads and results, the most allowed "
            "per caller (job_max_stored_mb_per_caller); fetch and delete finished results "
            "(DELETE /v1/jobs/{id}/result) or wait for them to expire"
        )
        return QuotaExceeded(message, "caller", BYTES_RETRY_S)
    if code == TOTAL_ACTIVE:
        message = f"the job queue is full: {limits.max_active} jobs queued or running (job_max_active); retry later"
        return QuotaExceeded(message, "total", ACTIVE_RETRY_S)
    message = (
        f"the job store is full: {_mib(limits.max_stored_bytes)} of payloads and results (job_max_stored_mb); "
        "retry later"
    )
    return QuotaExceeded(message, "total", BYTES_RETRY_S)


def result_refused_message(code: str, limits: JobLimits, result_bytes: int) -> str:
    """The error a job gets when its computed result did not fit the stored-bytes limits."""
    size = f"result of {result_bytes / _MIB:.1f} MiB not stored"
    if code == CALLER_BYTES:
        return (
            f"{size}: your jobs would keep more than {_mib(limits.max_stored_bytes_per_caller)} "
            "(job_max_stored_mb_per_caller); fetch and delete finished results, then submit it again"
        )
    return f"{size}: the job store is full ({_mib(limits.max_stored_bytes)}, job_max_stored_mb); submit it again later"


class Ledger:
    """Each job's charge (caller, active, bytes), summed per caller and in total, for the in-memory store."""

    def __init__(self) -> None:
        self._charges: dict[str, tuple[str, int, int]] = {}
        self._active: dict[str, int] = {}
        self._bytes: dict[str, int] = {}
        self.total_active = 0
        self.total_bytes = 0

    def __len__(self) -> int:
        """Jobs charged now."""
        return len(self._charges)

    def usage(self, owner: str) -> Usage:
        """What `owner` and everyone hold now."""
        return Usage(self._active.get(owner, 0), self._bytes.get(owner, 0), self.total_active, self.total_bytes)

    def charged_bytes(self, job_id: str) -> int:
        """The bytes a job is charged now (0 if it is not tracked)."""
        return self._charges.get(job_id, ("", 0, 0))[2]

    def owner(self, job_id: str) -> str | None:
        """The caller a job is charged to, if it is tracked."""
        charge = self._charges.get(job_id)
        return None if charge is None else charge[0]

    def charge(self, job_id: str, owner: str, active: int, nbytes: int) -> None:
        """Set a job's charge (a new job names its owner; later changes keep it)."""
        old_owner, old_active, old_bytes = self._charges.pop(job_id, (owner, 0, 0))
        self._add(self._active, old_owner, active - old_active)
        self._add(self._bytes, old_owner, nbytes - old_bytes)
        self.total_active += active - old_active
        self.total_bytes += nbytes - old_bytes
        if active or nbytes:
            self._charges[job_id] = (old_owner, active, nbytes)

    def recharge(self, job_id: str, active: int, nbytes: int) -> None:
        """Change a tracked job's charge; nothing for a job the ledger does not know."""
        owner = self.owner(job_id)
        if owner is not None:
            self.charge(job_id, owner, active, nbytes)

    def release(self, job_id: str) -> None:
        """Forget a job's charge (it was deleted or expired)."""
        self.recharge(job_id, 0, 0)

    @staticmethod
    def _add(counts: dict[str, int], owner: str, delta: int) -> None:
        value = counts.get(owner, 0) + delta
        if value > 0:
            counts[owner] = value
        else:
            counts.pop(owner, None)
