#!/usr/bin/env bash
# The GPU worker's measurement on one H200 machine, in at most 8 minutes: bench/gpu.py at vitl14 size
# (random weights in the real layout), 640x480, level 9 (batch 1..32 at bf16, fp16 and fp32, the bare
# torch loop beside the worker's pipeline, MFU, precision against fp32, the worker process over gRPC at
# low load and with 32 clients, NVML in /metrics against nvidia-smi). Writes gpu.json and gpu.md to
# OUTDIR and exits non-zero, naming what failed, if anything did.
#
#   bash bench/device_check.sh [OUTDIR]              # on the GPU machine (default OUTDIR: $OUT or out/device_check)
#   bash bench/device_check.sh --cpu-smoke [OUTDIR]  # every step of this script on a CPU, tiny preset, ~1 minute
#
# Needs: python3 with a CUDA PyTorch (the image's; PYTHON=... to choose), nvidia-smi, and depthserve's
# other Python dependencies. Those the H200 image lacks travel as wheels in .whl/, made beforehand with
# `bash bench/fetch_wheels.sh` where PyPI is reachable (never committed); they are installed here into a
# folder of their own, with no network. The repository itself is used from src/ (PYTHONPATH), not installed.
set -euo pipefail
cd "$(dirname "$0")/.."

smoke=0
if [[ "${1:-}" == "--cpu-smoke" ]]; then
  smoke=1
  shift
fi
outdir=${1:-${OUT:-out/device_check}}
py=${PYTHON:-python3}
wheels=${WHEELS:-.whl}
mkdir -p "$outdir"
export PYTHONUNBUFFERED=1

if compgen -G "$wheels/*.whl" >/dev/null; then
  site=${DEPTHSERVE_SITE:-$(mktemp -d /tmp/depthserve-site.XXXXXX)}
  echo "installing $(ls "$wheels"/*.whl | wc -l) carried wheels into $site (no network)"
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$wheels"/*.whl
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD/src:$PWD/bench${PYTHONPATH:+:$PYTHONPATH}"

# Before any device time is spent: every module the run imports, and the GPU itself.
"$py" - "$smoke" <<'PY'
import importlib, shutil, sys
smoke = sys.argv[1] == "1"
needed = ["torch", "numpy", "PIL", "grpc", "grpc_health.v1.health", "google.protobuf", "tritonclient.grpc",
          "pydantic", "pydantic_settings", "typer", "rich", "prometheus_client", "uvloop", "yaml", "safetensors",
          "pynvml", "redis", "dns.resolver", "httpx", "depthserve.cli", "depthserve.worker.server", "gpu"]
missing = []
for name in needed:
    try:
        importlib.import_module(name)
    except Exception as exc:  # any import failure is a missing piece
        missing.append(f"{name} ({type(exc).__name__}: {exc})")
if missing:
    sys.exit("device_check: cannot import:\n  " + "\n  ".join(missing)
             + "\ncarry the wheels: run `bash bench/fetch_wheels.sh` where PyPI is reachable, then carry .whl/")
import torch
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
      f"GPU {torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none'}")
if not smoke and not torch.cuda.is_available():
    sys.exit("device_check: torch sees no CUDA device (use --cpu-smoke to check the script on a CPU)")
if not smoke and shutil.which("nvidia-smi") is None:
    sys.exit("device_check: nvidia-smi is not on PATH")
PY

if [[ $smoke == 1 ]]; then
  timeout 300 "$py" bench/gpu.py --smoke --out "$outdir"
else
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv
  timeout 470 "$py" bench/gpu.py --out "$outdir" --budget-s 400
fi
echo "device_check: results in $outdir/gpu.json and $outdir/gpu.md"
