"""Model runners a worker can serve; `make_runner` picks one by the `--model` setting."""

from __future__ import annotations

from depthserve.settings import WorkerSettings
from depthserve.worker.runners.base import Prepared, Runner


def make_runner(settings: WorkerSettings) -> Runner:
    """Build the runner for `settings.model`, importing torch only for real networks."""
    if settings.model == "synthetic":
        from depthserve.worker.runners.synthetic import SyntheticRunner

        return SyntheticRunner(settings)
    from depthserve.worker.runners.torch_runner import TorchRunner

    return TorchRunner(settings)


__all__ = ["Prepared", "Runner", "make_runner"]
