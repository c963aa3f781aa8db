"""A `--checkpoint` argument is resolved from the caller's directory or the cache, and named in full."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from depthserve.weights.cache import WeightsError, is_repo_id, locate_checkpoint, repo_dir

ROOT = Path(__file__).resolve().parents[2]


def test_relative_paths_resolve_from_the_given_directory(tmp_path: Path) -> None:
    (tmp_path / "model.pt").write_bytes(b"x")
    assert locate_checkpoint("model.pt", cwd=tmp_path) == tmp_path / "model.pt"
    (tmp_path / "owner").mkdir()
    (tmp_path / "owner" / "name").mkdir()  # a folder that looks like a repo id is still a folder
    assert locate_checkpoint("owner/name", cwd=tmp_path) == tmp_path / "owner" / "name"
    with pytest.raises(WeightsError, match=f"no checkpoint at {tmp_path / 'elsewhere.pt'}"):
        locate_checkpoint("elsewhere.pt", cwd=tmp_path)


def test_repo_ids_come_from_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEPTHSERVE_WEIGHTS_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(WeightsError, match="depthserve weights download owner/name"):
        locate_checkpoint("owner/name", cwd=tmp_path)
    cached = repo_dir("owner/name", tmp_path / "cache") / "model.pt"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"x")
    assert locate_checkpoint("owner/name", cwd=tmp_path) == cached


@pytest.mark.parametrize("text", ["../etc", "a/../b", "/abs/path", "a/b/c", "model.pt", "owner/model.pt", ""])
def test_only_owner_slash_name_is_a_repo_id(text: str) -> None:
    assert not is_repo_id(text)


def test_worker_names_the_resolved_checkpoint_when_it_is_missing(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "depthserve", "worker", "--model", "vitl14", "--checkpoint", "model.pt"]
    env = {**os.environ, "COLUMNS": "400"}  # rich's error panel wraps at its width, even inside a long path
    done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=60, env=env)
    assert done.returncode == 2
    assert str(tmp_path / "model.pt") in " ".join(done.stderr.split()).replace("│ ", "").replace(" │", "")


def test_checkpoint_files_are_git_ignored() -> None:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    names = ["model.pt", "weights/model.safetensors", "x.pth"]
    ignored = subprocess.run(["git", "check-ignore", *names], cwd=ROOT, capture_output=True, text=True)
    assert ignored.stdout.split() == names
