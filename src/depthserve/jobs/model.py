"""The job record: its states, timestamps and attempts, and the JSON clients see."""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class JobState(StrEnum):
    """Where a job is in its life; the last three are final."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


FINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})
_JOB_ID = re.compile(r"[0-9a-f]{32}")


def new_job_id() -> str:
    """A job id that is unguessable and safe in URLs, Redis keys and AMQP message ids."""
    return uuid.uuid4().hex


def valid_job_id(text: str) -> bool:
    """Whether `text` could be an id `new_job_id` made, so a path with anything else is a 404 without a lookup."""
    return _JOB_ID.fullmatch(text) is not None


@dataclass
class Job:
    """One asynchronous depth request, as the job store keeps it (the result bytes live beside it)."""

    id: str
    model: str
    state: JobState = JobState.QUEUED
    attempts: int = 0
    created_at: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None
    error: str | None = None
    content_type: str | None = None
    stores: int = 0  # results stored: 1 once succeeded, never more (the exactly-once check)
    duplicates: int = 0  # later deliveries that computed a result again and found one already stored
    owner: str = ""  # the caller that submitted it (API key name, else "addr:HOST"): charged for it, scopes its key
    gave_up: bool = False  # failed only because its attempts ran out: a late result may still be stored
    heartbeat_at: float | None = None  # last sign of life of the running attempt (internal, not in the API)
    kind: str = "depth"  # "video": run by the gateway that holds the upload, its result written piece by piece
    progress: dict[str, Any] | None = None  # video: {frames_done, frames_total, fps, eta_s}, as it runs

    @property
    def final(self) -> bool:
        """Whether the job will not change any more."""
        return self.state in FINAL_STATES

    def public(self, status_url: str) -> dict[str, Any]:
        """The JSON GET /v1/jobs/{id} answers."""
        body: dict[str, Any] = {
            "id": self.id,
            "status_url": status_url,
            "state": self.state.value,
            "model": self.model,
            "attempts": self.attempts,
            "created_at": self.created_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "error": self.error,
            "kind": self.kind,
        }
        if self.progress is not None:
            body["progress"] = self.progress
        if self.state == JobState.SUCCEEDED:
            body["result_url"] = f"{status_url}/result"
            body["content_type"] = self.content_type
        return body

    def to_fields(self) -> dict[str, str]:
        """Flatten to string fields for a Redis hash (absent values are left out)."""
        fields = {
            "id": self.id,
            "model": self.model,
            "state": self.state.value,
            "attempts": str(self.attempts),
            "created_at": repr(self.created_at),
            "stores": str(self.stores),
            "duplicates": str(self.duplicates),
            "owner": self.owner,
        }
        if self.gave_up:
            fields["gave_up"] = "1"
        if self.kind != "depth":
            fields["kind"] = self.kind
        if self.progress is not None:
            fields["progress"] = json.dumps(self.progress)
        for name in ("started_at", "finished_at", "heartbeat_at"):
            value = getattr(self, name)
            if value is not None:
                fields[name] = repr(value)
        for name in ("error", "content_type"):
            value = getattr(self, name)
            if value is not None:
                fields[name] = value
        return fields

    @classmethod
    def from_fields(cls, fields: dict[str, str]) -> Job:
        """Rebuild a job from its Redis hash fields."""

        def number(name: str) -> float | None:
            value = fields.get(name)
            return None if value in (None, "") else float(value)

        return cls(
            id=fields["id"],
            model=fields.get("model", ""),
            state=JobState(fields.get("state", "queued")),
            attempts=int(fields.get("attempts", "0")),
            created_at=number("created_at") or 0.0,
            started_at=number("started_at"),
            finished_at=number("finished_at"),
            error=fields.get("error") or None,
            content_type=fields.get("content_type") or None,
            stores=int(fields.get("stores", "0")),
            duplicates=int(fields.get("duplicates", "0")),
            owner=fields.get("owner", ""),
            gave_up=fields.get("gave_up") == "1",
            heartbeat_at=number("heartbeat_at"),
            kind=fields.get("kind") or "depth",
            progress=json.loads(fields["progress"]) if fields.get("progress") else None,
        )
