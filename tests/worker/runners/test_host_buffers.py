"""Host buffers are handed out again by shape and type, and idle ones beyond the bound are freed oldest first."""

from __future__ import annotations

import torch

from depthserve.worker.runners.host_buffers import HostBuffers


def test_a_returned_buffer_is_reused_for_the_same_shape_and_type_only() -> None:
    pool = HostBuffers(pin=False)
    first = pool.take((4, 8), torch.float32)
    pool.give(first)
    assert pool.take((4, 8), torch.float32) is first
    pool.give(first)
    other = pool.take((4, 8), torch.uint8)
    assert other is not first and other.dtype == torch.uint8 and pool.allocated == 2
    assert pool.take((8, 4), torch.float32) is not first  # same bytes, other shape: a new buffer


def test_idle_buffers_beyond_the_bound_are_freed_oldest_first() -> None:
    pool = HostBuffers(pin=False, max_idle_bytes=3 * 1024)
    buffers = [pool.take((256,), torch.float32) for _ in range(4)]  # 1 KiB each
    pool.give(*buffers)
    assert pool.idle_bytes == 3 * 1024
    kept = [pool.take((256,), torch.float32) for _ in range(3)]
    assert {id(b) for b in kept} == {id(b) for b in buffers[1:]}  # the oldest went
    assert pool.idle_bytes == 0
