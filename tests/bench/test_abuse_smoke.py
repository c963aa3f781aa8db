"""bench/abuse.py runs end to end in its smoke mode and reports every run, so the harness cannot rot unseen."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[2] / "bench" / "abuse.py"
EXPECTED_RUNS = [
    "quiet",
    "slow-upload, size 0.25",
    "quiet",
    "unread-reply, size 0.25",
    "quiet",
    "overload, size 0.25",
]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_smoke_run_reports_every_run_with_its_figures(tmp_path: Path) -> None:
    markdown = tmp_path / "abuse.md"
    done = subprocess.run(
        [sys.executable, str(BENCH), "--smoke", "--markdown", str(markdown)],
        capture_output=True,
        text=True,
        timeout=220,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = markdown.read_text().splitlines()
    header = next(line for line in lines if line.startswith("| round"))
    columns = [cell.strip() for cell in header.strip("|").split("|")]
    rows = [
        dict(zip(columns, (c.strip() for c in line.strip("|").split("|")), strict=True))
        for line in lines
        if line.startswith("| 1 ")
    ]
    assert [row["run"] for row in rows] == EXPECTED_RUNS
    for row in rows:
        assert int(row["normal sent"]) > 0, row  # the normal clients sent throughout every run
        assert 0.0 <= float(row["normal ok %"]) <= 100.0, row
        assert float(row["gateway peak RSS MB"]) > 0, row
        float(row["load avg"])
        assert "GATEWAY DIED" not in row["attack"] and "attacker" not in row["attack"], row
    attacks = {row["run"].split(",")[0]: row["attack"] for row in rows if row["run"] != "quiet"}
    assert "uploads held" in attacks["slow-upload"]
    assert "replies unread" in attacks["unread-reply"]
    assert int(attacks["overload"].split()[0]) > 0  # "N sent, A/s of R/s: {statuses}"
    # The refusal probe read whole replies over its own HTTP/1.1 connection: answers, not socket errors.
    assert re.search(r"probe got \{'(200|503)[^']*': \d+", attacks["overload"]), attacks["overload"]
