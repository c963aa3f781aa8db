"""Options generated from the settings: every field has a flag, its help and default come from the field."""

from __future__ import annotations

from typing import Any

import pytest
import typer
from typer.core import TyperOption
from typer.testing import CliRunner

from depthserve.cli import app
from depthserve.cli_settings import parsed_flags
from depthserve.settings import GatewaySettings, WorkerSettings

COMMANDS = {"worker": (WorkerSettings, set()), "gateway": (GatewaySettings, {"config_file"})}


def options_of(name: str) -> dict[str, Any]:
    group: Any = typer.main.get_command(app)
    command = group.commands[name]
    return {p.name: p for p in command.params if isinstance(p, TyperOption) and p.name}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_setting_has_a_flag_with_the_fields_help_and_default(name: str) -> None:
    model, skipped = COMMANDS[name]
    options = options_of(name)
    assert set(options) - {"config"} == set(model.model_fields) - skipped
    for field_name, field in model.model_fields.items():
        if field_name in skipped:
            continue
        option = options[field_name]
        assert option.opts[0] == "--" + field_name.replace("_", "-")
        assert option.help is not None and (field.description or "")[:20] in option.help.replace("\\", "")
        assert option.default is None  # unset flags leave the environment and the config file in force


def test_defaults_show_in_help_once_from_the_field() -> None:
    help_text = CliRunner().invoke(app, ["gateway", "--help"], env={"COLUMNS": "200"}).output
    assert "load-balancing policy for models without their own [round_robin]" in help_text
    assert "[256]" in help_text and "--max-in-flight" in help_text


def test_lists_split_on_commas_and_mappings_read_json() -> None:
    flags = parsed_flags(
        GatewaySettings, {"backends": "a:1, b:2", "policy_options": '{"choice_count": 3}', "max_queue": 4}
    )
    assert flags == {"backends": ["a:1", "b:2"], "policy_options": {"choice_count": 3}, "max_queue": 4}
    assert parsed_flags(WorkerSettings, {"warmup_levels": "0,9"}) == {"warmup_levels": ["0", "9"]}
    with pytest.raises(typer.BadParameter, match="not JSON"):
        parsed_flags(GatewaySettings, {"model_limits": "{not json"})


def test_a_bad_value_is_one_usage_line_naming_the_flag_not_a_traceback() -> None:
    result = CliRunner().invoke(app, ["worker", "--model", "resnet"], env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert "--model: Input should be 'tiny', 'vitl14' or 'synthetic'" in result.output
    assert "Traceback" not in result.output
    result = CliRunner().invoke(app, ["gateway", "--backends", "a:1", "--max-queue", "-3"], env={"COLUMNS": "200"})
    assert result.exit_code == 2 and "--max-queue: Input should be greater than or equal to 0" in result.output
