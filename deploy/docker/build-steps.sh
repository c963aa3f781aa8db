#!/usr/bin/env bash
# Every step of the depthserve container builds, one per argument, so CI runs the same steps as the
# Dockerfiles do, on machines without a container runtime (tests/deploy/test_docker.py).
#
#   build-steps.sh venv            create the virtual environment at $VENV
#   build-steps.sh torch cpu|cuda  torch at the pyproject.toml pin: the CPU wheel, or PyPI's CUDA build
#   build-steps.sh wheel           build depthserve's wheel from $SRC into $DIST
#   build-steps.sh install         install that wheel and its dependencies into $VENV
#   build-steps.sh check           the installed command and both components import; torch loads
#   build-steps.sh user            the unprivileged user (uid 10001) and the /models folder it owns
#   build-steps.sh list            name the steps
#
# For tests only: DEPTHSERVE_BUILD_DEPS_FROM=SITE_PACKAGES makes `torch` borrow an existing
# environment's packages instead of downloading them, and `install` take the wheel alone.
set -euo pipefail
VENV=${VENV:-/opt/depthserve}
SRC=${SRC:-.}
DIST=${DIST:-/tmp/depthserve-dist}
PYTHON=${PYTHON:-python3}
BUILD_PYTHON=${BUILD_PYTHON:-$VENV/bin/python}  # builds the wheel (tests: one that has setuptools, offline)
DEPS_FROM=${DEPTHSERVE_BUILD_DEPS_FROM:-}
CPU_INDEX=https://download.pytorch.org/whl/cpu
STEPS="venv torch wheel install check user"

say() { echo "build-steps: $*" >&2; }
pip() {  # the venv's own pip; in test mode the build Python's, aimed at the venv (no ensurepip: faster)
  if [ -n "$DEPS_FROM" ]; then
    "$BUILD_PYTHON" -m pip --disable-pip-version-check --python "$VENV/bin/python" "$@"
  else
    "$VENV/bin/python" -m pip --disable-pip-version-check "$@"
  fi
}
torch_pin() { sed -n 's/^ *"torch==\([^"]*\)".*/\1/p' "$SRC/pyproject.toml" | head -n 1; }
site_packages() { "$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }

step=${1:-}
case "$step" in
  venv)
    say "virtual environment at $VENV"
    if [ -n "$DEPS_FROM" ]; then
      "$PYTHON" -m venv --without-pip "$VENV"
    else
      "$PYTHON" -m venv "$VENV"
      pip install --quiet --upgrade pip
    fi
    ;;
  torch)
    flavour=${2:?"torch needs cpu or cuda"}
    version=$(torch_pin)
    [ -n "$version" ] || { say "no torch== pin in $SRC/pyproject.toml"; exit 1; }
    if [ -n "$DEPS_FROM" ]; then
      say "torch $version ($flavour): borrowing $DEPS_FROM (test mode)"
      echo "$DEPS_FROM" > "$(site_packages)/_depthserve_borrowed_deps.pth"
    elif [ "$flavour" = cpu ]; then
      say "torch $version, CPU wheel"
      pip install --no-cache-dir --index-url "$CPU_INDEX" "torch==$version"
    elif [ "$flavour" = cuda ]; then
      say "torch $version, CUDA wheel (PyPI's Linux build, with its CUDA libraries)"
      pip install --no-cache-dir "torch==$version"
    else
      say "unknown flavour $flavour: cpu or cuda"; exit 1
    fi
    ;;
  wheel)
    say "depthserve wheel from $SRC into $DIST"
    mkdir -p "$DIST"
    isolation=()
    [ -z "$DEPS_FROM" ] || isolation=(--no-build-isolation)
    "$BUILD_PYTHON" -m pip --disable-pip-version-check wheel --quiet --no-deps "${isolation[@]}" --wheel-dir "$DIST" "$SRC"
    ;;
  install)
    wheel=$(ls "$DIST"/depthserve-*.whl)
    say "installing $(basename "$wheel")"
    if [ -n "$DEPS_FROM" ]; then
      pip install --quiet --no-deps --no-index "$wheel"
    else
      pip install --no-cache-dir "$wheel"
    fi
    ;;
  check)
    "$VENV/bin/depthserve" --version
    "$VENV/bin/python" -c 'import depthserve.gateway.app, depthserve.worker.server, torch; print("imports ok, torch", torch.__version__)'
    ;;
  user)
    say "user depthserve (uid 10001) and /models"
    groupadd --system --gid 10001 depthserve
    useradd --system --uid 10001 --gid 10001 --home-dir /home/depthserve --create-home --shell /usr/sbin/nologin depthserve
    mkdir -p /models && chown 10001:10001 /models
    ;;
  list)
    echo "$STEPS"
    ;;
  *)
    say "unknown step '$step'; steps: $STEPS"; exit 2
    ;;
esac
