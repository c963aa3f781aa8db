"""The container builds without a container runtime: the Dockerfiles' structure, and every step they RUN
executed here from deploy/docker/build-steps.sh (torch borrowed from this environment, the rest real),
on a build context made of exactly what .dockerignore lets in; then the image's health check."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml

from depthserve import __version__
from depthserve.testing.processes import start_worker

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "deploy" / "docker"
STEPS = DOCKER / "build-steps.sh"
FLAVOURS = ("cpu", "cuda")


def instructions(flavour: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n\s*", " ", (DOCKER / f"Dockerfile.{flavour}").read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "") for line in lines]


def steps() -> set[str]:
    return set(subprocess.run(["bash", str(STEPS), "list"], capture_output=True, text=True, check=True).stdout.split())


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_dockerfile_is_multi_stage_non_root_with_a_health_check_and_runs_only_build_steps(flavour: str) -> None:
    parsed = instructions(flavour)
    stages = [i for i, (op, _) in enumerate(parsed) if op == "FROM"]
    assert len(stages) == 2 and parsed[stages[0]][1].endswith("AS build")
    final = parsed[stages[1] :]
    known = steps()
    for op, args in parsed:
        if op == "RUN":  # nothing is done in a Dockerfile that CI cannot run
            words = args.split()
            assert words[0].endswith("build-steps.sh") and words[1] in known, args
        if op == "COPY" and "--from" not in args:
            for source in args.split()[:-1]:
                assert (ROOT / source).exists(), source
    runs = [args.split()[1:] for op, args in parsed if op == "RUN"]
    assert ["torch", flavour] in runs and ["user"] in runs
    assert {op for op, _ in final} >= {"USER", "HEALTHCHECK", "ENTRYPOINT"}
    user = next(args for op, args in final if op == "USER")
    assert user == "10001:10001"  # the uid build-steps.sh creates and the manifests' runAsUser
    assert "useradd --system --uid 10001" in STEPS.read_text()
    assert next(args for op, args in final if op == "ENTRYPOINT") == '["depthserve"]'
    exposed = {int(p) for op, args in final if op == "EXPOSE" for p in args.split()}
    kube = ROOT / "deploy" / "kubernetes" / "base"
    ports = set()
    for name in ("gateway.yaml", "worker.yaml"):
        (container,) = yaml.safe_load((kube / name).read_text())["spec"]["template"]["spec"]["containers"]
        ports |= {p["containerPort"] for p in container["ports"]}
        assert container["image"] == f"depthserve:{__version__}-cpu"
        assert container["securityContext"]["readOnlyRootFilesystem"]
    assert exposed == ports


def build_context(tmp_path: Path) -> Path:
    """Copy what .dockerignore admits (its `!` lines), as docker would send it."""
    context = tmp_path / "context"
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        if line.startswith("!"):
            source = ROOT / line[1:].rstrip("/")
            target = context / source.relative_to(ROOT)
            if source.is_dir():
                shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)
    return context


def test_build_steps_build_and_install_a_working_depthserve(tmp_path: Path) -> None:
    context = build_context(tmp_path)
    env = {
        **os.environ,
        "VENV": str(tmp_path / "venv"),
        "DIST": str(tmp_path / "dist"),
        "SRC": str(context),
        "PYTHON": getattr(sys, "_base_executable", sys.executable),
        "BUILD_PYTHON": sys.executable,  # has setuptools: builds offline
        "DEPTHSERVE_BUILD_DEPS_FROM": sysconfig.get_paths()["purelib"],
    }
    env.pop("PYTHONPATH", None)
    outputs = []
    for step in (["venv"], ["torch", "cpu"], ["wheel"], ["install"], ["check"]):  # the Dockerfile's order
        done = subprocess.run(["bash", str(context / "deploy/docker/build-steps.sh"), *step], env=env,
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, f"{step}: {done.stdout}\n{done.stderr}"
        outputs.append(done.stdout + done.stderr)
    assert "torch 2.13.0 (cpu)" in outputs[1]
    assert f"depthserve {__version__}" in outputs[4] and "imports ok" in outputs[4]
    where = [str(tmp_path / "venv/bin/python"), "-c", "import depthserve; print(depthserve.__file__)"]
    installed = subprocess.run(where, capture_output=True, text=True, check=True).stdout
    assert installed.startswith(str(tmp_path / "venv"))  # the wheel, not this checkout


def test_unknown_steps_and_flavours_are_refused(tmp_path: Path) -> None:
    assert subprocess.run(["bash", str(STEPS), "bake"], capture_output=True).returncode == 2
    env = {**os.environ, "SRC": str(ROOT), "VENV": str(tmp_path), "DEPTHSERVE_BUILD_DEPS_FROM": ""}
    assert subprocess.run(["bash", str(STEPS), "torch", "rocm"], capture_output=True, env=env).returncode == 1


def test_health_check_asks_the_process_the_container_runs(tmp_path: Path) -> None:
    worker, address = start_worker(tmp_path, "--warmup-levels", "0")
    try:
        port = address.rpartition(":")[2]

        def check(*args: str) -> int:
            cmdline = tmp_path / "cmdline"
            cmdline.write_bytes(b"\0".join(a.encode() for a in args) + b"\0")
            run = [sys.executable, str(DOCKER / "healthcheck.py"), "--cmdline", str(cmdline)]
            return subprocess.run(run, capture_output=True, timeout=30).returncode

        assert check("/opt/depthserve/bin/python", "/opt/depthserve/bin/depthserve", "worker", "--port", port) == 0
        assert check("depthserve", "gateway", "--port", "9") == 1  # nothing listens on 9: unhealthy
        assert check("depthserve", "weights", "download") == 0  # a one-off command: nothing to check
    finally:
        worker.stop()
