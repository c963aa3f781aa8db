"""The one error a video can fail with, carrying the HTTP status and reason a client gets."""

from __future__ import annotations


class VideoError(Exception):
    """A video refused or failed: 400 corrupt or truncated, 413 too long or too large, 415 unsupported codec."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message


def corrupt(message: str) -> VideoError:
    """A video whose data cannot be decoded (400)."""
    return VideoError(400, "corrupt_video", message)


def truncated(message: str) -> VideoError:
    """A video that ends before its own header says it does (400)."""
    return VideoError(400, "truncated_video", message)


def too_large(reason: str, message: str) -> VideoError:
    """A video over one of the limits on frames, pixels or seconds (413)."""
    return VideoError(413, reason, message)
