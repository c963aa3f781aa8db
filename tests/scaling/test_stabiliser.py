"""The stabiliser: up at once, down only after a quiet window, on an explicit clock."""

from __future__ import annotations

import pytest

from depthserve.scaling import Stabiliser


def test_scales_up_at_once_and_down_after_the_quiet_window() -> None:
    stabiliser = Stabiliser(down_window_s=30.0)
    assert stabiliser.update(1, current=1, now=0.0) == 1
    assert stabiliser.update(4, current=1, now=1.0) == 4  # burst: at once
    assert stabiliser.update(1, current=4, now=2.0) == 4  # burst over, but 4 was wanted 1 s ago
    assert stabiliser.update(1, current=4, now=30.9) == 4
    assert stabiliser.update(1, current=4, now=31.1) == 1  # 30 s without anyone wanting 4


def test_a_short_blip_inside_the_window_restarts_it() -> None:
    stabiliser = Stabiliser(down_window_s=10.0)
    stabiliser.update(3, current=3, now=0.0)
    stabiliser.update(1, current=3, now=5.0)
    stabiliser.update(2, current=3, now=9.0)
    assert stabiliser.update(1, current=3, now=10.5) == 2  # 3 left the window, 2 (at 9 s) has not
    assert stabiliser.update(1, current=2, now=19.5) == 1


def test_first_update_does_not_shrink_a_running_pool() -> None:
    stabiliser = Stabiliser(down_window_s=10.0)
    assert stabiliser.update(1, current=4, now=100.0) == 4  # a restarted gateway waits its own window
    assert stabiliser.update(1, current=4, now=110.5) == 1


def test_up_window_needs_a_sustained_rise() -> None:
    stabiliser = Stabiliser(down_window_s=0.0, up_window_s=3.0)
    stabiliser.update(1, current=1, now=0.0)
    assert stabiliser.update(5, current=1, now=1.0) == 1  # 1 was still wanted within 3 s
    assert stabiliser.update(5, current=1, now=3.5) == 5


def test_clock_must_not_go_back() -> None:
    stabiliser = Stabiliser()
    stabiliser.update(1, current=1, now=5.0)
    with pytest.raises(ValueError):
        stabiliser.update(1, current=1, now=4.0)
