"""What `depthserve up` prints once ready: commands to paste as they are, each on one line that never wraps."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]  # the source tree, when installed from a checkout (scripts/setup)


def _as_typed(path: Path) -> str:
    """A path as a user types it from the current directory: relative below it, absolute elsewhere."""
    try:
        return str(path.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def cli_command() -> str:
    """How to run `depthserve` here: the checkout's scripts/depthserve, the one on PATH, or this Python's module."""
    wrapper = CHECKOUT / "scripts" / "depthserve"
    if wrapper.is_file():
        return _as_typed(wrapper)
    if shutil.which("depthserve"):
        return "depthserve"
    return f"{sys.executable} -m depthserve"


def sample_image() -> str:
    """The shipped sample image as a path to type, or a placeholder when depthserve runs from no checkout."""
    sample = CHECKOUT / "examples" / "sample.png"
    return _as_typed(sample) if sample.is_file() else "photo.png"


def banner(url: str, log_dir: Path, keep_logs: int) -> list[str]:
    """The lines after `depthserve ready at URL`; those indented by two spaces are commands."""
    return [
        "Try it (paste a line as it is):",
        f"  curl --http2-prior-knowledge -H 'Content-Type: image/png' --data-binary @{sample_image()}"
        f" {url}/v1/depth -o depth.npy",
        f"  {cli_command()} status --url {url}",
        f"Dashboard {url}/dashboard · metrics {url}/metrics",
        f"Logs: {log_dir} (the last {keep_logs} runs are kept). Ctrl-C stops the cluster.",
    ]


def print_banner(url: str, log_dir: Path, keep_logs: int) -> None:
    """Print the banner to stderr unwrapped (rich would break lines at 80 columns when logged)."""
    for line in banner(url, log_dir, keep_logs):
        print(line, file=sys.stderr, flush=True)
