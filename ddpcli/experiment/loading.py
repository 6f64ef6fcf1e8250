"""Reading an experiment file into its models (ddpcli.experiment.schema), with errors a user can act on: one line
naming the file, the field path (`experiments[1].global_batch_size`) and what was expected, with a suggestion for
an unknown key."""

from __future__ import annotations

import difflib
import json
import re
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from ddpcli.errors import ConfigError
from ddpcli.experiment.schema import Cluster, Defaults, ExperimentFile, RunEntry

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib


def load_experiment_file(path: Path) -> ExperimentFile:
    """Read and validate an experiment file, raising ConfigError with the file and field path."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            path,
            None,
            "no such file; write one with `ddpcli init SCRIPT` (from your training script) "
            "or `ddpcli init --example` (the bundled example)",
        ) from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(path, None, f"cannot read it: {error}") from None
    return parse_experiment_text(text, path)


def parse_experiment_text(text: str, path: Path) -> ExperimentFile:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(path, None, f"invalid TOML: {error}") from None
    return validate_experiment_data(data, path)


def validate_experiment_data(data: dict[str, Any], path: Path) -> ExperimentFile:
    try:
        experiment_file = ExperimentFile.model_validate(data)
    except ValidationError as error:
        raise _config_error(path, data, error) from None
    _check_unique_names(experiment_file, path)
    return experiment_file


def _check_unique_names(experiment_file: ExperimentFile, path: Path) -> None:
    """Names become directories and `--only` selects by them: two runs may not share one."""
    seen = {experiment_file.baseline.name: "baseline"}
    for index, entry in enumerate(experiment_file.experiments):
        where = f"experiments[{index}].name"
        if entry.name in seen:
            raise ConfigError(path, where, f"duplicate run name {entry.name!r} (also {seen[entry.name]}'s name)")
        seen[entry.name] = where


def _config_error(path: Path, data: dict[str, Any], error: ValidationError) -> ConfigError:
    """Turn pydantic's first error into one message: field path, what was wrong, what was expected."""
    detail = error.errors(include_url=False)[0]
    location = tuple(part for part in detail["loc"] if not _is_union_tag(part))
    field_path = format_field_path(location)
    kind = detail["type"]
    if kind == "extra_forbidden":
        return ConfigError(path, field_path, _unknown_key_message(location))
    if kind == "missing":
        return ConfigError(path, field_path, "is required but missing")
    message = detail["msg"].removeprefix("Value error, ")
    if kind not in {"value_error", "assertion_error"}:
        message = f"{message} (got {_lookup(data, location)!r})"
    return ConfigError(path, field_path or _model_level_path(detail["loc"]), message)


def _is_union_tag(part: Any) -> bool:
    # pydantic puts the tried union member into the location: ("nnodes", "int") or ("noise_scale", "bool").
    return isinstance(part, str) and (part in {"int", "str", "bool", "float"} or part.startswith("constrained-"))


def _model_level_path(loc: tuple[Any, ...]) -> str | None:
    return format_field_path(loc) or None


PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+")


def format_field_path(location: tuple[Any, ...]) -> str:
    """("experiments", 1, "lr") -> "experiments[1].lr"; a key that is not a bare TOML key is quoted, so that a
    newline or a blank in a key cannot break the one-line message: ("baseline", "env", "A=B") ->
    'baseline.env."A=B"'. pydantic's "[key]" marker (the key itself is wrong) is dropped: the path ends at it."""
    text = ""
    for part in location:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part == "[key]":
            continue
        else:
            key = str(part) if PLAIN_KEY.fullmatch(str(part)) else json.dumps(str(part), allow_nan=False)
            text += f".{key}" if text else key
    return text


def _lookup(data: Any, location: tuple[Any, ...]) -> Any:
    for part in location:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return None
    return data


def _unknown_key_message(location: tuple[Any, ...]) -> str:
    key = str(location[-1])
    allowed = _allowed_keys(location[:-1])
    message = "is not a known key"
    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    if close:
        message += f"; did you mean {close[0]!r}?"
    elif allowed:
        message += f"; allowed here: {', '.join(sorted(allowed))}"
    return message


def _allowed_keys(parent: tuple[Any, ...]) -> list[str]:
    model: type[BaseModel] = ExperimentFile
    for part in parent:
        if isinstance(part, int):
            continue
        annotation = model.model_fields[part].annotation
        model = {"defaults": Defaults, "baseline": RunEntry, "experiments": RunEntry, "cluster": Cluster}.get(
            part, annotation if isinstance(annotation, type) else model
        )
    return list(model.model_fields)
