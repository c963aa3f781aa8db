"""Render the shipped sample: a small room seen by an RGB-D camera, as examples/sample.png and its raw depth.

Run `.venv/bin/python examples/make_sample.py` to write them again; the seed makes the files the same
every time. The camera has intrinsics fx = fy = 230, cx = 160, cy = 120 (pixels) at 320x240, and the
raw depth (16-bit PNG, millimetres, 0 = no reading) has the noise and holes of a real sensor.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

WIDTH, HEIGHT = 320, 240
FX = FY = 230.0
CX, CY = 160.0, 120.0
SEED = 15
CAMERA_HEIGHT_M = 1.2  # above the floor
LIGHT = np.array([0.8, -1.6, 1.2])  # a ceiling lamp, camera coordinates (x right, y down, z forward), metres


def _rays() -> np.ndarray:
    v, u = np.mgrid[0:HEIGHT, 0:WIDTH].astype(np.float64)
    return np.stack([(u - CX) / FX, (v - CY) / FY, np.ones_like(u)], axis=-1)  # z = 1: t is the depth


def _plane(rays: np.ndarray, normal: np.ndarray, offset: float) -> np.ndarray:
    """Depth along each ray to the plane normal . p = offset (inf where behind or parallel)."""
    facing = rays @ normal
    with np.errstate(divide="ignore", invalid="ignore"):
        depth = offset / facing
    return np.where((facing != 0) & (depth > 0), depth, np.inf)


def _box(rays: np.ndarray, low: np.ndarray, high: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Depth to an axis-aligned box (slab method) and the hit face's normal."""
    with np.errstate(divide="ignore", invalid="ignore"):
        t1, t2 = low / rays, high / rays
    near, far = np.minimum(t1, t2), np.maximum(t1, t2)
    enter, leave = near.max(axis=-1), far.min(axis=-1)
    hit = (enter <= leave) & (enter > 0)
    axis = near.argmax(axis=-1)
    normal = np.zeros_like(rays)
    np.put_along_axis(normal, axis[..., None], -np.sign(np.take_along_axis(rays, axis[..., None], -1)), -1)
    return np.where(hit, enter, np.inf), normal


def _sphere(rays: np.ndarray, centre: np.ndarray, radius: float) -> np.ndarray:
    a = (rays * rays).sum(-1)
    b = -2 * rays @ centre
    c = centre @ centre - radius**2
    disc = b * b - 4 * a * c
    with np.errstate(invalid="ignore"):
        depth = (-b - np.sqrt(disc)) / (2 * a)
    return np.where(disc > 0, depth, np.inf)


def _smooth_noise(rng: np.random.Generator, cells: int) -> np.ndarray:
    """Low-frequency noise in [0, 1], for stains and grain that compress well."""
    coarse = Image.fromarray((rng.random((cells * 3 // 4, cells)) * 255).astype(np.uint8))
    return np.asarray(coarse.resize((WIDTH, HEIGHT), Image.BICUBIC), dtype=np.float64) / 255


def render(seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """The RGB image (uint8 HxWx3) and the raw sensor depth (uint16 HxW, mm, 0 = hole)."""
    rng = np.random.default_rng(seed)
    rays = _rays()
    surfaces = {  # name: (depth, normal, albedo RGB)
        "floor": (_plane(rays, np.array([0, 1.0, 0]), CAMERA_HEIGHT_M), [0, -1.0, 0], [0.55, 0.38, 0.24]),
        "wall": (_plane(rays, np.array([0, 0, 1.0]), 4.2), [0, 0, -1.0], [0.78, 0.76, 0.70]),
        "side": (_plane(rays, np.array([-1.0, 0, 0]), 1.9), [-1.0, 0, 0], [0.62, 0.70, 0.74]),
    }
    box_depth, box_normal = _box(rays, np.array([-1.1, 0.45, 2.3]), np.array([-0.2, CAMERA_HEIGHT_M, 3.1]))
    sphere_centre = np.array([0.55, CAMERA_HEIGHT_M - 0.35, 2.2])
    sphere_depth = _sphere(rays, sphere_centre, 0.35)
    depths = np.stack([s[0] for s in surfaces.values()] + [box_depth, sphere_depth])
    nearest = depths.argmin(axis=0)
    depth = depths.min(axis=0)
    points = rays * depth[..., None]

    normals = np.zeros_like(rays)
    albedo = np.zeros_like(rays)
    for index, (_, normal, colour) in enumerate(surfaces.values()):
        normals[nearest == index] = normal
        albedo[nearest == index] = colour
    normals[nearest == 3] = box_normal[nearest == 3]
    albedo[nearest == 3] = [0.30, 0.42, 0.58]
    on_sphere = nearest == 4
    normals[on_sphere] = (points[on_sphere] - sphere_centre) / 0.35
    albedo[on_sphere] = [0.80, 0.30, 0.22]

    planks = (np.floor(points[..., 0] * 5 + 0.5 * np.floor(points[..., 2] * 1.5)) % 2) * 0.15  # floor boards
    albedo[nearest == 0] *= (0.92 + planks)[nearest == 0, None]
    albedo *= (0.93 + 0.1 * _smooth_noise(rng, 48))[..., None]

    to_light = LIGHT - points
    distance = np.linalg.norm(to_light, axis=-1, keepdims=True)
    lambert = np.clip((normals * to_light / distance).sum(-1), 0, 1)
    shade = 0.28 + 0.9 * lambert / (0.35 + 0.12 * distance[..., 0] ** 2)
    image = np.clip(albedo * shade[..., None], 0, 1)
    image = (image * 255 + rng.normal(0, 1.0, image.shape)).clip(0, 255).astype(np.uint8)
    return image, _sensor(depth, nearest, rng)


def _sensor(depth: np.ndarray, nearest: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """What a depth camera reads: noise growing with distance, nothing past 5 m, holes at edges and stains."""
    noisy = depth + rng.normal(0, 1, depth.shape) * 0.001 * depth**2
    edges = np.zeros_like(depth, dtype=bool)
    edges[1:, :] |= nearest[1:, :] != nearest[:-1, :]
    edges[:, 1:] |= nearest[:, 1:] != nearest[:, :-1]
    edges = np.asarray(Image.fromarray(edges).resize((WIDTH // 2, HEIGHT // 2)).resize((WIDTH, HEIGHT))) > 0
    dropout = _smooth_noise(rng, 20) > 0.85  # specular or dark patches the sensor misses
    holes = edges | dropout | (depth > 5.0) | ~np.isfinite(depth)
    return np.where(holes, 0, np.round(noisy * 1000)).astype(np.uint16)


def main() -> None:
    """Write sample.png and sample_depth.png next to this script."""
    image, raw_depth = render()
    folder = Path(__file__).parent
    Image.fromarray(image).save(folder / "sample.png", optimize=True)
    Image.fromarray(raw_depth).save(folder / "sample_depth.png", optimize=True)


if __name__ == "__main__":
    main()
