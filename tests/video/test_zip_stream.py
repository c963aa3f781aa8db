"""A zip streamed front to back opens with zipfile, numpy and unzip, including past zip64's thresholds."""

from __future__ import annotations

import io
import shutil
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest

from depthserve.video.zip_stream import LOCAL_HEADER, ZipStream


def test_whole_and_streamed_entries_read_back(tmp_path: Path) -> None:
    stream = ZipStream()
    stack = np.arange(2 * 3 * 4, dtype="<f2").reshape(2, 3, 4)
    header = io.BytesIO()
    np.lib.format.write_array_header_2_0(header, {"descr": "<f2", "fortran_order": False, "shape": (2, 3, 4)})
    pieces = [stream.file("a.txt", b"hello"), stream.begin("depth.npy"), stream.data(header.getvalue())]
    pieces += [stream.data(stack[0].tobytes()), stream.data(stack[1].tobytes()), stream.end()]
    pieces += [stream.file("empty.bin", b""), stream.close()]
    data = b"".join(pieces)
    archive = zipfile.ZipFile(io.BytesIO(data))
    assert archive.testzip() is None
    assert archive.namelist() == ["a.txt", "depth.npy", "empty.bin"]
    assert archive.read("a.txt") == b"hello"
    np.testing.assert_array_equal(np.load(io.BytesIO(data))["depth"], stack)
    if shutil.which("unzip"):
        (tmp_path / "x.zip").write_bytes(data)
        assert (
            "No errors detected"
            in subprocess.run(["unzip", "-t", str(tmp_path / "x.zip")], capture_output=True, text=True).stdout
        )


def test_a_whole_entry_states_its_size_up_front_so_a_client_can_follow_the_stream() -> None:
    stream = ZipStream()
    entry = stream.file("depth_000000.png", b"x" * 10)
    assert entry[:4] == b"PK\x03\x04"
    assert int.from_bytes(entry[18:22], "little") == 10  # compressed size in the local header
    assert len(entry) == LOCAL_HEADER + len("depth_000000.png") + 10


@pytest.mark.timeout(60)
def test_more_than_65535_entries_use_zip64_end_records() -> None:
    stream = ZipStream()
    out = io.BytesIO()
    for index in range(70_000):
        out.write(stream.file(f"{index:06d}", b""))
    out.write(stream.close())
    archive = zipfile.ZipFile(out)
    names = archive.namelist()
    assert len(names) == 70_000 and names[-1] == "069999"
