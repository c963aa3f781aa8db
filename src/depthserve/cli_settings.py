"""Command-line options generated from the settings models, so every setting has a flag and one default.

A field `max_body_mb: float = Field(32.0, description="...")` becomes `--max-body-mb FLOAT` with that
description and `[32]` as help; booleans become `--x/--no-x`, lists take comma-separated values and
mappings take JSON. A flag left out is None, so the environment and the `--config` file still apply
beneath the flags given (settings.load_settings).
"""

from __future__ import annotations

import inspect
import json
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from rich.markup import escape

_SCALARS = (bool, int, float, str, Path)


def _unwrapped(annotation: Any) -> Any:
    """The field's type without `| None`."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _kind(annotation: Any) -> tuple[type, str]:
    """The type the flag is parsed as, and how its text becomes the field's value: as is, list or JSON."""
    inner = _unwrapped(annotation)
    origin = typing.get_origin(inner)
    if inner in _SCALARS:
        return inner, "plain"
    if origin is Literal:
        return str, "plain"
    if origin in (list, tuple):
        return str, "list"
    return str, "json"  # dicts and nested models


def _default_text(field: FieldInfo) -> str:
    """The default as help shows it, `[..]`; an unset default says so, a bracket in the description wins."""
    description = field.description or ""
    if description.rstrip().endswith("]"):
        return ""
    default = field.default if field.default_factory is None else field.get_default(call_default_factory=True)
    if default is PydanticUndefined or default is None:
        return " [unset]"
    if isinstance(default, bool):
        return ""  # the flag pair shows it
    if isinstance(default, list | tuple):
        return f" [{','.join(map(str, default))}]" if default else ""
    if isinstance(default, dict):
        return ""
    if isinstance(default, float) and default.is_integer():
        default = int(default)
    return f" [{default}]"


def _help(field: FieldInfo, how: str) -> str:
    choices = ""
    inner = _unwrapped(field.annotation)
    if typing.get_origin(inner) is Literal:
        choices = f" ({' | '.join(map(str, typing.get_args(inner)))})"
    shape = {"list": " (comma-separated)", "json": " (JSON)"}.get(how, "")
    return escape(f"{field.description or ''}{choices}{shape}{_default_text(field)}".strip())  # [x] is not markup


PANELS = {"LogFields": "Logging", "JobFields": "Async jobs"}  # shared field groups, by the class declaring them


def _declared_by(model: type[BaseModel]) -> dict[str, str]:
    """Each field's help panel: the model's own fields first ("Options"), then each shared group's."""
    owners: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        for name in getattr(cls, "__annotations__", {}):
            if name in model.model_fields:
                shared = PANELS.get(cls.__name__, cls.__name__.removesuffix("Fields"))
                owners[name] = "Options" if cls is model else shared
    return dict(sorted(owners.items(), key=lambda item: item[1] != "Options"))  # stable: own fields first


def option_parameters(model: type[BaseModel], skip: Iterable[str] = ()) -> list[inspect.Parameter]:
    """One keyword parameter per settings field (but `skip`), annotated as a typer option defaulting to None."""
    skipped = set(skip)
    parameters = []
    for name, panel in _declared_by(model).items():
        field = model.model_fields[name]
        if name in skipped:
            continue
        kind, how = _kind(field.annotation)
        flag = "--" + name.replace("_", "-")
        # A switch that is off by default is turned on by its name alone; one that is on gets --no-NAME.
        decls = [f"{flag}/--no-{name.replace('_', '-')}"] if kind is bool and field.default is True else [flag]
        option = typer.Option(*decls, help=_help(field, how), show_default=False, rich_help_panel=panel)
        annotation = Annotated[kind | None, option]  # type: ignore[valid-type]
        parameters.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation))
    return parameters


def with_settings_options(
    model: type[BaseModel], skip: Iterable[str] = ()
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a command one option per field of `model`, after its own parameters; it receives them as **flags."""

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        own = [p for p in inspect.signature(command).parameters.values() if p.kind is not p.VAR_KEYWORD]
        taken = {p.name for p in own}
        generated = [p for p in option_parameters(model, skip) if p.name not in taken]
        command.__signature__ = inspect.Signature([*own, *generated])  # type: ignore[attr-defined]
        return command

    return decorate


def parsed_flags(model: type[BaseModel], flags: Mapping[str, Any]) -> dict[str, Any]:
    """The flags given (not None), lists split on commas and mappings read as JSON; a bad JSON is a usage error."""
    values: dict[str, Any] = {}
    for name, value in flags.items():
        field = model.model_fields.get(name)
        if value is None or field is None or not isinstance(value, str):
            values[name] = value
            continue
        how = _kind(field.annotation)[1]
        if how == "list":
            values[name] = [item.strip() for item in value.split(",") if item.strip()]
        elif how == "json":
            try:
                values[name] = json.loads(value)
            except json.JSONDecodeError as exc:
                raise typer.BadParameter(f"not JSON: {exc}", param_hint="--" + name.replace("_", "-")) from None
        else:
            values[name] = value
    return values


def usage_error(error: ValidationError) -> typer.BadParameter:
    """A settings validation error as one line per bad value, naming the flag (or file key) it came from."""
    lines = []
    for problem in error.errors():
        loc = [str(part) for part in problem["loc"]]
        flag = "--" + loc[0].replace("_", "-") if loc else "settings"
        inner = f" ({'.'.join(loc)})" if len(loc) > 1 else ""  # where inside a mapping from the file or JSON
        lines.append(f"{flag}{inner}: {problem['msg']}")
    return typer.BadParameter("; ".join(lines))
