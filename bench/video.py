"""Video: frames per second with 1, 2 and 4 workers; image p99 while a video runs; the gateway's peak RSS.

Loopback, synthetic workers at 20 ms a frame (one worker serves 50 frames/s; `--synthetic-ms`). Runs:

- scaling: one 320x240 H.264 video (`--frames`, 300) as a zip of 16-bit PNGs, with 1, 2 and 4 workers; fps
  over the whole request (upload, probe, every frame, the last byte), and fps / (workers x fps with 1).
- images under a video: two workers; open-loop Poisson image requests (64x48 PNG, `--rate` 30/s, 30% of
  the pool) for `--duration` s, first alone, then while a long video runs; p50/p99 of each and their ratio.
- memory: one 3,000-frame 640x480 video as a float16 .npz (1.8 GB streamed, read and dropped), the
  gateway's peak RSS (VmHWM, largest process of its tree) before and after.
- frame transport: the gateway's cost per 640x480 frame of sending raw UINT8 tensors (what it does) against
  encoding each frame (PNG, JPEG) first, and the bytes each puts on the wire.

    python bench/video.py [--frames 300] [--duration 10] [--rate 30] [--parts images] [--markdown out.md]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import time
from pathlib import Path
from tempfile import TemporaryDirectory

import httpx
from PIL import Image

from depthserve.protocol.depth_api import DepthInputs, build_request
from depthserve.testing.clips import make_clip
from depthserve.testing.load import open_loop
from depthserve.testing.memory import peak_rss_mb
from depthserve.testing.processes import Proc, start_gateway, start_worker
from depthserve.testing.samples import png_bytes, seeded_image

GATEWAY_FLAGS: list[str] = []  # --video-share, from the command line
WORKER_FLAGS: list[str] = []  # --low-priority-delay-ms, from the command line
PARTS = ("scaling", "images", "memory", "transport")


def cluster(logs: Path, workers: int, synthetic_ms: float) -> tuple[Proc, str, list[Proc]]:
    procs = [
        start_worker(logs, "--synthetic-ms", str(synthetic_ms), *WORKER_FLAGS, name=f"w{i}") for i in range(workers)
    ]
    gateway, url = start_gateway(logs, [address for _, address in procs], *GATEWAY_FLAGS)
    return gateway, url, [proc for proc, _ in procs]


def stop(gateway: Proc, workers: list[Proc]) -> None:
    gateway.stop()
    for worker in workers:
        worker.stop()


def run_video(url: str, clip: bytes, query: str = "") -> tuple[int, float, int]:
    """POST a video, read and drop its reply; (frames, seconds, bytes)."""
    started = time.perf_counter()
    size = 0
    with (
        httpx.Client(http1=False, http2=True, timeout=600) as client,
        client.stream(
            "POST", f"{url}/v1/depth/video{query}", content=clip, headers={"content-type": "video/mp4"}
        ) as reply,
    ):
        assert reply.status_code == 200, reply.read()
        for chunk in reply.iter_raw():
            size += len(chunk)
        frames = int(reply.headers["x-video-frames"])
    return frames, time.perf_counter() - started, size


def scaling(logs: Path, clip: bytes, synthetic_ms: float) -> list[str]:
    rows, base = [], None
    for workers in (1, 2, 4):
        gateway, url, procs = cluster(logs, workers, synthetic_ms)
        try:
            run_video(url, clip, "?max_frames=20")  # warm: load reports give the pool's capacity
            frames, seconds, _ = run_video(url, clip)
        finally:
            stop(gateway, procs)
        fps = frames / seconds
        base = base or fps
        rows.append(f"| {workers} | {frames} | {seconds:.2f} | {fps:.1f} | {fps / (workers * base):.2f}x |")
        print(rows[-1], flush=True)
    return rows


async def images_while(url: str, rate: float, duration: float, video: bytes | None) -> tuple[float, float, int, int]:
    body = png_bytes(seeded_image(48, 64))
    running = None
    if video is not None:
        running = asyncio.create_task(asyncio.to_thread(run_video, url, video))
        await asyncio.sleep(1.0)  # the video's frames are flowing
    stats = await open_loop(f"{url}/v1/depth", body, rate, duration)
    if running is not None:
        assert not running.done(), "the video ended before the image load did: raise --frames"
        running.cancel()
    return stats.percentile(50), stats.percentile(99), stats.ok, stats.failed


def image_latency(logs: Path, rate: float, duration: float, synthetic_ms: float, frames: int) -> list[str]:
    gateway, url, procs = cluster(logs, 2, synthetic_ms)
    with TemporaryDirectory() as folder:
        long = make_clip(Path(folder) / "long.mp4", frames, 320, 240, fps=30).read_bytes()
    try:
        asyncio.run(images_while(url, rate, 2.0, None))  # warm
        alone = asyncio.run(images_while(url, rate, duration, None))
        during = asyncio.run(images_while(url, rate, duration, long))
    finally:
        stop(gateway, procs)
    rows = [
        f"| images alone | {alone[0]:.1f} | {alone[1]:.1f} | {alone[2]} | {alone[3]} |",
        f"| images + one video | {during[0]:.1f} | {during[1]:.1f} | {during[2]} | {during[3]} |",
        f"| ratio (p99 with / without) | | {during[1] / alone[1]:.2f}x | | |",
    ]
    print(*rows, sep="\n", flush=True)
    return rows


def memory(logs: Path) -> list[str]:
    gateway, url, procs = cluster(logs, 2, 0.0)
    with TemporaryDirectory() as folder:
        clip = make_clip(Path(folder) / "vga.mp4", 3000, 640, 480, fps=30).read_bytes()
    try:
        run_video(url, clip, "?format=npz&max_frames=30")
        before = peak_rss_mb(gateway.pid)
        frames, seconds, size = run_video(url, clip, "?format=npz")
        after = peak_rss_mb(gateway.pid)
    finally:
        stop(gateway, procs)
    row = f"| {frames} x 640x480, npz float16 | {size / 2**30:.2f} GiB | {seconds:.1f} s | {before:.0f} MiB "
    row += f"| {after:.0f} MiB |"
    print(row, flush=True)
    return [row]


def transport() -> list[str]:
    frame = seeded_image(480, 640)  # photo-like structure: a synthetic gradient would compress unrealistically
    rows = []

    def timed(make: object, repeat: int = 30) -> tuple[float, int]:
        assert callable(make)
        started = time.perf_counter()
        for _ in range(repeat):
            size = len(build_request("m", DepthInputs(image=make(), output_format="png16")).SerializeToString())
        return (time.perf_counter() - started) / repeat * 1000, size

    def encoded(kind: str, **options: object) -> bytes:
        out = io.BytesIO()
        Image.fromarray(frame).save(out, format=kind, **options)
        return out.getvalue()

    for name, make in (
        ("raw UINT8 tensor (used)", lambda: frame),
        ("PNG (compress_level 1)", lambda: encoded("PNG", compress_level=1)),
        ("PNG (default level)", lambda: encoded("PNG")),
        ("JPEG q95 (lossy)", lambda: encoded("JPEG", quality=95)),
    ):
        ms, size = timed(make)
        rows.append(f"| {name} | {ms:.2f} | {size / 1024:.0f} KiB |")
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=300)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=30.0)
    parser.add_argument("--synthetic-ms", type=float, default=20.0)
    parser.add_argument("--video-share", type=float, help="the gateway's --video-share [its default]")
    parser.add_argument(
        "--low-priority-delay-ms", type=float, help="the workers' --low-priority-delay-ms (0: FIFO) [their default]"
    )
    parser.add_argument("--skip-memory", action="store_true", help="leave out the 3,000-frame run")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"which runs, comma-separated [{','.join(PARTS)}]")
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    if args.video_share is not None:
        GATEWAY_FLAGS.extend(["--video-share", str(args.video_share)])
    if args.low_priority_delay_ms is not None:
        WORKER_FLAGS.extend(["--low-priority-delay-ms", str(args.low_priority_delay_ms)])
    parts = set(args.parts.split(","))
    if args.skip_memory:
        parts.discard("memory")
    out = [f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", ""]
    with TemporaryDirectory() as folder:
        logs = Path(folder)
        clip = make_clip(logs / "qvga.mp4", args.frames, 320, 240, fps=30).read_bytes()
        if "scaling" in parts:
            out += ["| workers | frames | seconds | fps | of linear |", "|---|---|---|---|---|"]
            out += scaling(logs, clip, args.synthetic_ms)
        if "images" in parts:
            out += ["", "| run | p50 ms | p99 ms | ok | failed |", "|---|---|---|---|---|"]
            out += image_latency(logs, args.rate, args.duration, args.synthetic_ms, args.frames * 10)
        if "memory" in parts:
            out += ["", "| video | streamed | took | gateway peak RSS before | after |", "|---|---|---|---|---|"]
            out += memory(logs)
        if "transport" in parts:
            out += ["", "| frame as | gateway ms per frame | request size |", "|---|---|---|"]
            out += transport()
    out.append(f"\nload average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    text = "\n".join(out)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")


if __name__ == "__main__":
    main()
