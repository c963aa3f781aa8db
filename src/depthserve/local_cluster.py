"""`depthserve up`: start a gateway and N workers on this machine, wait until ready, stop them all.

Membership: a fixed `--backends` list; with `--discovery URL` (redis:// or etcd://) the workers
register and the gateway follows the registry; with `--autoscale MIN:MAX` and no registry, a
backends file the cluster rewrites as workers join and leave (local_scaling.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from depthserve.cluster_logs import KEEP, new_log_dir
from depthserve.discovery.urls import check_url
from depthserve.local_scaling import WorkerScaler, parse_bounds
from depthserve.parent_death import PARENT_PID_ENV
from depthserve.ports import IN_USE
from depthserve.probes import free_port, grpc_serving, http_ready, listens, port_of
from depthserve.ready_banner import print_banner
from depthserve.settings import DEFAULT_MODEL_NAME
from depthserve.telemetry.gpus import VISIBLE_ENV

console = Console(stderr=True)
RESTART_MAX_S = 30.0  # longest wait before restarting a dead worker
RESTART_RESET_S = 60.0  # a worker that ran this long starts its backoff afresh
PORT_TRIES = 3  # ports a starting worker is given before `up` gives up on it


def scaling_options(autoscale: str | None, discovery: str | None) -> tuple[int, int] | None:
    """Check `up --autoscale MIN:MAX` and `--discovery URL` (a registry workers can join); give the bounds."""
    if discovery is not None and urlsplit(check_url(discovery)).scheme not in ("redis", "rediss", "etcd"):
        raise ValueError("up --discovery takes a registry workers can join: redis://... or etcd://...")
    if autoscale is None:
        return None
    bounds = parse_bounds(autoscale)
    os.environ["DEPTHSERVE_GATEWAY_SCALE_MIN_WORKERS"] = str(bounds[0])  # the signal's bounds are the cluster's
    os.environ["DEPTHSERVE_GATEWAY_SCALE_MAX_WORKERS"] = str(bounds[1])
    return bounds


@dataclass
class Child:
    """A started component: its name, process and log file."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path
    args: list[str]
    env: dict[str, str]  # set for this child on top of ours (a GPU worker's CUDA_VISIBLE_DEVICES)
    started_at: float = 0.0
    restarts: int = 0
    restart_at: float | None = None
    retiring: bool = False  # the autoscaler is draining it: not restarted when it exits

    @property
    def pid(self) -> int:
        """The process id."""
        return self.process.pid

    def terminate(self) -> None:
        """Ask the child to drain and stop."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def exited(self) -> bool:
        """Whether the child's process has ended."""
        return self.process.poll() is not None

    def tail(self, lines: int = 15) -> str:
        """Give the last lines of the child's log, to explain a failure."""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


class LocalCluster:
    """Supervises the child processes of a local cluster; nothing outlives it."""

    def __init__(
        self,
        workers: int,
        model: str,
        checkpoint: str | None,
        port: int,
        policy: str,
        threads: int | None,
        ready_timeout_s: float = 600.0,
        discovery: str | None = None,
        autoscale: tuple[int, int] | None = None,
        gpu_ids: list[str] | None = None,
    ) -> None:
        """`gpu_ids` (NVML indices or UUIDs, from `--gpus`) start one worker per GPU, each seeing only its own."""
        self.gpu_ids = gpu_ids
        self.workers = len(gpu_ids) if gpu_ids else workers
        self.model = model
        self.checkpoint = checkpoint
        self.port = port or free_port()
        self.policy = policy
        self.threads = threads or 1
        self.ready_timeout_s = ready_timeout_s
        self.discovery = discovery
        self.autoscale = autoscale
        if autoscale is not None:
            self.workers = max(autoscale[0], min(autoscale[1], workers))
        self.log_dir = new_log_dir()
        self.backends_file = self.log_dir / "backends.yaml"  # autoscaling without a registry
        self.children: list[Child] = []
        self.scaler: WorkerScaler | None = None
        self._stop_signal: int | None = None
        self._spawned = 0

    def _popen(self, args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
        with log.open("ab") as out:
            return subprocess.Popen(
                [sys.executable, "-m", "depthserve", *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, **env, PARENT_PID_ENV: str(os.getpid())},  # the child ends with us (parent_death.py)
            )

    def _spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> Child:
        log = self.log_dir / f"{name}.log"
        env = env or {}
        child = Child(name, self._popen(args, log, env), log, args, env, time.monotonic())
        self.children.append(child)
        return child

    def _supervise(self, child: Child) -> None:
        """Restart a dead worker on its port with exponential backoff; the gateway re-admits it once warm."""
        now = time.monotonic()
        if child.restart_at is None:
            if now - child.started_at > RESTART_RESET_S:
                child.restarts = 0
            delay = min(RESTART_MAX_S, 2.0**child.restarts)
            child.restart_at = now + delay
            console.print(
                f"[yellow]{child.name} exited with code {child.process.returncode}; restarting in {delay:.0f}s[/yellow]"
                f" (log {child.log})"
            )
        elif now >= child.restart_at:
            child.process = self._popen(child.args, child.log, child.env)
            child.started_at, child.restart_at = now, None
            child.restarts += 1
            console.print(f"{child.name} restarted (pid {child.process.pid})")

    def _wait_ready(self, progress: Progress, children: dict[str, tuple[Child, str]]) -> bool:
        """Wait until every child serves at its target (HOST:PORT or a URL) from its own process.

        A worker whose free port another program took before it bound is started again on another, in
        `children`. False when a child exited otherwise, a stop signal came, or the time ran out.
        """
        tasks = {name: progress.add_task(f"{name} starting", total=1) for name in children}
        ports_given = dict.fromkeys(children, 1)
        pending = set(children)
        deadline = time.monotonic() + self.ready_timeout_s
        while pending:
            if self._stop_signal is not None:
                return False
            for name in sorted(pending):
                child, target = children[name]
                if child.process.poll() is not None:
                    if name.startswith("worker") and IN_USE in child.tail() and ports_given[name] < PORT_TRIES:
                        self.children.remove(child)
                        children[name] = self._spawn_worker(int(name.rsplit("-", 1)[1]))
                        ports_given[name] += 1
                        console.print(f"{name}: {target} was taken by another program; starting on {children[name][1]}")
                        continue
                    progress.stop()
                    console.print(f"[red]{name} exited with code {child.process.returncode}:[/red]\n{child.tail()}")
                    console.print(f"whole log: {child.log}", soft_wrap=True)
                    return False
                answers = http_ready(target) if target.startswith("http") else grpc_serving(target)
                if answers and listens(child.process.pid, port_of(target)):  # not another's server
                    progress.update(tasks[name], completed=1, description=f"{name} ready")
                    pending.discard(name)
            if time.monotonic() > deadline:
                progress.stop()
                console.print(f"[red]not ready after {self.ready_timeout_s:.0f}s: {', '.join(sorted(pending))}[/red]")
                return False
            time.sleep(0.2)
        return True

    def _spawn_worker(self, index: int | None = None) -> tuple[Child, str]:
        """Start one more worker (or worker `index` again) on a free port; give it and its address."""
        if index is None:
            index, self._spawned = self._spawned, self._spawned + 1
        address = f"127.0.0.1:{free_port()}"
        args = ["worker", "--port", address.split(":")[1], "--model", self.model, "--threads", str(self.threads)]
        if self.checkpoint:
            args += ["--checkpoint", self.checkpoint]
        if self.discovery:
            args += ["--discovery", self.discovery]  # it registers itself once warm, and leaves first on SIGTERM
        env = {}
        if self.gpu_ids:  # CUDA shows this worker its GPU alone, as its cuda:0 (as Ray and Triton do)
            args += ["--device", "cuda:0"]
            env[VISIBLE_ENV] = self.gpu_ids[index % len(self.gpu_ids)]
        return self._spawn(f"worker-{index}", args, env), address

    def _publish(self, addresses: list[str]) -> None:
        """Write the gateway's backends file atomically (it re-reads the file when it changes)."""
        temporary = self.backends_file.with_suffix(".tmp")
        temporary.write_text("".join(f"- {address}\n" for address in addresses) or "[]\n")
        temporary.replace(self.backends_file)

    def _gateway_args(self, addresses: list[str]) -> list[str]:
        args = ["gateway", "--port", str(self.port), "--policy", self.policy]
        if self.discovery:
            return [*args, "--discovery", self.discovery]
        if self.autoscale is not None:
            self._publish(addresses)
            return [*args, "--discovery", f"file://{self.backends_file}", "--discovery-poll-s", "0.2"]
        return [*args, "--backends", ",".join(addresses)]

    def start(self) -> bool:
        """Start workers, then the gateway, showing progress; False if anything failed to come up."""
        with Progress(
            SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console, transient=False
        ) as progress:
            spawned = [self._spawn_worker() for _ in range(self.workers)]
            started = {child.name: (child, address) for child, address in spawned}
            if not self._wait_ready(progress, started):
                return False
            addresses = [address for _, address in started.values()]
            gateway = self._spawn("gateway", self._gateway_args(addresses))
            if not self._wait_ready(progress, {"gateway": (gateway, f"http://127.0.0.1:{self.port}")}):
                return False
        if self.autoscale is not None:
            url = f"http://127.0.0.1:{self.port}"
            publish = None if self.discovery else self._publish
            self.scaler = WorkerScaler(self.autoscale, url, DEFAULT_MODEL_NAME, self._spawn_worker, publish, console)
            for child, address in started.values():
                self.scaler.adopt(child, address, serving=True)
        return True

    def stop(self) -> None:
        """Stop the gateway first, then the workers; kill whatever has not exited after 15 s."""
        for child in reversed(self.children):
            if child.process.poll() is None:
                child.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15.0
        for child in self.children:
            try:
                child.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.process.pid, signal.SIGKILL)
                child.process.wait()

    def _on_signal(self, signum: int, frame: object) -> None:
        self._stop_signal = signum

    def run(self) -> int:
        """Start, announce, wait for a signal or a dead child, then stop everything; return an exit code."""
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        code = 0
        try:
            if not self.start():
                code = 0 if self._stop_signal is not None else 1
                return code
            url = f"http://127.0.0.1:{self.port}"
            print(f"depthserve ready at {url}", flush=True)
            print_banner(url, self.log_dir, KEEP)
            while self._stop_signal is None:
                for child in list(self.children):
                    if child.process.poll() is None:
                        continue
                    if child.retiring:
                        self.children.remove(child)  # drained on purpose by the autoscaler
                        continue
                    if child.name == "gateway":
                        console.print(f"[red]the gateway exited unexpectedly:[/red]\n{child.tail()}")
                        console.print(f"whole log: {child.log}", soft_wrap=True)
                        return 1
                    self._supervise(child)
                if self.scaler is not None:
                    self.scaler.tick()
                time.sleep(0.2)
            return code
        finally:
            console.print("stopping depthserve…")
            self.stop()
