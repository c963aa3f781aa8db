"""Where downloaded checkpoints live, and how a `--checkpoint` argument becomes a file."""

from __future__ import annotations

import re
from pathlib import Path

from depthserve.settings import WeightsSettings, load_settings

CHECKPOINT_FILENAME = "model.pt"  # the file the reference `from_pretrained` fetches from a repo
CHECKPOINT_SUFFIXES = (".pt", ".pth", ".safetensors")
# Hugging Face repo ids: owner/name of letters, digits, '.', '_', '-'; no '..', so never a path escape.
_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")


class WeightsError(Exception):
    """A checkpoint could not be found in the cache or downloaded into it."""


def is_repo_id(text: str) -> bool:
    """Whether `text` names a hub repo (owner/name) rather than a file."""
    return bool(_REPO_ID.fullmatch(text)) and ".." not in text and not text.lower().endswith(CHECKPOINT_SUFFIXES)


def repo_dir(repo_id: str, cache_dir: Path) -> Path:
    """The cache folder of one repo: `{cache_dir}/{owner}--{name}`."""
    if not is_repo_id(repo_id):
        raise WeightsError(f"{repo_id!r} is not a Hugging Face repo id (owner/name)")
    return cache_dir / repo_id.replace("/", "--")


def cached_checkpoint(repo_id: str, cache_dir: Path | None = None) -> Path:
    """Return the downloaded checkpoint of a repo, or say which command fetches it."""
    cache_dir = load_settings(WeightsSettings).cache_dir if cache_dir is None else cache_dir
    path = repo_dir(repo_id, cache_dir) / CHECKPOINT_FILENAME
    if not path.is_file():
        raise WeightsError(
            f"{repo_id} is not downloaded (looked for {path}); fetch it with: depthserve weights download {repo_id}"
        )
    return path


def resolve_checkpoint(text: str, cwd: Path | None = None) -> str:
    """Turn a `--checkpoint` argument into an absolute path, resolved from `cwd`, or keep a repo id.

    A name that exists as a file or folder is a path even if it looks like owner/name, and
    anything else that is not a repo id becomes absolute too, so errors show where it was sought.
    """
    path = Path(text).expanduser()
    if not path.is_absolute():
        path = (cwd or Path.cwd()) / path
    if path.exists() or not is_repo_id(text):
        return str(path.resolve())
    return text


def locate_checkpoint(text: str, cwd: Path | None = None) -> Path:
    """Return the file a `--checkpoint` argument names, or fail with the absolute path that was sought."""
    resolved = resolve_checkpoint(text, cwd)
    if is_repo_id(resolved):
        return cached_checkpoint(resolved)
    path = Path(resolved)
    if not path.exists():
        raise WeightsError(f"no checkpoint at {path}")
    return path
