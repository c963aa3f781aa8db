"""bench/device_check.sh runs every step on a CPU in its smoke mode, so the H200 script cannot rot unseen."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_cpu_smoke_runs_every_step_and_reports_its_figures(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable, "WHEELS": str(tmp_path / "no-wheels")}  # this venv has them all
    done = subprocess.run(
        ["bash", str(ROOT / "bench" / "device_check.sh"), "--cpu-smoke", str(out)],
        capture_output=True,
        text=True,
        timeout=360,
        env=env,
        cwd=tmp_path,  # the script finds the checkout from its own path
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    result = json.loads((out / "gpu.json").read_text())
    assert result["errors"] == [] and result["skipped"] == [] and result["smoke"] is True
    assert result["workload"]["preset"] == "tiny" and result["workload"]["depth_tokens"] > 0
    assert result["precision"]["bf16"]["within"] and 0 < result["precision"]["bf16"]["p99"] < 0.02
    cells = {(c["path"], c["precision"], c["batch"]): c for c in result["sweep"]}
    assert set(cells) == {(path, p, b) for path in ("bare", "pipeline") for p in ("bf16", "fp32") for b in (1, 2)}
    assert all(c["images_per_s"] > 0 and c["error"] is None and c["mfu"] > 0 for c in cells.values())
    serve = result["serve"]
    assert serve["worker_exit"] == 0 and serve["precision"] == "bf16"
    assert serve["low_load"]["requests"] == 5 and serve["low_load"]["errors"] == 0
    saturation = serve["saturation"]
    assert saturation["requests"] > 0 and saturation["errors"] == 0 and 1.0 <= saturation["mean_batch"] <= 2.0
    assert serve["vs_bare_max"] > 0 and serve["warmup_s"] > 0
    assert result["nvml"] == {"skipped": "no GPU or no nvidia-smi"}
    assert set(result["criteria"]) == {
        "worker >= 0.9x bare loop",
        "MFU stated",
        "bf16 within the bound of fp32",
        "no OOM at batch 2",
    }
    text = (out / "gpu.md").read_text()
    for heading in ("## Precision against fp32", "## Bare torch loop", "## Full worker over gRPC", "## Criteria"):
        assert heading in text
