"""The codec must never pull in torch (gateway and synthetic workers import it)."""

from __future__ import annotations

import subprocess
import sys


def test_codec_does_not_import_torch() -> None:
    code = "import depthserve.codec, sys; assert 'torch' not in sys.modules, 'torch imported'"
    result = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
