"""Every command the README shows runs as written, after the README's two commands, in a copy of the checkout.

The copy holds the tracked and new files (no `.venv`, no caches), as a fresh clone of this working tree
would. Installing torch again would take minutes, so the copy gets a `.venv` that reuses the packages
installed here (a venv whose site-packages point at this interpreter's, with the copy's own `src` first)
and the stamp `scripts/setup` writes after installing: `scripts/setup` then finds it installed, as on a
second run. Everything else is real: `scripts/up` from the README, the README's commands through bash
from the copy's root, and the commands `scripts/up` prints once ready.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import av
import numpy as np
import pytest
from PIL import Image

from depthserve.probes import free_port
from depthserve.settings import WeightsSettings
from depthserve.testing.hub import fake_hub
from depthserve.testing.processes import descendants, pid_alive

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[1]
URL = "http://127.0.0.1:8000"
REQUIRE = os.environ.get("DEPTHSERVE_REQUIRE_SERVICES") == "1"
READY_TIMEOUT_S = 600.0  # the tiny model's warm-up on a busy machine; a bound, not a speed check
COMMAND_TIMEOUT_S = 180.0
SHELL_TAGS = {"bash", "sh", "shell"}
NOT_EXAMPLES = {"text", "yaml", "json"}  # blocks that show output, diagrams or files, not commands

# Each README command that does not run here, as its words (shlex), with the reason.
SKIPPED = {
    "scripts/test": "runs the whole suite, this test included (CI runs it)",
    "depthserve worker --host 0.0.0.0 --port 50051 --model vitl14 --checkpoint model.pt": (
        "a GPU machine of its own with the published weights"
    ),
    "depthserve gateway --host 0.0.0.0 --port 8000 --backends gpu-a:50051,gpu-b:50051": "machines gpu-a and gpu-b",
    "depthserve worker --host 0.0.0.0 --model vitl14 --checkpoint model.pt --discovery redis://redis-host:6379 "
    "--advertise gpu-a:50051": "a GPU machine with the published weights, and a host redis-host",
    "depthserve gateway --host 0.0.0.0 --port 8000 --discovery redis://redis-host:6379": "a host redis-host",
    "depthserve worker --host 0.0.0.0 --model vitl14 --checkpoint model.pt --discovery "
    "etcd://etcd-host:2379/depthserve --advertise gpu-a:50051": (
        "a GPU machine with the published weights, and a host etcd-host"
    ),
    "depthserve gateway --host 0.0.0.0 --port 8000 --discovery etcd://etcd-host:2379/depthserve": "a host etcd-host",
    "scripts/up --model synthetic --autoscale 1:4 --port 8100": (
        "a second cluster that runs until Ctrl-C; tests/test_local_scaling.py runs it under a load step"
    ),
    "docker build -f deploy/docker/Dockerfile.cuda -t registry.example.com/depthserve:0.1.0-cuda .": (
        "no container runtime here; tests/deploy/test_docker.py runs every build step"
    ),
    "docker push registry.example.com/depthserve:0.1.0-cuda": "a container registry",
    "kubectl create namespace depthserve": "a Kubernetes cluster; tests/deploy/ validates the manifests offline",
    "kubectl -n depthserve create secret generic depthserve-api-keys --from-literal=api-keys=client:plain:CHANGE-ME": (
        "a Kubernetes cluster"
    ),
    "kubectl apply -k deploy/kubernetes/overlays/gpu": "a Kubernetes cluster with GPUs",
    "kubectl -n depthserve rollout status deployment/depthserve-worker": "a Kubernetes cluster",
    "kubectl -n depthserve port-forward service/depthserve-gateway 8000:8000": "a Kubernetes cluster",
    "scripts/up --model vitl14 --checkpoint robbyant/lingbot-depth-pretrain-vitl-14": (
        "the published weights, and port 8000 is the README's tiny cluster (the download runs, from a stand-in hub)"
    ),
    "curl -s localhost:8000/v1/jobs/ID": "ID stands for the id the submission printed",
    "curl -s localhost:8000/v1/jobs/ID/result -o depth.npy": "ID stands for the id the submission printed",
    "curl -s -X DELETE localhost:8000/v1/jobs/ID": "ID stands for the id the submission printed",
    "curl -s -X DELETE localhost:8000/v1/jobs/ID/result": "ID stands for the id the submission printed",
}
UP = "scripts/up"  # the README's first command, run as the cluster every other example talks to


def readme_examples(text: str) -> list[tuple[str, str]]:
    """The examples in the README's fenced blocks as (language, code): each shell command, each python block."""
    examples: list[tuple[str, str]] = []
    for tag, body in re.findall(r"^```(\S*)\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL):
        assert tag, f"tag every README block (bash, python, or one of {sorted(NOT_EXAMPLES)}):\n{body[:200]}"
        if tag == "python":
            examples.append(("python", body))
        elif tag in SHELL_TAGS:
            joined = re.sub(r"\\\n\s*", "", body)  # continuation lines, as bash reads them
            examples += [("bash", line) for line in joined.splitlines() if line.strip() and not line.startswith("#")]
        else:
            assert tag in NOT_EXAMPLES, f"README block tagged {tag!r}: run it here, or add the tag to NOT_EXAMPLES"
    return examples


def words(command: str) -> str:
    """A command as bash splits it, comments dropped: the key of SKIPPED."""
    return " ".join(shlex.split(command, comments=True))


def banner_commands(stderr: str) -> list[str]:
    """The commands `scripts/up` printed once ready: the lines indented by two spaces after "Try it"."""
    banner = stderr.split("\nTry it", 1)[-1]
    return [line.strip() for line in banner.splitlines() if line.startswith("  ") and line.strip()]


def copy_checkout(clone: Path) -> None:
    """Copy what a fresh clone of this working tree holds: tracked and untracked files, not ignored ones."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():  # a tracked file deleted in the working tree is not in a clone of it
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, clone / name)


def venv_reusing_installed(clone: Path) -> None:
    """Give the copy a .venv that imports its own src and this interpreter's packages, stamped as installed."""
    venv = clone / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = venv / "lib" / version / "site-packages"
    (site / "00-checkout-src.pth").write_text(f"{clone / 'src'}\n")  # as an editable install of the copy
    installed = sysconfig.get_paths()["purelib"]
    (site / "01-installed-packages.pth").write_text(f"import site; site.addsitedir({installed!r})\n")
    script = venv / "bin" / "depthserve"
    script.write_text(f"#!{venv / 'bin' / 'python'}\nimport sys\nfrom depthserve.cli import main\nsys.exit(main())\n")
    script.chmod(0o755)
    digest = hashlib.sha256((clone / "pyproject.toml").read_bytes() + (clone / "scripts" / "setup").read_bytes())
    (venv / ".depthserve-installed").write_text(digest.hexdigest()[:16] + "\n")  # what scripts/setup writes


def newcomer_env() -> dict[str, str]:
    """This environment as a newcomer's shell has it: no depthserve on PATH, no PYTHONPATH, no active venv."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "COLUMNS")}
    path = [d for d in env.get("PATH", "").split(os.pathsep) if d and not (Path(d) / "depthserve").exists()]
    env["PATH"] = os.pathsep.join(path)
    env["COLUMNS"] = "80"  # a narrow terminal or a log: nothing printed may depend on a wide one
    return env


def check_output_file(command: str, folder: Path) -> None:
    """The file a command wrote with `-o` holds what its extension says, not an error reply."""
    tokens = shlex.split(command, comments=True)
    if "-o" not in tokens:
        return
    path = folder / tokens[tokens.index("-o") + 1]
    data = path.read_bytes()
    assert not data.startswith(b"{"), f"{command}\nwrote an error: {data[:300]!r}"
    if path.suffix == ".npy":
        depth = np.load(io.BytesIO(data))
        assert depth.shape == (240, 320) and np.isfinite(depth).any(), depth.shape
    elif path.suffix == ".png":
        image = Image.open(io.BytesIO(data))
        assert image.size == (320, 240), image.size
        assert image.mode == ("RGB" if "preview" in command else "I;16"), image.mode
    elif path.suffix == ".ply":
        assert data.startswith(b"ply\n")
    elif path.suffix == ".zip":  # a video's frames: 16-bit PNGs in order, then frames.csv
        names = zipfile.ZipFile(io.BytesIO(data)).namelist()
        assert names[0] == "depth_000000.png" and names[-1] == "frames.csv", names[:3]
    elif path.suffix == ".npz":
        assert np.load(io.BytesIO(data))["depth"].ndim == 3
    elif path.suffix == ".mp4":
        with av.open(io.BytesIO(data)) as container:
            assert sum(1 for _ in container.decode(video=0)) > 0
    else:
        raise AssertionError(f"no check for {path.suffix} outputs: add one")


def run_example(language: str, code: str, clone: Path, env: dict[str, str]) -> None:
    """Run one example verbatim from the copy's root; fail with its output unless it worked."""
    argv = [str(clone / ".venv" / "bin" / "python"), "-c", code] if language == "python" else ["bash", "-c", code]
    done = subprocess.run(argv, cwd=clone, env=env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    assert done.returncode == 0, f"{code}\nexit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    if language == "bash":
        check_output_file(code, clone)
        assert '"error"' not in done.stdout, f"{code}\n{done.stdout[-2000:]}"
    if words(code).startswith("scripts/depthserve status"):
        assert "ready" in done.stdout and "…" not in done.stdout, done.stdout


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def start_up(command: str, cwd: Path, env: dict[str, str], stderr_log: Path) -> subprocess.Popen[str]:
    """Type `command` (a `scripts/up` line) in a shell at `cwd`; return once it says ready, failing with its log."""
    with stderr_log.open("w") as stderr:
        up = subprocess.Popen(
            ["bash", "-c", command], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True,
            start_new_session=True,
        )  # fmt: skip
    first: list[str] = []
    reader = threading.Thread(target=lambda: first.append(up.stdout.readline() if up.stdout else ""), daemon=True)
    reader.start()
    reader.join(READY_TIMEOUT_S)
    if not (first and first[0].startswith("depthserve ready at ")):
        stop_up(up)
        raise AssertionError(f"{command}: not ready\n{first}\n{stderr_log.read_text()[-3000:]}")
    deadline = time.monotonic() + 30
    while "Ctrl-C" not in stderr_log.read_text() and time.monotonic() < deadline:  # the banner's last line
        time.sleep(0.1)
    return up


def stop_up(up: subprocess.Popen[str]) -> int:
    """Press Ctrl-C (SIGINT to the foreground group); check nothing it started is left; give its exit code."""
    family = descendants(up.pid)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(up.pid, signal.SIGINT)
    try:
        code = up.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(up.pid, signal.SIGKILL)
        raise
    deadline = time.monotonic() + 30
    while any(pid_alive(pid) for pid in family) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in family if pid_alive(pid)], "processes left after Ctrl-C"
    return code


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh copy of this checkout whose .venv reuses the installed packages."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout to copy")
    clone = tmp_path_factory.mktemp("fresh") / "depthserve"
    copy_checkout(clone)
    venv_reusing_installed(clone)
    return clone


@pytest.fixture()
def weights_hub(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A stand-in for the Hugging Face hub serving the published repo's model.pt; the environment pointing at it."""
    repo = WeightsSettings.model_fields["repo"].default
    with fake_hub({(repo, "model.pt"): bytes(range(256)) * 8192}) as hub:
        yield {"DEPTHSERVE_WEIGHTS_ENDPOINT": hub.url, "DEPTHSERVE_WEIGHTS_CACHE_DIR": str(tmp_path / "weights")}


def test_every_readme_command_runs_verbatim(checkout: Path, tmp_path: Path, weights_hub: dict[str, str]) -> None:
    examples = readme_examples((ROOT / "README.md").read_text())
    keys = [words(code) for language, code in examples if language == "bash"]
    assert not set(SKIPPED) - set(keys), f"SKIPPED names commands the README no longer has: {set(SKIPPED) - set(keys)}"
    assert words(UP) in keys, "the README no longer starts a cluster with scripts/up"
    if not port_free(8000):
        message = "port 8000 is in use here, and the README's commands need it"
        if REQUIRE:
            pytest.fail(message)
        pytest.skip(message)
    env = {**newcomer_env(), **weights_hub}
    up_line = next(code for language, code in examples if language == "bash" and words(code) == UP)
    stderr_log = tmp_path / "up.stderr"
    up = start_up(up_line, checkout, env, stderr_log)
    try:
        printed = banner_commands(stderr_log.read_text())
        assert len(printed) == 2 and printed[0].startswith("curl") and "status" in printed[1], printed
        ran = []
        for language, code in [*examples, *(("bash", line) for line in printed)]:
            if language == "bash" and (words(code) in SKIPPED or words(code) == UP):
                continue
            run_example(language, code, checkout, env)
            ran.append(code)
    finally:
        exit_code = stop_up(up)
    assert exit_code == 0, stderr_log.read_text()[-3000:]
    print(json.dumps({"ran": len(ran), "skipped": len(SKIPPED), "examples": len(examples)}))
    assert len(ran) + len(SKIPPED) + 1 == len(examples) + len(printed)  # each example once: run, skipped or up


def test_scripts_up_runs_in_the_callers_directory(checkout: Path, tmp_path: Path) -> None:
    # Relative paths a user passes (--checkpoint model.pt) mean the user's files only if up stays where it was started.
    mine = tmp_path / "my-project"
    mine.mkdir()
    port = free_port()
    stderr_log = tmp_path / "up.stderr"
    command = f"{checkout}/scripts/up --workers 1 --model synthetic --port {port}"
    up = start_up(command, mine, newcomer_env(), stderr_log)
    try:
        assert Path(os.readlink(f"/proc/{up.pid}/cwd")) == mine  # bash exec'd scripts/up, which exec'd depthserve
        curl = banner_commands(stderr_log.read_text())[0]
        done = subprocess.run(["bash", "-c", curl], cwd=mine, capture_output=True, timeout=COMMAND_TIMEOUT_S)
        assert done.returncode == 0, done.stderr
        check_output_file(curl, mine)  # the banner's paths work from the user's folder
    finally:
        exit_code = stop_up(up)
    assert exit_code == 0, stderr_log.read_text()[-3000:]
