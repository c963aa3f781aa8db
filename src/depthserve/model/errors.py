"""Typed errors of the model package; torch-free so the gateway can import them cheaply."""

from __future__ import annotations


class ModelError(Exception):
    """Base class, so callers can catch every model-package failure at one boundary."""


class CheckpointError(ModelError):
    """A checkpoint could not be read or does not match the network it claims to describe."""

    def __init__(
        self,
        message: str,
        *,
        missing: list[str] | None = None,
        unexpected: list[str] | None = None,
        mismatched: list[str] | None = None,
    ) -> None:
        super().__init__(message)
        self.missing = missing or []
        self.unexpected = unexpected or []
        self.mismatched = mismatched or []


class ModelInputError(ModelError, ValueError):
    """A request's arrays cannot be fed to the network (bad shape, dtype, size or value)."""
