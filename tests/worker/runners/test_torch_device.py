"""--device resolved on a machine without a GPU: auto and cpu run, cuda is refused saying what to do."""

from __future__ import annotations

import pytest
import torch

from depthserve.worker.runners.torch_device import (
    DeviceMemory,
    DeviceUnavailable,
    describe_device,
    gpu_uuid,
    resolve_device,
)

needs_no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the answers of a machine without a GPU")


@needs_no_gpu
def test_auto_and_cpu_run_on_the_cpu() -> None:
    assert resolve_device("auto") == torch.device("cpu") == resolve_device("cpu")
    assert describe_device(torch.device("cpu")).startswith("cpu (")
    assert gpu_uuid(torch.device("cpu")) is None


@needs_no_gpu
@pytest.mark.parametrize("requested", ["cuda", "cuda:1"])
def test_cuda_without_a_gpu_is_refused_with_what_to_do(requested: str) -> None:
    with pytest.raises(DeviceUnavailable, match=f"--device {requested}: torch .* sees no CUDA device") as caught:
        resolve_device(requested)
    assert "--device cpu" in str(caught.value) and "CUDA build of torch" in str(caught.value)


def test_a_cpu_has_no_memory_budget() -> None:
    memory = DeviceMemory(torch.device("cpu"), 0.9)
    memory.refresh()
    assert memory() is None
