#!/usr/bin/env bash
# Download the wheels bench/device_check.sh needs on the H200 image, which has PyTorch, numpy, Pillow,
# grpcio, protobuf, uvloop, prometheus-client, nvidia-ml-py, httpx, PyYAML and safetensors but not the
# rest of depthserve's own dependencies (pydantic, pydantic-settings, tritonclient, grpcio-health-checking,
# redis, dnspython, ...). Each is fetched at the version this checkout's .venv runs (what CI tests), for
# CPython 3.12 on x86-64; gRPC and protobuf too, so generated stubs and runtime agree whatever the image has.
# Run it where pip can reach PyPI; the wheels land in .whl/ (ignored by git, never committed), and a
# device run carries that folder (the `run` tool's carry: [".whl"]).
#
#   bash bench/fetch_wheels.sh [DEST]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
DEST=${1:-.whl}
PACKAGES=(pydantic pydantic-core pydantic-settings annotated-types typing-inspection typing-extensions python-dotenv
  typer rich tritonclient python-rapidjson grpcio grpcio-health-checking protobuf redis dnspython aetcd)
pins=$("$PY" -c 'import sys, importlib.metadata as m; print(" ".join(f"{n}=={m.version(n)}" for n in sys.argv[1:]))' \
  "${PACKAGES[@]}")
mkdir -p "$DEST"
rm -f "$DEST"/*.whl  # one version of each: two would stop the install on the device
platforms=()
for tag in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$tag")
done
# shellcheck disable=SC2086  # the pins are words
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${platforms[@]}" \
  -d "$DEST" $pins
ls "$DEST"
du -sh "$DEST"
