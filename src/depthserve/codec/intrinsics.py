"""Parse camera intrinsics from the many shapes clients send into one validated 3x3 matrix."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from depthserve.codec.errors import InvalidIntrinsics

_SEPARATORS = re.compile(r"[,;\s]+")
_HOW = 'send [[fx,0,cx],[0,fy,cy],[0,0,1]], 9 numbers, 4 numbers fx,fy,cx,cy, or {"fx":..,"fy":..,"cx":..,"cy":..}'
_KEYS = ("fx", "fy", "cx", "cy")
MAX_TEXT = 4096  # the longest intrinsics text read: nine numbers in any notation fit many times over


# cx and cy at most this (in absolute value) mean intrinsics in units of width/height, not pixels.
NORMALIZED_PRINCIPAL_POINT_BOUND = 2.0


def to_pixel_intrinsics(intrinsics: np.ndarray, height: int, width: int) -> np.ndarray:
    """Give pixel-unit intrinsics, scaling normalised ones by the image size (the model's own rule)."""
    k = np.asarray(intrinsics, dtype=np.float64)
    if np.abs(k[:2, 2]).max() <= NORMALIZED_PRINCIPAL_POINT_BOUND:
        k = k * np.array([[width], [height], [1.0]])
    return k


def _from_text(text: str) -> Any:
    """Read JSON when the text looks like JSON, else a comma/whitespace-separated list of numbers."""
    text = text.strip()
    if not text:
        raise InvalidIntrinsics(f"intrinsics are empty; {_HOW}")
    if len(text) > MAX_TEXT:
        raise InvalidIntrinsics(f"intrinsics text is {len(text)} characters, more than {MAX_TEXT}; {_HOW}")
    if text[0] in "[{":
        try:
            return json.loads(text)
        except RecursionError:  # e.g. "[" * 2000: deeper than the parser's stack
            raise InvalidIntrinsics(f"intrinsics JSON is nested too deeply; {_HOW}") from None
        except ValueError as exc:
            raise InvalidIntrinsics(f"intrinsics are not valid JSON ({str(exc)[:200]}); {_HOW}") from None
    return [part for part in _SEPARATORS.split(text) if part]


def _from_mapping(value: Mapping[Any, Any]) -> list[Any]:
    """Read the {"fx","fy","cx","cy"} form used by many camera SDKs."""
    missing = [k for k in _KEYS if k not in value]
    if missing:
        raise InvalidIntrinsics(f"intrinsics object lacks {', '.join(missing)}; {_HOW}")
    return [value[k] for k in _KEYS]


def _to_matrix(flat: np.ndarray) -> np.ndarray:
    """Build K from 4 (fx, fy, cx, cy) or 9 (row-major) numbers."""
    if flat.size == 4:
        fx, fy, cx, cy = flat
        return np.array([[fx, 0.0, cx], [0.0, fy, cy], [0.0, 0.0, 1.0]])
    if flat.size == 9:
        return flat.reshape(3, 3)
    raise InvalidIntrinsics(f"intrinsics have {flat.size} numbers, expected 4 or 9; {_HOW}")


def check_intrinsics(k: np.ndarray) -> None:
    """Reject a 3x3 K that cannot be a pinhole camera, so back-projection never divides by zero."""
    if not np.isfinite(k).all():
        raise InvalidIntrinsics("intrinsics contain NaN or infinity")
    if k[0, 0] <= 0 or k[1, 1] <= 0:
        raise InvalidIntrinsics(f"focal lengths must be positive, got fx={k[0, 0]:g}, fy={k[1, 1]:g}")
    if k[1, 0] != 0 or k[2, 0] != 0 or k[2, 1] != 0 or k[2, 2] != 1:
        raise InvalidIntrinsics(f"intrinsics must be upper triangular with last row [0, 0, 1]; {_HOW}")


def parse_intrinsics(value: str | bytes | Sequence[Any] | Mapping[str, Any] | np.ndarray) -> np.ndarray:
    """Turn any accepted intrinsics form into a float32 3x3 K, in the units given (pixels or normalised).

    No unit conversion happens here: a K in pixels stays in pixels, a normalised K stays normalised.
    """
    raw: Any = value
    if isinstance(raw, (bytes, bytearray, memoryview)):
        try:
            raw = bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidIntrinsics(f"intrinsics are not UTF-8 text; {_HOW}") from None
    if isinstance(raw, str):
        raw = _from_text(raw)
    if isinstance(raw, Mapping):
        raw = _from_mapping(raw)
    try:
        flat = np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidIntrinsics(f"intrinsics must be numbers; {_HOW}") from None
    if flat.ndim == 2 and flat.shape != (3, 3):
        raise InvalidIntrinsics(f"intrinsics matrix has shape {flat.shape}, expected 3x3; {_HOW}")
    if flat.ndim > 2:
        raise InvalidIntrinsics(f"intrinsics have shape {flat.shape}, expected 3x3 or a flat list; {_HOW}")
    k = _to_matrix(flat.reshape(-1))
    check_intrinsics(k)
    return k.astype(np.float32)
