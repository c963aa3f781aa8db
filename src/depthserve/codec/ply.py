"""Write point clouds as binary PLY, the format MeshLab, Open3D and CloudCompare all read."""

from __future__ import annotations

import numpy as np

from depthserve.codec.errors import CodecError

_XYZ = [("x", "<f4"), ("y", "<f4"), ("z", "<f4")]
_RGB = [("red", "u1"), ("green", "u1"), ("blue", "u1")]


def _header(count: int, with_color: bool) -> bytes:
    """Spell the PLY header for `count` vertices, with colour properties when present."""
    lines = [
        "ply",
        "format binary_little_endian 1.0",
        "comment depthserve",
        f"element vertex {count}",
        "property float x",
        "property float y",
        "property float z",
    ]
    if with_color:
        lines += ["property uchar red", "property uchar green", "property uchar blue"]
    lines.append("end_header")
    return ("\n".join(lines) + "\n").encode("ascii")


def encode_ply(points: np.ndarray, colors: np.ndarray | None = None, mask: np.ndarray | None = None) -> bytes:
    """Serialise the finite (and unmasked) points of an HxWx3 map as vertices, in row-major pixel order."""
    pts = np.asarray(points, dtype=np.float32)
    if pts.ndim < 2 or pts.shape[-1] != 3:
        raise CodecError(f"points must be ...x3, got shape {pts.shape}")
    keep = np.isfinite(pts).all(axis=-1)
    if mask is not None:
        m = np.asarray(mask, dtype=bool)
        if m.shape != keep.shape:
            raise CodecError(f"mask shape {m.shape} differs from points shape {pts.shape[:-1]}")
        keep &= m
    vertices = np.empty(int(keep.sum()), dtype=_XYZ + (_RGB if colors is not None else []))
    chosen = pts[keep]
    vertices["x"], vertices["y"], vertices["z"] = chosen[:, 0], chosen[:, 1], chosen[:, 2]
    if colors is not None:
        col = np.asarray(colors)
        if col.shape != pts.shape or col.dtype != np.uint8:
            raise CodecError(f"colors must be uint8 with shape {pts.shape}, got {col.dtype} {col.shape}")
        picked = col[keep]
        vertices["red"], vertices["green"], vertices["blue"] = picked[:, 0], picked[:, 1], picked[:, 2]
    return _header(vertices.size, colors is not None) + vertices.tobytes()
