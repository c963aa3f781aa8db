"""The gateway, the CLI front and the synthetic worker never import torch (1.3 s and 230 MB per process)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "statement",
    [
        "import depthserve.gateway.app, depthserve.gateway.serve",
        "import depthserve.cli, depthserve.local_cluster, depthserve.client, depthserve.status_view",
        "from depthserve.settings import WorkerSettings; from depthserve.worker.runners import make_runner; "
        "make_runner(WorkerSettings(model='synthetic')); import depthserve.worker.server",
    ],
)
def test_no_torch_import(statement: str) -> None:
    """Neither does the simulator's plotting library load outside `depthserve sim` (0.3 s and 40 MB)."""
    code = (
        f"{statement}; import sys; assert 'torch' not in sys.modules, 'torch was imported'; "
        "assert 'matplotlib' not in sys.modules, 'matplotlib was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
