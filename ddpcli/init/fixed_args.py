"""Arguments given after `--` (`ddpcli init train.py -- 2 1 --model_name_or_path tiny`): the values a script
requires (positionals, required options) and the user's own choices, kept in `[defaults] args`.

A value given for a flag that init wires is the baseline's value instead (`-- --max_iters=20`), so it is not
repeated as a fixed argument. Without a required positional or option init refuses, naming each and the `--`
form: a file whose every run fails with "the following arguments are required" helps no one.
"""

from __future__ import annotations

from dataclasses import dataclass

from ddpcli.errors import UserError
from ddpcli.init.help_text import HelpOption, with_default


@dataclass(frozen=True)
class Segment:
    """One argument as given: a flag with its value (`--lr 0.1`, `--lr=0.1`), a bare flag, or a positional."""

    tokens: tuple[str, ...]
    flag: str | None = None
    value: str | None = None


def split_fixed(fixed: tuple[str, ...], options: list[HelpOption]) -> list[Segment]:
    """The tokens grouped as the script's parser would read them (a flag that takes a value takes the next)."""
    by_flag = {flag: option for option in options for flag in option.flags}
    segments: list[Segment] = []
    index = 0
    while index < len(fixed):
        token = fixed[index]
        if token.startswith("-") and len(token) > 1 and not _is_number(token):
            flag, equals, value = token.partition("=")
            option = by_flag.get(flag)
            if equals:
                segments.append(Segment((token,), flag, value))
            elif option is not None and option.takes_value and index + 1 < len(fixed):
                segments.append(Segment((token, fixed[index + 1]), flag, fixed[index + 1]))
                index += 1
            else:
                segments.append(Segment((token,), flag))
        else:
            segments.append(Segment((token,)))
        index += 1
    return segments


def with_given_values(options: list[HelpOption], segments: list[Segment]) -> list[HelpOption]:
    """Options whose default is the value given after `--` (the baseline's value when init wires the flag)."""
    given = {segment.flag: segment.value for segment in segments if segment.flag and segment.value is not None}
    return [
        with_default(option, next(given[flag] for flag in option.flags if flag in given))
        if any(flag in given for flag in option.flags)
        else option
        for option in options
    ]


def check_required(options: list[HelpOption], segments: list[Segment], target: str) -> None:
    """Refuse, in one line, when a required positional or option is not among the fixed arguments."""
    given_flags = {segment.flag for segment in segments if segment.flag}
    positionals = sum(1 for segment in segments if segment.flag is None)
    missing: list[str] = []
    example: list[str] = []
    for option in options:
        if not option.required:
            continue
        if option.positional:
            count = int(option.nargs) if option.nargs.isdigit() else 1
            if positionals >= count:
                positionals -= count
                continue
            positionals = 0
            missing.append(f"{option.name} (positional)")
            example += [option.name.upper()] * count
        elif not given_flags & set(option.flags):
            flag = next((flag for flag in option.flags if flag.startswith("--")), option.flags[0])
            missing.append(flag)
            example += [flag, option.name.upper() or "VALUE"] if option.takes_value else [flag]
    if missing:
        raise UserError(
            f"{target} requires {', '.join(missing)}: give fixed values after --, e.g. "
            f"`ddpcli init {target} -- {' '.join(example)}`"
        )


def unwired(segments: list[Segment], wired_flags: set[str]) -> list[str]:
    """The fixed tokens, less those of flags init wires (their value became the baseline's)."""
    return [token for segment in segments if segment.flag not in wired_flags for token in segment.tokens]


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True
