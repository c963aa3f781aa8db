"""Token-budget arithmetic, and that the grid module and package import without torch."""

from __future__ import annotations

import subprocess
import sys

import pytest

from depthserve.model.errors import ModelInputError
from depthserve.model.grid import grid_for, num_tokens_for, token_grid, vit_input_size


def test_reference_example_640x480() -> None:
    assert num_tokens_for(9, (1200, 3600)) == 3600
    assert token_grid(480, 640, 3600) == (52, 69)
    assert vit_input_size(52, 69) == (728, 966)
    assert grid_for(480, 640, 0) == (30, 40)


def test_levels_interpolate_the_range() -> None:
    assert [num_tokens_for(level, (16, 256)) for level in (0, 1, 9)] == [16, 42, 256]
    assert num_tokens_for(5) == int(1200 + 5 / 9 * 2400)


def test_portrait_swaps_rows_and_cols() -> None:
    assert token_grid(640, 480, 3600) == (69, 52)


def test_degenerate_aspect_keeps_one_row() -> None:
    assert token_grid(1, 10_000, 16) == (1, 400)


@pytest.mark.parametrize("level", [-1, 10, 2.5, True])
def test_bad_level_is_a_typed_error(level: object) -> None:
    with pytest.raises(ModelInputError):
        num_tokens_for(level)  # type: ignore[arg-type]


@pytest.mark.parametrize("module", ["depthserve.model.grid", "depthserve.model"])
def test_import_does_not_load_torch(module: str) -> None:
    code = f"import sys, {module}; sys.exit(1 if 'torch' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_num_tokens_is_bounded_by_the_models_range() -> None:
    from depthserve.model.grid import check_num_tokens

    check_num_tokens(1200)
    check_num_tokens(3600)
    check_num_tokens(16, (16, 256))
    for bad in (100_000, 3601, 1199, 0, True):
        with pytest.raises(ModelInputError, match="between 1200 and 3600 \\(this model's range\\)"):
            check_num_tokens(bad)  # type: ignore[arg-type]
