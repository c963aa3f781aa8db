"""`depthserve weights download` against a stand-in hub on loopback: progress, cache, resume, checks."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from depthserve.model import build_model, load_model, save_checkpoint
from depthserve.testing.hub import FakeHub, fake_hub

REPO = "someone/lingbot-depth-test"


@pytest.fixture(scope="module")
def checkpoint_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A tiny-network checkpoint in the published layout (about 6 MB: several download chunks)."""
    path = tmp_path_factory.mktemp("ckpt") / "model.pt"
    save_checkpoint(build_model("tiny", seed=5), path)
    return path.read_bytes()


@pytest.fixture()
def hub(checkpoint_bytes: bytes) -> Iterator[FakeHub]:
    """The stand-in hub serving one repo's model.pt."""
    with fake_hub({(REPO, "model.pt"): checkpoint_bytes}) as served:
        yield served


def download(hub: FakeHub, cache: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the command a user types, as a real process."""
    env = {**os.environ, "DEPTHSERVE_WEIGHTS_ENDPOINT": hub.url, "DEPTHSERVE_WEIGHTS_CACHE_DIR": str(cache)}
    command = [sys.executable, "-m", "depthserve", "weights", "download", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd, timeout=120)


def test_download_fills_the_cache_and_the_repo_id_then_loads(
    hub: FakeHub, checkpoint_bytes: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = download(hub, tmp_path / "cache", REPO)
    assert done.returncode == 0, done.stderr
    saved = Path(done.stdout.strip())
    assert saved == tmp_path / "cache" / "someone--lingbot-depth-test" / "model.pt"
    assert saved.read_bytes() == checkpoint_bytes
    assert "model.pt" in done.stderr and "MB" in done.stderr  # the progress bar, with sizes
    assert f"--checkpoint {REPO}" in done.stderr
    assert [path for path, _ in hub.requests] == [f"/{REPO}/resolve/main/model.pt", f"/blobs/{_sha(checkpoint_bytes)}"]
    again = download(hub, tmp_path / "cache", REPO)  # cached: no second transfer
    assert again.returncode == 0 and Path(again.stdout.strip()) == saved and len(hub.requests) == 2
    monkeypatch.setenv("DEPTHSERVE_WEIGHTS_CACHE_DIR", str(tmp_path / "cache"))
    key = "neck.input_blocks.0.weight"
    assert torch.equal(load_model(REPO).state_dict()[key], build_model("tiny", seed=5).state_dict()[key])


def test_a_cut_download_resumes_where_it_stopped(hub: FakeHub, checkpoint_bytes: bytes, tmp_path: Path) -> None:
    hub.cut_after = 2_500_000
    cut = download(hub, tmp_path / "cache", REPO)
    folder = tmp_path / "cache" / "someone--lingbot-depth-test"
    assert cut.returncode == 1 and "run it again to resume" in cut.stderr
    assert not (folder / "model.pt").exists() and (folder / "model.pt.part").stat().st_size == 2_500_000
    resumed = download(hub, tmp_path / "cache", REPO)
    assert resumed.returncode == 0, resumed.stderr
    assert hub.requests[-1][1] == "bytes=2500000-"  # only the rest was asked for
    assert (folder / "model.pt").read_bytes() == checkpoint_bytes and not (folder / "model.pt.part").exists()


def test_a_download_that_fails_its_checksum_is_deleted(hub: FakeHub, tmp_path: Path) -> None:
    hub.advertised_sha = "0" * 64
    failed = download(hub, tmp_path / "cache", REPO)
    assert failed.returncode == 1 and "SHA-256" in failed.stderr
    assert list((tmp_path / "cache").rglob("model.pt*")) == []


def test_an_unknown_repo_says_not_found(hub: FakeHub, tmp_path: Path) -> None:
    failed = download(hub, tmp_path / "cache", "someone/missing")
    assert failed.returncode == 1 and "HTTP 404" in failed.stderr and "someone/missing" in failed.stderr
    assert "Traceback" not in failed.stderr


def test_cache_dir_flag_is_resolved_from_the_callers_directory(hub: FakeHub, tmp_path: Path) -> None:
    done = download(hub, tmp_path / "unused", REPO, "--cache-dir", "here", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()) == tmp_path / "here" / "someone--lingbot-depth-test" / "model.pt"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
