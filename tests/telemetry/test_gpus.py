"""CUDA_VISIBLE_DEVICES read as CUDA reads it, and `--gpus` turned into the GPUs a cluster starts on."""

from __future__ import annotations

import re

import pytest

from depthserve.telemetry.gpus import open_handle, parse_gpus, physical_gpu_count, visible_gpu_ids
from depthserve.testing.fake_nvml import FakeGpu, FakeNvml

UUID = "GPU-5b3c7a52-1111-2222-3333-444455556666"


def test_unset_shows_every_gpu_of_the_machine() -> None:
    assert visible_gpu_ids({}, 4) == ["0", "1", "2", "3"]
    assert visible_gpu_ids({}, 0) == []


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2,0", ["2", "0"]),  # CUDA's order, not the machine's
        (" 1 , 03", ["1", "3"]),
        ("0,7,1", ["0"]),  # read up to the first index that does not exist
        ("1,-1,0", ["1"]),
        ("", []),
        ("-1", []),
        ("NoDevFiles", []),
        ("0,0", ["0"]),
        (f"{UUID},1", [UUID, "1"]),
    ],
)
def test_cuda_visible_devices_is_read_as_cuda_reads_it(value: str, expected: list[str]) -> None:
    assert visible_gpu_ids({"CUDA_VISIBLE_DEVICES": value}, 4) == expected


def test_all_and_lists_give_cuda_indices() -> None:
    assert parse_gpus("all", 3) == [0, 1, 2]
    assert parse_gpus("ALL", 1) == [0]
    assert parse_gpus("2,0", 3) == [2, 0]
    assert parse_gpus(" 1 ", 2) == [1]


@pytest.mark.parametrize(
    ("spec", "visible", "message"),
    [
        ("all", 0, "no NVIDIA GPU is visible"),
        ("0", 0, "no NVIDIA GPU is visible"),
        ("2", 2, "GPU 2 does not exist; 2 visible (0..1)"),
        ("0,0", 2, "named twice"),
        ("gpu0", 2, "'gpu0' is not a GPU index"),
        ("0,,1", 2, "'' is not a GPU index"),
        ("-1", 2, "'-1' is not a GPU index"),
    ],
)
def test_bad_gpu_lists_are_refused_with_the_reason(spec: str, visible: int, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_gpus(spec, visible)


def test_handles_open_by_index_or_uuid() -> None:
    nvml = FakeNvml([FakeGpu("GPU-a"), FakeGpu(UUID)])
    assert physical_gpu_count(nvml) == 2
    assert open_handle(nvml, "1").uuid == UUID
    assert open_handle(nvml, UUID) is nvml.gpus[1]


def test_no_driver_counts_no_gpu() -> None:
    assert physical_gpu_count(FakeNvml(driver=False)) == 0
