"""Say in one line why torch.load refused a file, without passing on its advice to load unsafely."""

from __future__ import annotations

import re
from pathlib import Path

_BLOCKED_GLOBAL = re.compile(r"[Uu]nsupported (?:global: )?GLOBAL ([\w.]+)")
_ZIP_MAGIC, _PICKLE_MAGIC = b"PK\x03\x04", b"\x80"


def why_unreadable(path: Path, exc: BaseException) -> str:
    """Explain a failed weights-only torch.load of `path` for a person deciding what to do next."""
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            head = handle.read(64)
    except OSError as error:
        return f"cannot read it ({error.strerror})"
    if size == 0:
        return "the file is empty"
    text = str(exc)
    blocked = _BLOCKED_GLOBAL.search(text)
    if blocked:
        # Never suggest weights_only=False: unpickling arbitrary objects can run code from the file.
        return f"it holds Python objects ({blocked.group(1)}), not only tensors; depthserve does not unpickle code"
    if head.lstrip().startswith(b"<"):
        return f"it is an HTML or XML page of {size} bytes, not a checkpoint (a failed download?)"
    if head.startswith(_ZIP_MAGIC):
        return f"the archive is truncated or corrupt ({size} bytes; an interrupted download?)"
    if not head.startswith(_PICKLE_MAGIC):
        return f"it is not a torch checkpoint ({size} bytes, starting {head[:8]!r})"
    first = next((line for line in text.splitlines() if line.strip() and "weights_only" not in line), "")
    return f"unreadable pickle data ({size} bytes){': ' + first.strip() if first else ''}"
