"""Benchmark the model package: tiny-preset CPU latency and vitl14 FLOPs (counted and analytic).

Run: python bench/model.py [--runs N]. Prints markdown tables; takes about a minute on 2 vCPUs.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import torch
from torch.utils.flop_counter import FlopCounterMode

from depthserve.model import PRESETS, build_model, load_model
from depthserve.model.flops import model_flops
from depthserve.model.grid import grid_for


def _sample(batch: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(batch * 1000 + size)
    image = torch.rand(batch, 3, size, size, generator=g)
    depth = torch.rand(batch, size, size, generator=g) * 4 + 0.3
    depth[torch.rand(batch, size, size, generator=g) < 0.3] = 0.0  # scattered sensor holes
    depth[:, : size // 3] = 0.0  # a missing band, so some depth tokens are dropped
    return image, depth


def latency_table(runs: int, warmup: int) -> list[str]:
    """Median wall time of `infer` on the tiny preset (level 9) per batch and image size."""
    model = load_model("tiny")
    lines = [
        "| input | batch | grid | median ms | best ms | median ms / image | images / s (median) |",
        "|---|---|---|---|---|---|---|",
    ]
    for size in (224, 448):
        for batch in (1, 4, 8):
            image, depth = _sample(batch, size)
            for _ in range(warmup):
                model.infer(image, depth)
            times = []
            for _ in range(runs):
                start = time.perf_counter()
                model.infer(image, depth)
                times.append(time.perf_counter() - start)
            median, best = statistics.median(times) * 1e3, min(times) * 1e3
            rows, cols = grid_for(size, size, 9, None, PRESETS["tiny"]["num_tokens_range"])
            lines.append(
                f"| {size}x{size} | {batch} | {rows}x{cols} | {median:.1f} | {best:.1f} | {median / batch:.1f} "
                f"| {1e3 * batch / median:.1f} |"
            )
    return lines


def counted_flops(model: torch.nn.Module, height: int, width: int, level: int, with_depth: bool) -> int:
    """Count FLOPs of one meta-device forward pass with torch's FlopCounterMode."""
    image = torch.empty(1, 3, height, width, device="meta")
    depth = torch.empty(1, height, width, device="meta") if with_depth else None
    num_tokens = int(1200 + level / 9 * 2400)
    with FlopCounterMode(display=False) as counter, torch.inference_mode():
        # Full valid depth keeps every depth token; on meta tensors dropping cannot look at
        # values, so the all-kept case disables it and the zero-depth case passes no depth.
        model(image, num_tokens, depth, enable_depth_mask=False)
    return int(counter.get_total_flops())


def flops_table() -> list[str]:
    """vitl14 FLOPs at 640x480: FlopCounterMode on the meta device vs the analytic formula."""
    model = build_model("vitl14", device="meta")
    lines = [
        "| vitl14, 640x480 | grid | tokens | counted TFLOPs | analytic TFLOPs | ratio | ViT / neck / heads T |",
        "|---|---|---|---|---|---|---|",
    ]
    for level in (9, 0):
        rows, cols = grid_for(480, 640, level)
        for with_depth in (True, False):
            counted = counted_flops(model, 480, 640, level, with_depth)
            parts = model_flops(PRESETS["vitl14"], 480, 640, level, depth_tokens=None if with_depth else 0)
            tokens = 1 + rows * cols * (2 if with_depth else 1)
            label = f"level {level}, " + ("full depth" if with_depth else "zero depth (monocular)")
            split = " / ".join(f"{parts[k] / 1e12:.2f}" for k in ("vit", "neck", "heads"))
            lines.append(
                f"| {label} | {rows}x{cols} | {tokens} | {counted / 1e12:.3f} | {parts['total'] / 1e12:.3f} "
                f"| {counted / parts['total']:.4f} | {split} |"
            )
    return lines


def main() -> None:
    """Print the machine line and both tables."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()
    print(
        f"# model bench: torch {torch.__version__}, {os.cpu_count()} CPUs, "
        f"{torch.get_num_threads()} torch threads, {platform.processor() or platform.machine()}, "
        f"CUDA {'yes' if torch.cuda.is_available() else 'no'}\n"
    )
    start = time.perf_counter()
    print("## tiny preset, CPU fp32, infer() at resolution level 9 (30% holes + missing band)\n")
    print("\n".join(latency_table(args.runs, args.warmup)))
    print("\n## FLOPs (2 per multiply-accumulate)\n")
    print("\n".join(flops_table()))
    print(f"\n(bench took {time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
