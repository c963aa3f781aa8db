"""LingBot-Depth on one GPU: the model alone, the worker's pipeline, and the full worker over gRPC, side by side.

At vitl14 size (random weights in the real layout; the published ones cannot be downloaded here), 640x480,
level 9, with raw depth: images per second for batch 1..32 at each precision, in a bare torch loop on
pre-made device tensors (the ceiling) and through the worker's pipeline; model FLOPs utilisation (achieved
FLOP/s over the card's dense bf16 peak); each precision's depth against fp32; the worker process over gRPC
at saturation (32 closed-loop clients on the same machine) and at low load; NVML figures in its /metrics
against nvidia-smi. Writes gpu.json and gpu.md to --out, and exits 1 if any step failed.

    python bench/gpu.py --out DIR             # the H200 run (bash bench/device_check.sh DIR runs this)
    python bench/gpu.py --smoke --out DIR     # tiny preset on the CPU: every step, in a minute
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch
from gpu_report import markdown
from gpu_sweep import Cell, attention_kernels, launch_is_sync_free, make_workload, measure

from depthserve.model import load_model, predict_batch, save_checkpoint
from depthserve.model.validation import PredictItem
from depthserve.worker.precision import DEFAULT_TOLERANCE, depth_error
from depthserve.worker.runners.torch_device import describe_device, gpu_uuid, resolve_device

T = TypeVar("T")
PEAK_BF16 = {"H200": 989.4e12, "H100": 989.4e12}  # dense bf16 tensor-core rate of the SXM parts, datasheet


class Run:
    """One bench run: its result dict, its deadline, and steps that record their own failures."""

    def __init__(self, budget_s: float) -> None:
        self.deadline = time.monotonic() + budget_s
        self.result: dict[str, Any] = {"started": datetime.datetime.now().isoformat(timespec="seconds"),
                                       "errors": [], "skipped": [], "criteria": {}}  # fmt: skip

    def step(self, name: str, work: Callable[[], T]) -> T | None:
        """Run one step; an exception is printed and recorded (and fails the run), never swallowed."""
        print(f"[{time.strftime('%H:%M:%S')}] {name}", flush=True)
        try:
            return work()
        except Exception as exc:  # noqa: BLE001 - every failure is recorded and fails the run
            traceback.print_exc()
            self.result["errors"].append(
                f"{name}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            )
            return None

    def left(self) -> float:
        """Seconds left of the budget."""
        return self.deadline - time.monotonic()


def machine(device: torch.device) -> dict[str, Any]:
    """What ran: the device, torch and CUDA, the driver, the CPUs and their load."""
    driver = "-"
    if shutil.which("nvidia-smi"):
        query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
        driver = subprocess.run(query, capture_output=True, text=True, timeout=30).stdout.strip().splitlines()[0]
    return {"device": describe_device(device), "torch": torch.__version__, "cuda": torch.version.cuda or "-",
            "driver": driver, "cpus": os.cpu_count(), "load": " ".join(f"{v:.2f}" for v in os.getloadavg()),
            "python": sys.version.split()[0]}  # fmt: skip


def matmul_tflops(device: torch.device) -> float:
    """Measured bf16 matmul rate on random data (8192^3 on a GPU), the practical ceiling beside the datasheet's."""
    n = 8192 if device.type == "cuda" else 1024
    a, b = (torch.randn(n, n, device=device, dtype=torch.bfloat16) for _ in range(2))
    (a @ b).sum().item()
    runs = 10 if device.type == "cuda" else 2
    started = time.perf_counter()
    for _ in range(runs):
        c = a @ b
    c.sum().item()
    return 2 * n**3 * runs / (time.perf_counter() - started) / 1e12


def precision_errors(model: Any, work: Any, precisions: list[str], tolerance: float) -> dict[str, Any]:
    """Each precision's depth on the bench input against fp32's, with its attention kernels and sync check."""
    item = PredictItem(work.image, work.depth)
    depths = {p: predict_batch(model, [item], work.level, apply_mask=False, precision=p)[0]["depth"]
              for p in ["fp32", *precisions]}  # fmt: skip
    rows = {}
    for name in precisions:
        p99, mean = depth_error(depths[name], depths["fp32"])
        sync_free, how = launch_is_sync_free(model, work, name)
        rows[name] = {"p99": p99, "mean": mean, "within": p99 <= tolerance, "sync_free": sync_free, "sync_note": how,
                      "attention": attention_kernels(model, work, name)}  # fmt: skip
    return rows


def serve(run: Run, args: argparse.Namespace, model: Any, work: Any, precision: str, gpu: str | None) -> None:
    """The worker process over gRPC: low-load latency, saturation, and its NVML figures against nvidia-smi."""
    import asyncio

    import gpu_serve

    folder = Path(tempfile.mkdtemp(prefix="depthserve-gpu-bench-"))
    if model.device.type == "cuda":
        torch.cuda.empty_cache()  # the sweep's cached blocks go back to the card, for the worker's own budget
    try:
        checkpoint = folder / "model.pt"
        save_checkpoint(model, checkpoint)  # random weights in the published file's layout, read by the real loader
        max_batch = max(args.batches)
        extra = ["--device", args.device, "--precision", precision, "--max-batch-size", str(max_batch),
                 "--queue-limit", str(4 * args.clients), "--warmup-levels", str(args.level)]  # fmt: skip
        if args.device == "cpu":
            extra += ["--threads", "1"]
        extra += [word for arg in args.worker_arg for word in arg.split()]
        proc, address, metrics_url = gpu_serve.start_worker(folder, ["--model", "vitl14", "--checkpoint",
                                                                     str(checkpoint)], extra)  # fmt: skip
        try:
            request = gpu_serve.request_for(work.image, work.depth, work.level)
            low = asyncio.run(gpu_serve.low_load(address, request, args.latency_requests))
            observe = None
            if gpu is not None and shutil.which("nvidia-smi"):
                observe = lambda: gpu_serve.compare_nvml(metrics_url, gpu)  # noqa: E731
            sat, nvml = asyncio.run(gpu_serve.saturate(address, request, args.clients, args.serve_seconds,
                                                       args.warm_seconds, observe, metrics_url))  # fmt: skip
            metrics = gpu_serve.scrape(metrics_url)
        finally:
            code = proc.stop()
        log = proc.output()
        depth = re.search(r"pipeline (\d+) batches in flight", log)  # the worker's own start-up line
        run.result["serve"] = {"precision": precision, "clients": args.clients, "max_batch": max_batch,
                               "low_load": low.summary(), "saturation": sat.summary(), "worker_exit": code,
                               "warmup_s": metrics.get("depthserve_worker_warmup_seconds"),
                               "pipeline_depth": int(depth.group(1)) if depth else 1,
                               "worker_log_tail": log.splitlines()[-12:]}  # fmt: skip
        run.result["nvml"] = nvml or {"skipped": "no GPU or no nvidia-smi"}
        if sat.errors or low.errors:
            raise RuntimeError(f"worker answered {len(sat.errors) + len(low.errors)} errors: {sat.errors[:1]}")
        if "Traceback" in log:
            raise RuntimeError("the worker logged a traceback:\n" + log[-2000:])
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def sweep(run: Run, args: argparse.Namespace, model: Any, work: Any, precision: str, peak: float) -> None:
    """Bare loop and pipeline for every batch at one precision, while the budget lasts."""
    for batch in args.batches:
        for path in ("bare", "pipeline"):
            if run.left() < args.reserve_s:
                run.result["skipped"].append(f"{precision} {path} batch {batch}")
                continue
            cell: Cell | None = run.step(
                f"{path} {precision} batch {batch}",
                functools.partial(measure, model, work, path, batch, precision, args.seconds),
            )
            if cell is None:
                continue
            cell.mfu = cell.images_per_s * work.flops / peak if peak else None
            run.result["sweep"].append(cell.row())
            print(
                f"    {cell.images_per_s:9.2f} img/s  {cell.ms_per_batch:9.1f} ms/batch  peak {cell.peak_gib:.1f} GiB"
                + (f"  ERROR {cell.error}" if cell.error else ""),
                flush=True,
            )
            if cell.error:
                run.result["errors"].append(f"{path} {precision} batch {batch}: {cell.error}")


def criteria(run: Run, args: argparse.Namespace, main: str) -> None:
    """The issue's checks, each with its figure."""
    result, crit = run.result, run.result["criteria"]
    bare = {(c["precision"], c["batch"]): c for c in result["sweep"] if c["path"] == "bare" and not c["error"]}
    serve_ = result.get("serve", {})
    sat = serve_.get("saturation", {})
    top = max(args.batches)
    if sat and (main, top) in bare:
        ceiling = bare[(main, top)]["images_per_s"]
        serve_["vs_bare_max"] = sat["images_per_s"] / ceiling
        nearest = min((b for p, b in bare if p == main), key=lambda b: abs(b - sat.get("mean_batch", top)))
        serve_["vs_bare_mean_batch"] = sat["images_per_s"] / bare[(main, nearest)]["images_per_s"]
        serve_["mfu"] = sat["images_per_s"] * result["workload"]["tflops_per_image"] * 1e12 / result["peak_flops"]
        serve_["bare_batch1_ms"] = bare.get((main, 1), {}).get("ms_per_batch")
        ratio = serve_["vs_bare_max"]
        crit["worker >= 0.9x bare loop"] = {
            "result": "PASS" if ratio >= 0.9 else "FAIL",
            "figure": f"{ratio:.3f} ({sat['images_per_s']:.1f} vs {ceiling:.1f} img/s, "
            f"{main}, bare batch {top}; mean worker batch {sat['mean_batch']:.1f})",
        }
        crit["MFU stated"] = {
            "result": "STATED",
            "figure": f"worker {serve_['mfu']:.1%}, bare batch {top} {bare[(main, top)]['mfu']:.1%} of the bf16 peak",
        }
    lower = result.get("precision", {}).get("bf16")
    if lower:
        crit["bf16 within the bound of fp32"] = {
            "result": "PASS" if lower["within"] else "FAIL",
            "figure": f"p99 {lower['p99']:.3%} (bound {args.tolerance:.1%})",
        }
    at_top = [c for c in result["sweep"] if c["batch"] == top]
    if at_top:
        failed = [c for c in at_top if c["error"]] + ([1] if sat.get("errors") else [])
        crit[f"no OOM at batch {top}"] = {
            "result": "FAIL" if failed else "PASS",
            "figure": f"{len(at_top)} cells, peak {max(c['peak_gib'] for c in at_top):.1f} GiB",
        }
    nvml = result.get("nvml", {})
    if "match" in nvml:
        off = [name for name, row in nvml["figures"].items() if not row["match"]]
        crit["NVML figures match nvidia-smi"] = {
            "result": "PASS" if nvml["match"] else "FAIL",
            "figure": "all six" if not off else f"off: {', '.join(off)}",
        }


def parse_args() -> argparse.Namespace:
    """Flags; --smoke swaps in the tiny preset on the CPU with small sizes and short runs."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--smoke", action="store_true", help="tiny preset on the CPU, every step in about a minute")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--preset", default="vitl14")
    parser.add_argument("--size", default="640x480", help="WIDTHxHEIGHT")
    parser.add_argument("--level", type=int, default=9)
    parser.add_argument("--batches", default="1,2,4,8,16,32")
    parser.add_argument("--precisions", default="bf16,fp16,fp32", help="the first is the worker's in the gRPC run")
    parser.add_argument("--seconds", type=float, default=1.5, help="per sweep cell, after one warm batch")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--serve-seconds", type=float, default=30.0)
    parser.add_argument("--warm-seconds", type=float, default=8.0)
    parser.add_argument("--latency-requests", type=int, default=30)
    parser.add_argument("--worker-arg", action="append", default=[],
                        help="more worker flags for the gRPC run, e.g. --worker-arg '--pipeline-depth 3'")  # fmt: skip
    parser.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE)
    parser.add_argument("--budget-s", type=float, default=420.0, help="stop starting sweep cells after this")
    parser.add_argument("--reserve-s", type=float, default=25.0, help="time kept back for writing the results")
    args = parser.parse_args()
    if args.smoke:
        args.device, args.preset, args.size, args.batches, args.precisions = "cpu", "tiny", "64x48", "1,2", "bf16,fp32"
        args.seconds, args.clients, args.serve_seconds, args.warm_seconds = 0.3, 4, 2.0, 1.0
        args.latency_requests, args.budget_s, args.reserve_s = 5, 240.0, 5.0
    args.batches = [int(b) for b in args.batches.split(",")]
    args.precisions = [p for p in args.precisions.split(",") if p]
    return args


def main() -> int:
    """Run every step, write gpu.json and gpu.md, print the markdown; 1 if any step failed."""
    args = parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    run = Run(args.budget_s)
    result = run.result
    result.update(sweep=[], tolerance=args.tolerance, smoke=args.smoke, args={k: str(v) for k, v in vars(args).items()})
    device = resolve_device(args.device)
    result["machine"] = machine(device)
    width, height = (int(v) for v in args.size.split("x"))
    model = run.step("load model", lambda: load_model(args.preset, device=device))
    if model is not None:
        work = make_workload(model, height, width, args.level)
        result["workload"] = {"preset": args.preset, **work.describe()}
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else ""
        result["matmul_tflops"] = run.step("bf16 matmul ceiling", lambda: matmul_tflops(device))
        peak = next((rate for key, rate in PEAK_BF16.items() if key in name), None)
        result["peak_source"] = "datasheet, dense" if peak else "measured bf16 matmul: no datasheet figure"
        peak = peak or (result["matmul_tflops"] or 0.0) * 1e12
        result["peak_flops"], result["peak_tflops"] = peak, peak / 1e12
        lower = [p for p in args.precisions if p != "fp32"]
        result["precision"] = run.step("precision against fp32",
                                       lambda: precision_errors(model, work, lower, args.tolerance)) or {}  # fmt: skip
        main_precision = args.precisions[0]
        sweep(run, args, model, work, main_precision, peak)
        gpu = None if device.type != "cuda" else gpu_uuid(device) or str(device.index or 0)
        run.step("worker over gRPC", lambda: serve(run, args, model, work, main_precision, gpu))
        for precision in args.precisions[1:]:
            sweep(run, args, model, work, precision, peak)
        criteria(run, args, main_precision)
    (args.out / "gpu.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    text = markdown(result)
    (args.out / "gpu.md").write_text(text)
    print(text, flush=True)
    if result["errors"]:
        print(f"FAILED: {len(result['errors'])} step(s) failed:", *result["errors"], sep="\n  ", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
