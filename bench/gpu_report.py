"""Render bench/gpu.py's JSON result as the markdown tables BENCHMARKS.md takes."""

from __future__ import annotations

import math
from typing import Any


def _num(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def _pct(value: Any) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{100 * value:.1f}%"


def markdown(result: dict[str, Any]) -> str:
    """All tables of one run, machine line first, criteria last."""
    machine, work = result.get("machine", {}), result.get("workload", {})
    lines = [
        f"# GPU worker bench, {result.get('started', '')}",
        "",
        f"Machine: {machine.get('device', '?')}; torch {machine.get('torch', '?')}, CUDA {machine.get('cuda', '-')}, "
        f"driver {machine.get('driver', '-')}; {machine.get('cpus', '?')} CPUs, "
        f"load average {machine.get('load', '?')}.",
        f"Workload: {work.get('preset', '?')} at {work.get('size', '?')}, level {work.get('level', '?')}, grid "
        f"{work.get('grid', '?')}, {work.get('depth_tokens', '?')} depth tokens kept (sequence "
        f"{work.get('sequence', '?')}), {_num(work.get('tflops_per_image'), 2)} TFLOPs per image. Card bf16 peak "
        f"{_num(result.get('peak_tflops'), 3)} TFLOP/s ({result.get('peak_source', '?')}); measured bf16 matmul "
        f"{_num(result.get('matmul_tflops'), 3)} TFLOP/s.",
        "",
    ]
    if result.get("smoke"):
        lines += ["**Smoke run** (tiny preset on the CPU): it exercises every step of the script; its figures and "
                  "criteria judge nothing.", ""]  # fmt: skip
    precision = result.get("precision", {})
    if precision:
        lines += [
            f"## Precision against fp32 (bound: p99 relative depth error <= {_pct(result.get('tolerance'))})",
            "",
            "| precision | p99 error | mean error | within bound | fused attention kernels | launch has no host sync |",
            "|---|---|---|---|---|---|",
        ]
        for name, row in precision.items():
            lines.append(
                f"| {name} | {_pct(row.get('p99'))} | {_pct(row.get('mean'))} | {row.get('within')} "
                f"| {row.get('attention', '-')} | {row.get('sync_free', '-')} |"
            )
        lines.append("")
    cells = result.get("sweep", [])
    if cells:
        lines += [
            "## Bare torch loop (ceiling) and the worker's pipeline, no gRPC",
            "",
            "| precision | batch | bare img/s | bare ms/batch | bare MFU | pipeline img/s | pipeline / bare "
            "| peak GiB |",
            "|---|---|---|---|---|---|---|---|",
        ]
        pairs: dict[tuple[str, int], dict[str, Any]] = {}
        for cell in cells:
            pairs.setdefault((cell["precision"], cell["batch"]), {})[cell["path"]] = cell
        for (name, batch), pair in pairs.items():
            bare, pipe = pair.get("bare", {}), pair.get("pipeline", {})
            ratio = pipe.get("images_per_s", 0) / bare["images_per_s"] if bare.get("images_per_s") else None
            errors = "; ".join(c["error"] for c in (bare, pipe) if c.get("error"))
            lines.append(
                f"| {name} | {batch} | {_num(bare.get('images_per_s'))} | {_num(bare.get('ms_per_batch'))} "
                f"| {_pct(bare.get('mfu'))} | {_num(pipe.get('images_per_s'))} | {_num(ratio, 3)} "
                f"| {_num(max(bare.get('peak_gib', 0), pipe.get('peak_gib', 0)), 1)}{' ' + errors if errors else ''} |"
            )
        lines.append("")
    serve = result.get("serve", {})
    if serve.get("saturation"):
        sat, low = serve["saturation"], serve.get("low_load", {})
        lines += [
            f"## Full worker over gRPC ({serve.get('precision')}, max batch {serve.get('max_batch')}, pipeline depth "
            f"{serve.get('pipeline_depth')}, warm-up {_num(serve.get('warmup_s'))} s)",
            "",
            "| load | img/s | p50 ms | p99 ms | mean batch | errors | vs bare at max batch | vs bare at mean batch "
            "| MFU | NVML util / busy |",
            "|---|---|---|---|---|---|---|---|---|---|",
            f"| {serve.get('clients')} clients | {_num(sat['images_per_s'])} | {_num(sat['p50_ms'])} "
            f"| {_num(sat['p99_ms'])} | {_num(sat['mean_batch'])} | {sat['errors']} "
            f"| {_num(serve.get('vs_bare_max'), 3)} "
            f"| {_num(serve.get('vs_bare_mean_batch'), 3)} | {_pct(serve.get('mfu'))} "
            f"| {_pct(sat.get('gpu_util_mean'))} / {_pct(sat.get('busy_mean'))} |",
            f"| 1 client | {_num(low.get('images_per_s'))} | {_num(low.get('p50_ms'))} | {_num(low.get('p99_ms'))} "
            f"| {_num(low.get('mean_batch'))} | {low.get('errors', '-')} | - | - | - | - |",
            "",
            f"Bare forward at batch 1: {_num(serve.get('bare_batch1_ms'))} ms.",
            "",
        ]
    nvml = result.get("nvml", {})
    if nvml.get("figures"):
        lines += ["## NVML in /metrics against nvidia-smi (median gap of 3 paired readings)", "",
                  "| figure | median gap | allowed | match |", "|---|---|---|---|"]  # fmt: skip
        for name, row in nvml["figures"].items():
            lines.append(f"| {name} | {_num(row['median_gap'], 3)} | {_num(row['allowed'], 3)} | {row['match']} |")
        lines.append("")
    elif nvml.get("skipped"):
        lines += [f"NVML check skipped: {nvml['skipped']}.", ""]
    lines += ["## Criteria", "", "| criterion | result | figure |", "|---|---|---|"]
    for name, row in result.get("criteria", {}).items():
        lines.append(f"| {name} | {row.get('result')} | {row.get('figure', '')} |")
    if result.get("skipped"):
        lines += ["", "Skipped for time: " + ", ".join(result["skipped"])]
    if result.get("errors"):
        lines += ["", "**Errors:**", *(f"- {error}" for error in result["errors"])]
    return "\n".join(lines) + "\n"
