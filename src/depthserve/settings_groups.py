"""Groups of settings several commands share (logging, async jobs, video), declared once and mixed into each."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field


class LogFields(BaseModel):
    """Logging settings the gateway and the workers share."""

    log_format: Literal["text", "json"] = Field("text", description="log lines as text or one JSON object each")
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="lowest level logged (debug adds one line per request, with its request id)"
    )


class JobFields(BaseModel):
    """Async-job settings the gateway and the workers share (broker, job store, attempts, lifetimes)."""

    broker: str | None = Field(
        None, description="async jobs: redis://HOST:PORT/DB (Redis Streams) or amqp://USER:PASS@HOST:PORT/ (RabbitMQ)"
    )
    job_store: str | None = Field(
        None, description="Redis URL for job state and results (default: the redis:// broker, else local Redis)"
    )
    job_namespace: str = Field("depthserve", description="prefix of the jobs' Redis keys and RabbitMQ queues")
    job_ttl_s: float = Field(86400.0, gt=0, description="how long job state and results are kept")
    job_max_attempts: int = Field(3, ge=1, description="attempts of a job before it fails and is dead-lettered")
    job_visibility_timeout_s: float = Field(
        30.0, gt=0, description="a job whose running attempt is silent this long goes to another worker (any broker)"
    )
    job_timeout_s: float = Field(60.0, gt=0, description="deadline of one attempt of a job")
    job_max_active_per_caller: int = Field(
        1024, ge=1, description="jobs one caller (API key, or client address) may have queued or running (429)"
    )
    job_max_active: int = Field(8192, ge=1, description="jobs queued or running, all callers together (503)")
    job_max_stored_mb_per_caller: float = Field(
        512.0, gt=0, description="payloads and results one caller's jobs may keep in the job store, MiB (429)"
    )
    job_max_stored_mb: float = Field(
        2048.0, gt=0, description="payloads and results kept in the job store, all callers, MiB (503)"
    )
    job_memory_mb: float = Field(
        32.0, ge=0, description="in-process broker: payloads and results up to 64 KiB held in memory, MiB in all"
    )
    job_spool_dir: Path | None = Field(
        None, description="in-process broker: folder for the other payloads and results (default: temp folder)"
    )


class VideoFields(BaseModel):
    """What one video may cost the gateway (POST /v1/depth/video and video jobs), and the share videos get."""

    video_max_active: int = Field(4, ge=1, description="videos the gateway works on at once (503 videos_full beyond)")
    video_window: int = Field(
        16, ge=1, le=256, description="frames of one video in flight at once (decoded, at a worker, or being written)"
    )
    video_share: float = Field(
        0.5,
        gt=0,
        le=1,
        description="most of a model's admission capacity all videos' frames may hold, so images always find room",
    )
    video_max_body_mb: float = Field(
        1024.0, gt=0, description="largest video upload, MiB (spooled to a temporary file, not held in memory)"
    )
    video_max_disk_mb: float = Field(
        8192.0,
        gt=0,
        description="video uploads on disk at once, requests and queued video jobs together, MiB (503 beyond)",
    )
    video_upload_timeout_s: float = Field(300.0, gt=0, description="longest a client may take to send a video (408)")
    video_max_frames: int = Field(10_000, ge=1, description="most frames decoded from one video, after stride (413)")
    video_max_seconds: float = Field(3600.0, gt=0, description="longest video accepted, seconds (413)")
    video_max_frame_pixels: int = Field(
        8_300_000, ge=1, description="largest video frame accepted, pixels (413; 3840x2160 fits)"
    )
    video_frame_timeout_s: float = Field(
        60.0, gt=0, description="deadline of one frame, retries and waits for admission included"
    )
    video_spool_dir: Path | None = Field(
        None, description="folder for video uploads while they are decoded or wait as jobs [temp]"
    )
