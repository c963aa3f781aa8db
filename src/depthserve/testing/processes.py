"""Start real worker and gateway processes on loopback and wait until they serve."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from pathlib import Path

from depthserve.parent_death import PARENT_PID_ENV
from depthserve.ports import IN_USE
from depthserve.probes import free_port, grpc_serving, http_ready, http_status, listens

PROCESSES_ENV = "DEPTHSERVE_TEST_GATEWAY_PROCESSES"  # run test gateways with this many processes
PORT_TRIES = 3


class Proc:
    """A depthserve child process with its log, stopped by `stop()` or the context manager.

    It also stops when the process that started it exits, even by SIGKILL (see parent_death.py).
    """

    def __init__(
        self, args: Sequence[str], log: Path, env: dict[str, str] | None = None, prefix: Sequence[str] = ()
    ) -> None:
        """Start `depthserve ARGS`; `prefix` runs it through a launcher such as `ip netns exec NS`."""
        self.args = list(args)
        self.log = log
        with log.open("wb") as out:
            self.popen = subprocess.Popen(
                [*prefix, sys.executable, "-m", "depthserve", *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                # The child arms its parent-death signal itself, at start-up: a killed test run leaves no worker.
                env={**os.environ, PARENT_PID_ENV: str(os.getpid()), **(env or {})},
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        """The process id."""
        return self.popen.pid

    def output(self) -> str:
        """Everything the process wrote so far."""
        return self.log.read_text(errors="replace")

    def alive(self) -> bool:
        """Whether the process is still running."""
        return self.popen.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        """Signal the process, wait for it, kill its whole group if it lingers; return its exit code."""
        if self.alive():
            self.popen.send_signal(sig)
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.popen.pid, signal.SIGKILL)
            return self.popen.wait()

    def kill(self) -> None:
        """SIGKILL the whole process group at once, like a crash."""
        with suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait()


def wait_until(check: object, proc: Proc, timeout: float = 60.0) -> None:
    """Poll `check()` until true; fail with the process log if it dies or the time runs out."""
    assert callable(check)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise RuntimeError(f"{proc.args[0]} exited with {proc.popen.returncode}:\n{proc.output()[-3000:]}")
        if check():
            return
        time.sleep(0.1)
    raise TimeoutError(f"{proc.args[0]} not ready after {timeout}s:\n{proc.output()[-3000:]}")


def start_worker(
    log_dir: Path, *extra: str, port: int | None = None, name: str = "worker", serving: bool = True
) -> tuple[Proc, str]:
    """Start a worker (synthetic at 0 ms unless `extra` says otherwise), wait until it serves; give its address.

    With `serving=False` it waits only until the worker holds its port, so a test can watch it warm up.
    """
    args = [*extra]
    for flag, default in (("--model", "synthetic"), ("--synthetic-ms", "0")):
        if flag not in extra:
            args += [flag, default]

    def start(chosen: int) -> tuple[Proc, str]:
        proc = Proc(["worker", "--port", str(chosen), *args], log_dir / f"{name}-{chosen}.log")
        address = f"127.0.0.1:{chosen}"
        _ready_or_killed(proc, lambda: listens(proc.pid, chosen) and (not serving or grpc_serving(address)))
        return proc, address

    return start(port) if port else _on_a_free_port(start)


def _on_a_free_port(start: Callable[[int], tuple[Proc, str]]) -> tuple[Proc, str]:
    """Start a server on a port free now; if another process took it before ours bound it, on another one.

    Tests in parallel processes each ask the kernel for a free port, and two can be given the same one
    between asking and binding: the loser exits saying the port is in use, and the winner is not ours.
    """
    for _ in range(PORT_TRIES - 1):
        try:
            return start(free_port())
        except RuntimeError as exc:
            if IN_USE not in str(exc):
                raise
    return start(free_port())


def start_gateway(
    log_dir: Path, backends: Sequence[str], *extra: str, wait_ready: bool = True, env: dict[str, str] | None = None
) -> tuple[Proc, str]:
    """Start a gateway in front of `backends` and wait until /readyz (or /healthz) answers.

    `env` adds to the inherited environment (a benchmark sets PYTHONPATH to run another tree's gateway).

    With DEPTHSERVE_TEST_GATEWAY_PROCESSES=N in the environment, a gateway not told otherwise runs N processes
    (so the suites that check limits can be run against a gateway of several).
    """
    processes = os.environ.get(PROCESSES_ENV)
    if processes and "--processes" not in extra:
        extra = (*extra, "--processes", processes)

    def start(port: int) -> tuple[Proc, str]:
        proc = Proc(
            ["gateway", "--port", str(port), "--backends", ",".join(backends), *extra],
            log_dir / f"gateway-{port}.log",
            env,
        )
        url = f"http://127.0.0.1:{port}"
        answers = (lambda: http_ready(url)) if wait_ready else (lambda: http_status(url, "/healthz") == 200)
        _ready_or_killed(proc, lambda: answers() and listens(proc.pid, port))
        return proc, url

    return _on_a_free_port(start)


def _ready_or_killed(proc: Proc, check: Callable[[], bool]) -> None:
    """Wait for readiness; a process that never gets there is killed, not leaked."""
    try:
        wait_until(check, proc)
    except BaseException:
        proc.kill()
        raise


def descendants(pid: int) -> set[int]:
    """Find every live descendant of a process by walking /proc (for leak checks)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def pid_alive(pid: int) -> bool:
    """Whether a pid exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
