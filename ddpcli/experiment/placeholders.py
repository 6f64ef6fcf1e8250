"""`{placeholders}` in a run's `args`: what they may name, how they are filled, and the check `plan` makes so that it
finds what `launch` would refuse. A rule of the experiment file (docs/contracts.md: RUN keys and run_dir, alone
or in arithmetic, ddpcli.arithmetic), so it lives with it: planning checks, launch fills. Pure.
"""

from __future__ import annotations

import os
import re
import string
from collections.abc import Sequence
from pathlib import Path

from ddpcli.arithmetic import ExpressionError, evaluate, is_expression
from ddpcli.errors import ConfigError
from ddpcli.experiment.resolved import ResolvedRun

MAX_SPEC_DIGITS = 3  # widths and precisions in `{lr:.2f}` up to 999


def placeholder_values(run: ResolvedRun, run_dir: Path) -> dict[str, object]:
    """Every scalar key of the plan's RUN object, plus run_dir: what `{placeholders}` in `args` may name. `notes`
    is prose for people, not a value for a command line."""
    return {**{key: value for key, value in run.plan.as_json().items() if key != "notes"}, "run_dir": str(run_dir)}


def check_placeholders(run: ResolvedRun, path: Path | str, where: str) -> None:
    """Fill the run's args with a stand-in run directory, so that `plan` finds what `launch` would refuse. A mistake
    is named by the field the file holds it in (`defaults.extra_args[0]`), not by its place in the merged args."""
    fields = run.arg_fields or tuple(f"{where}.args[{index}]" for index in range(len(run.launch.args)))
    fill_placeholders(run.launch.args, placeholder_values(run, Path("RUN_DIR")), str(path), fields)


def fill_placeholders(
    args: list[str], values: dict[str, object], where: str, fields: Sequence[str] | None = None
) -> list[str]:
    """`{total_steps}` -> "128", `{lr:.2f}` -> "0.20" (Python format specs). Unknown or empty placeholders are
    errors that name the run and the argument (`fields[i]` names args[i], by default `args[i]`)."""
    if fields is None or len(fields) != len(args):
        fields = [f"args[{index}]" for index in range(len(args))]
    return [_fill_one(arg, values, where, field) for arg, field in zip(args, fields, strict=True)]


def _fill_one(arg: str, values: dict[str, object], where: str, field: str) -> str:
    try:
        pieces = list(string.Formatter().parse(arg))
    except ValueError as error:  # a stray "{" or "}": say so instead of a traceback
        raise ConfigError(where, field, f"{arg!r}: {error} (write {{{{ or }}}} for a brace)") from None
    filled = []
    for literal, key, spec, conversion in pieces:
        filled.append(literal)
        if key is None:
            continue
        if conversion:
            raise ConfigError(
                where, field, f"{{{key}!{conversion}}}: conversions are not supported (a format spec is: {{{key}:.2f}})"
            )
        filled.append(_formatted(_placeholder_value(key, values, where, field), spec or "", f"{{{key}:{spec}}}",
                                 where, field))  # fmt: skip
    return "".join(filled)


def _placeholder_value(key: str, values: dict[str, object], where: str, field: str) -> object:
    """A run key's value, or arithmetic over the run's numeric keys (`{grad_accum_steps * world_size}`)."""
    if is_expression(key):
        try:
            return evaluate(key, values)
        except ExpressionError as error:
            raise ConfigError(where, field, f"{{{key}}}: {error}") from None
    if key not in values:
        known = ", ".join(sorted(values))
        raise ConfigError(where, field, f"unknown placeholder {{{key}}}; known: {known}")
    if values[key] is None:
        raise ConfigError(where, field, f"placeholder {{{key}}} has no value for this run")
    return values[key]


def _formatted(value: object, spec: str, written: str, where: str, field: str) -> str:
    if not spec:
        return _as_arg(value)
    # A nested "{width}" is not filled, and a width of 10**9 would build a gigabyte-long argument.
    if "{" in spec or any(len(digits) > MAX_SPEC_DIGITS for digits in re.findall(r"[0-9]+", spec)):
        raise ConfigError(
            where, field, f"{written}: nested placeholders and widths or precisions over 999 are not supported"
        )
    try:
        text = format(_as_arg(value) if isinstance(value, bool) else value, spec)
    except (ValueError, OverflowError) as error:  # `{total_steps * 300000:c}`: no such character
        raise ConfigError(where, field, f"{written}: {error}") from None
    return _argument(text, written, where, field)


def _argument(text: str, written: str, where: str, field: str) -> str:
    """`text`, once it is known to fit in an argv: `{seed:c}` of seed 0 is a NUL byte, which ends a C string, and
    `{n:c}` of a surrogate (55296-57343) has no bytes in the file system's encoding."""
    if "\0" in text:
        raise ConfigError(where, field, f"{written}: gives a NUL byte, which no command-line argument can hold")
    try:
        os.fsencode(text)
    except UnicodeEncodeError:
        raise ConfigError(where, field, f"{written}: gives {text!r}, which cannot be a command-line argument") from None
    return text


def _as_arg(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return repr(value)  # full precision: "0.2", not a rounded %g
    return str(value)
