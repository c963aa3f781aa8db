"""The load report survives the trip through text metadata, and newer fields do not break older readers."""

from __future__ import annotations

from depthserve.protocol.load_report import METADATA_KEY, LoadReport, from_metadata


def test_round_trip() -> None:
    report = LoadReport(
        queue=3,
        running=1,
        max_batch=8,
        gpu_util=0.625,
        device="cuda",
        mem_used=2**33,
        mem_total=2**36,
        temp_c=71.5,
        ts=1796000000.25,
    )
    assert LoadReport.decode(report.encode()) == report


def test_unknown_device_and_temperature_stay_unknown() -> None:
    cpu = LoadReport(device="cpu", mem_used=2**30, mem_total=2**34)
    assert "temp_c" not in cpu.encode() and LoadReport.decode(cpu.encode()) == cpu
    assert LoadReport.decode(cpu.encode()).temp_c is None and LoadReport().device == ""


def test_reports_from_workers_before_the_rename_still_read() -> None:
    old = LoadReport.decode("queue=1,gpu_mem_used=5,gpu_mem_total=9,gpu_temp=0.0")
    assert old == LoadReport(queue=1, mem_used=5, mem_total=9, temp_c=None)  # their 0 degrees meant unknown
    assert LoadReport.decode("gpu_temp=64.5").temp_c == 64.5


def test_unknown_and_malformed_fields_are_ignored() -> None:
    assert LoadReport.decode("queue=2,colour=blue,running=x,gpu_util=0.5") == LoadReport(queue=2, gpu_util=0.5)


def test_found_in_metadata_or_absent() -> None:
    assert from_metadata([("other", "1"), (METADATA_KEY, b"queue=4")]) == LoadReport(queue=4)
    assert from_metadata([("other", "1")]) is None
    assert from_metadata(None) is None


def test_queue_limit_travels_and_gives_room() -> None:
    report = LoadReport(queue=3, queue_limit=8)
    assert LoadReport.decode(report.encode()) == report and report.room() == 5
    assert LoadReport(queue=9, queue_limit=8).room() == 0
    assert LoadReport(queue=3).room() is None  # an older worker: unknown
