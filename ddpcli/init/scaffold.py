# Over 300 lines on purpose, for now: help parsing, flag recognition, wiring and TOML rendering are one pipeline
# read top to bottom. The split when it grows: scaffold/help.py (parse_help, find_flags), scaffold/wiring.py (the
# _wire_* steps and the runs), scaffold/toml.py (header, tables, toml_value). See tests/test_init.py.
"""`ddpcli init`: from a training script's `--help` text to a commented experiment file that runs.

Pure on purpose (no subprocess, torch, rich or typer): parse the help text into options, recognise the usual
spellings of the hyper-parameters ddpcli plans (per-device batch, accumulation, lr, warmup, steps, epochs, seed,
...), choose the runs, and render TOML text. `ddpcli.init.script_help` runs the script; the command writes the file.

A flag is wired to its `{placeholder}` only when the baseline's value for it is known (given by the user or shown
as the script's default): passing a made-up value would silently change what the script does. Each flag that
is missing or cannot be wired is said once, in the file's header and on stderr.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from ddpcli.errors import UserError

# Used only when the script has no such flag: ddpcli's plan needs a number, the script never sees it.
NOMINAL_BATCH = 32
NOMINAL_LR = 0.001

_BOX = str.maketrans({char: " " for char in "│┃╭╮╰╯─━┌┐└┘|"})
# Options are indented (argparse, click and typer all indent them); a description wrapped so that a quoted command
# line starts a line with a flag at column 0 is not an option.
_OPTION_START = re.compile(r"^(\s{1,12})(-{1,2}[A-Za-z0-9])")
_FLAG = re.compile(r"(?<![\w-])(-{1,2}[A-Za-z0-9][\w.-]*)")
_DEFAULT = re.compile(r"\(default:\s*(.*?)\)|\[default:\s*(.*?)\]")
MODULE_NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


@dataclass(frozen=True)
class HelpOption:
    """One option of a --help text: its flags, whether it takes a value, the default it shows (if any)."""

    flags: tuple[str, ...]
    takes_value: bool
    default: str | None
    help: str


@dataclass(frozen=True)
class Role:
    """A hyper-parameter ddpcli knows, the spellings scripts use for it (normalised: lower case, '_')."""

    key: str
    placeholder: str | None
    names: tuple[str, ...]
    missing: str


ROLES = (
    Role("per_device_batch_size", "per_device_batch_size",
         ("per_device_batch_size", "per_device_train_batch_size", "batch_size", "bs", "per_gpu_train_batch_size",
          "train_batch_size", "micro_batch_size", "local_batch_size", "batch", "batchsize", "mbs",
          "train_micro_batch_size_per_gpu"),
         "no batch-size flag found: the runs will use the script's own batch; the observer will show it"),
    Role("grad_accum_steps", "grad_accum_steps",
         ("grad_accum_steps", "gradient_accumulation_steps", "grad_accum", "gradient_accumulation", "accum_steps",
          "accumulation_steps", "accumulate_grad_batches", "grad_accumulation_steps", "grad_acc_steps", "grad_acc",
          "accum", "accumulate"),
         "no gradient-accumulation flag found: runs that keep the global batch can only shrink the per-device batch"),
    Role("lr", "lr",
         ("lr", "learning_rate", "base_lr", "peak_lr", "max_lr", "learningrate"),
         "no learning-rate flag found: the runs will use the script's own lr, not the scaled one; the observer "
         "will show it"),
    Role("warmup_steps", "warmup_steps",
         ("warmup_steps", "warmup", "num_warmup_steps", "lr_warmup_steps", "warmup_iters", "n_warmup_steps"),
         "no warmup flag found: the runs will use the script's own warmup, not the rescaled one"),
    Role("max_steps", "total_steps",
         ("max_steps", "steps", "total_steps", "num_steps", "train_steps", "num_train_steps", "max_train_steps",
          "iterations", "iters", "max_iters", "num_iterations", "max_iterations", "n_steps", "training_steps"),
         "no steps or epochs flag found: every run trains as long as the script decides"),
    Role("epochs", "epochs",
         ("epochs", "num_epochs", "num_train_epochs", "n_epochs", "max_epochs", "train_epochs", "epoch", "nepochs"),
         ""),
    Role("dataset_size", "dataset_size",
         ("dataset_size", "num_samples", "n_samples", "train_size", "num_train_samples", "train_samples",
          "dataset_len"),
         ""),
    Role("seed", "seed", ("seed", "random_seed", "manual_seed", "rng_seed"),
         "no seed flag found: the runs use the script's own seeding"),
    Role("run_dir", "run_dir",
         ("output_dir", "out_dir", "outdir", "output", "save_dir", "checkpoint_dir", "ckpt_dir", "run_dir",
          "output_path", "logdir", "log_dir"),
         ""),
    Role("optimizer", None, ("optimizer", "optim", "opt"), ""),
)  # fmt: skip
ROLE_BY_KEY = {role.key: role for role in ROLES}


def parse_help(text: str) -> list[HelpOption]:
    """The options of an argparse, click or typer (plain or Rich-boxed) help text, in order.

    An option starts on a line whose first word is a flag; the lines indented deeper than it are its help. The
    default is what `(default: X)` (argparse) or `[default: X]` (click, typer) says, the last one in its help.
    """
    options: list[HelpOption] = []
    current: tuple[int, str, list[str]] | None = None
    for raw_line in text.translate(_BOX).splitlines():
        line = raw_line.rstrip()
        start = _OPTION_START.match(line)
        if start:
            if current:
                options.append(_option(current[1], current[2]))
            spec, _, rest = line.strip().partition("  ")
            current = (len(start[1]), spec, [rest.strip()])
        elif current and line.strip() and len(line) - len(line.lstrip()) > current[0]:
            current[2].append(line.strip())
        elif current:
            options.append(_option(current[1], current[2]))
            current = None
    if current:
        options.append(_option(current[1], current[2]))
    return options


def _option(spec: str, help_lines: list[str]) -> HelpOption:
    flags = tuple(_FLAG.findall(spec))
    words = [word for word in re.split(r"[\s,/]+", spec) if word and not _FLAG.fullmatch(word)]
    help_text = " ".join(part for part in help_lines if part)
    if not words and help_text:  # typer's Rich table puts the type after the flag's column gap
        first = help_text.split()[0]
        words = [first] if re.fullmatch(r"[A-Z][A-Z_]+|<\w+>", first) else []
    defaults = [plain or bracket for plain, bracket in _DEFAULT.findall(help_text)]
    default = defaults[-1].strip() if defaults else None
    return HelpOption(flags, bool(words), None if default in (None, "", "None") else default, help_text)


def normalise(flag: str) -> str:
    """`--Per-Device-Batch-Size` -> `per_device_batch_size`."""
    return flag.lstrip("-").lower().replace("-", "_").replace(".", "_")


@dataclass(frozen=True)
class FoundFlag:
    """A script option that plays a role: the flag to write in `args` and the default its help showed."""

    role: str
    flag: str
    default: str | None


def find_flags(options: list[HelpOption]) -> dict[str, FoundFlag]:
    """For each role, the option with its most usual spelling (earlier in Role.names wins); long flags only."""
    found: dict[str, tuple[int, FoundFlag]] = {}
    for option in options:
        long_flags = [flag for flag in option.flags if flag.startswith("--") and flag != "--help"]
        if not option.takes_value or not long_flags:
            continue
        names = {normalise(flag) for flag in long_flags}
        for role in ROLES:
            ranks = [role.names.index(name) for name in names if name in role.names]
            if ranks and (role.key not in found or min(ranks) < found[role.key][0]):
                found[role.key] = (min(ranks), FoundFlag(role.key, long_flags[0], option.default))
    return {key: flag for key, (_, flag) in found.items()}


@dataclass(frozen=True)
class InitRequest:
    """What the user asked for. `script` is written as given: relative to the experiment file's folder."""

    script: str | None
    module: str | None
    help_command: str
    per_device_batch_size: int | None = None
    lr: float | None = None
    world_sizes: tuple[int, ...] = (2, 4)


@dataclass
class Scaffold:
    """The experiment file's text and the lines to repeat on stderr."""

    text: str
    warnings: list[str] = field(default_factory=list)
    run_names: list[str] = field(default_factory=list)


@dataclass
class _Wiring:
    """Decisions about the script's flags: args pairs, [defaults] and [baseline] values, notes."""

    args: list[tuple[str, str, str]] = field(default_factory=list)  # flag, placeholder, comment
    defaults: list[tuple[str, object, str]] = field(default_factory=list)  # key, value, comment
    baseline: list[tuple[str, object, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    batch: int = NOMINAL_BATCH
    accum: int = 1
    batch_wired: bool = False
    accum_wired: bool = False
    not_run: bool = False


def parse_world_sizes(values: list[str]) -> tuple[int, ...]:
    """`["2,4", "8"]` -> (2, 4, 8): world sizes of 2 or more, in order, without repeats."""
    sizes: list[int] = []
    for value in values:
        for part in value.split(","):
            text = part.strip()
            if not text.isdigit() or int(text) < 2:
                raise UserError(
                    f"--nproc-per-node {value!r}: expected whole numbers of 2 or more, comma-separated "
                    "(the baseline is the 1-process run)"
                )
            if int(text) not in sizes:
                sizes.append(int(text))
    return tuple(sizes)


def default_world_sizes(gpus: int | None) -> tuple[int, ...]:
    """2 and 4, or, on a machine with 2 or more GPUs, the powers of two up to the GPU count and the count."""
    if gpus is None or gpus < 2:
        return (2, 4)
    sizes = [size for size in (2**power for power in range(1, gpus.bit_length())) if size <= gpus]
    return tuple(sizes if sizes[-1] == gpus else [*sizes, gpus])


def build_experiment(request: InitRequest, flags: dict[str, FoundFlag] | None) -> Scaffold:
    """The experiment file for `request`, given the flags found (None: the script parses no arguments)."""
    wiring = _wire(request, flags or {})
    wiring.not_run = flags is None
    if flags is None:
        wiring.warnings.insert(
            0,
            "the script mentions no argument parsing (argparse, click, typer, sys.argv, ...), so it was not run "
            "with --help (it would have trained): no flags are wired",
        )
    runs = _experiments(request, wiring)
    lines = _header(request, wiring)
    lines += _defaults_table(request, wiring)
    baseline_name = run_name(1, wiring.batch, wiring.accum)
    lines += ["", "[baseline]                    # the run that worked on one device",
              f"name = {toml_string(baseline_name)}", "nproc_per_node = 1"]  # fmt: skip
    lines += [_assignment(key, value, comment) for key, value, comment in wiring.baseline]
    names = [baseline_name]
    for entry, comment in runs:
        lines += ["", "[[experiments]]", f"name = {toml_string(entry['name'])}  # {_comment(comment)}"]
        lines += [_assignment(key, value, "") for key, value in entry.items() if key != "name"]
        names.append(str(entry["name"]))
    return Scaffold("\n".join(lines) + "\n", wiring.warnings, names)


def _wire(request: InitRequest, flags: dict[str, FoundFlag]) -> _Wiring:
    wiring = _Wiring()
    _wire_batch(request, flags, wiring)
    _wire_accum(flags, wiring)
    _wire_lr(request, flags, wiring)
    _wire_optional(flags, wiring)
    return wiring


def _wire_batch(request: InitRequest, flags: dict[str, FoundFlag], wiring: _Wiring) -> None:
    found = flags.get("per_device_batch_size")
    given = request.per_device_batch_size
    if found is None:
        wiring.batch = given or NOMINAL_BATCH
        wiring.warnings.append(ROLE_BY_KEY["per_device_batch_size"].missing)
        origin = "given with --per-device-batch-size" if given else "nominal"
        wiring.baseline.append(("per_device_batch_size", wiring.batch, f"{origin}: the script has no batch flag"))
        return
    default = _positive_int(found.default)
    if given is None and default is None:
        raise UserError(
            f"{request.help_command} shows no default for {found.flag}: give the one-device batch with "
            "--per-device-batch-size N"
        )
    wiring.batch = given or default or NOMINAL_BATCH
    wiring.batch_wired = True
    wiring.args.append((found.flag, "per_device_batch_size", "samples per process per micro-batch"))
    wiring.baseline.append(("per_device_batch_size", wiring.batch, _origin(found, given)))


def _wire_accum(flags: dict[str, FoundFlag], wiring: _Wiring) -> None:
    found = flags.get("grad_accum_steps")
    if found is None:
        wiring.warnings.append(ROLE_BY_KEY["grad_accum_steps"].missing)
        return
    default = _positive_int(found.default)
    if default is None:
        wiring.warnings.append(_no_default(found, "accumulation"))
        return
    wiring.accum, wiring.accum_wired = default, True
    wiring.args.append((found.flag, "grad_accum_steps", "micro-batches per optimizer step"))
    if default != 1:
        wiring.baseline.append(("grad_accum_steps", default, f"the script's {found.flag} default"))


def _wire_lr(request: InitRequest, flags: dict[str, FoundFlag], wiring: _Wiring) -> None:
    found = flags.get("lr")
    given = request.lr
    if found is None:
        wiring.warnings.append(ROLE_BY_KEY["lr"].missing)
        origin = "given with --lr" if given else "nominal"
        wiring.baseline.append(("lr", given or NOMINAL_LR, f"{origin}: the script has no learning-rate flag"))
        return
    default = _positive_float(found.default)
    if given is None and default is None:
        raise UserError(f"{request.help_command} shows no default for {found.flag}: give the one-device lr with --lr X")
    wiring.args.append((found.flag, "lr", "scaled with the global batch"))
    wiring.baseline.append(("lr", given or default, _origin(found, given)))


def _wire_optional(flags: dict[str, FoundFlag], wiring: _Wiring) -> None:
    """Warmup, length (steps, or epochs with a dataset size), seed, output directory and the optimizer's kind."""
    warmup = flags.get("warmup_steps")
    if warmup is None:
        wiring.warnings.append(ROLE_BY_KEY["warmup_steps"].missing)
    elif (steps := _non_negative_int(warmup.default)) is None:
        wiring.warnings.append(_no_default(warmup, "warmup"))
    else:
        wiring.args.append((warmup.flag, "warmup_steps", "rescaled to keep the baseline's warmup samples"))
        wiring.baseline.append(("warmup_steps", steps, f"the script's {warmup.flag} default"))
    _wire_length(flags, wiring)
    seed = flags.get("seed")
    if seed is None:
        wiring.warnings.append(ROLE_BY_KEY["seed"].missing)
    elif (value := _int(seed.default)) is None:
        wiring.warnings.append(_no_default(seed, "seed"))
    else:
        wiring.args.append((seed.flag, "seed", "the same on every rank"))
        wiring.defaults.append(("seed", value, f"the script's {seed.flag} default"))
    output = flags.get("run_dir")
    if output is not None:
        wiring.args.append((output.flag, "run_dir", "each run writes into its own run directory"))
    optimizer = flags.get("optimizer")
    kind = optimizer_kind(optimizer.default) if optimizer else None
    if kind is not None:
        wiring.defaults.append(("optimizer", kind, f"from the script's {optimizer.flag} default {optimizer.default}"))  # type: ignore[union-attr]
    else:
        wiring.defaults.append(("optimizer", "sgd", "assumed; adam or adamw make scaling = auto use sqrt"))
    wiring.defaults.append(("scaling", "auto", "sgd: lr x batch scale; adam(w): x its square root"))


def _wire_length(flags: dict[str, FoundFlag], wiring: _Wiring) -> None:
    """max_steps from a steps flag; else epochs, which ddpcli counts only with a dataset size."""
    steps, epochs, size = flags.get("max_steps"), flags.get("epochs"), flags.get("dataset_size")
    size_value = _positive_int(size.default) if size else None
    if size is not None and size_value is not None:
        wiring.args.append((size.flag, "dataset_size", "samples per epoch"))
        wiring.defaults.append(("dataset_size", size_value, f"the script's {size.flag} default"))
    if steps is not None and (max_steps := _positive_int(steps.default)) is not None:
        wiring.args.append((steps.flag, "total_steps", "the same for every run"))
        wiring.defaults.append(("max_steps", max_steps, f"the script's {steps.flag} default"))
        return
    epoch_count = _positive_int(epochs.default) if epochs else None
    if epochs is not None and epoch_count is not None and size_value is not None:
        wiring.args.append((epochs.flag, "epochs", "the same for every run"))
        wiring.defaults.append(("epochs", epoch_count, f"the script's {epochs.flag} default"))
        return
    if steps is None and epochs is None:
        wiring.warnings.append(ROLE_BY_KEY["max_steps"].missing)
        return
    reasons = [f"{steps.flag} shows no positive default"] if steps is not None else []
    if epochs is not None:
        why = "shows no whole default" if epoch_count is None else "needs a dataset size"
        reasons.append(f"{epochs.flag} {why}")
    wiring.warnings.append(
        f"steps not wired ({'; '.join(reasons)}, for ddpcli to count steps): every run trains as long as the "
        "script decides"
    )


def _experiments(request: InitRequest, wiring: _Wiring) -> list[tuple[dict[str, object], str]]:
    """For each world size: one run that keeps the per-device batch, one that keeps the global batch."""
    runs: list[tuple[dict[str, object], str]] = []
    global_batch = wiring.batch * wiring.accum
    for size in request.world_sizes:
        same: dict[str, object] = {"name": run_name(size, wiring.batch, wiring.accum), "nproc_per_node": size}
        if wiring.accum != 1:  # an experiment never inherits the baseline's accumulation: say it again
            same |= {"per_device_batch_size": wiring.batch, "grad_accum_steps": wiring.accum}
        runs.append((same, f"keeps the per-device batch {wiring.batch}: global {global_batch * size}, lr scaled"))
        split = keep_global_batch(global_batch, size, wiring.batch, wiring.accum, wiring.batch_wired,
                                  wiring.accum_wired)  # fmt: skip
        if split is None:
            wiring.warnings.append(
                f"no {size}-process run keeps the global batch {global_batch}: it does not split into {size} "
                "equal per-device batches the script's flags can set"
            )
            continue
        per_device, accum = split
        entry: dict[str, object] = {"name": run_name(size, per_device, accum), "nproc_per_node": size,
                                    "per_device_batch_size": per_device, "grad_accum_steps": accum}  # fmt: skip
        how = f"per-device {per_device}" + (f" x accumulation {accum}" if accum != 1 else "")
        runs.append((entry, f"keeps the global batch {global_batch}: {how}, same lr"))
    return runs


def keep_global_batch(
    global_batch: int, world_size: int, batch: int, accum: int, batch_wired: bool, accum_wired: bool
) -> tuple[int, int] | None:
    """(per-device batch, accumulation) that keep `global_batch` on `world_size` processes, changing only what
    the script's flags can change: the largest per-device batch up to the baseline's (less accumulation, same
    memory), or None."""
    per_rank, remainder = divmod(global_batch, world_size)
    if remainder or per_rank == 0:
        return None
    candidates = range(min(batch, per_rank), 0, -1) if batch_wired else [batch]
    for per_device in candidates:
        steps, rest = divmod(per_rank, per_device)
        if rest == 0 and (accum_wired or steps == accum):
            return per_device, steps
    return None


def run_name(world_size: int, batch: int, accum: int) -> str:
    """`4x16`, or `4x16-acc2` with accumulation."""
    return f"{world_size}x{batch}" + (f"-acc{accum}" if accum != 1 else "")


def optimizer_kind(default: str | None) -> str | None:
    """An optimizer flag's default as ddpcli's optimizer kind: adamw_torch -> adamw, Adam -> adam, SGD -> sgd."""
    if not default:
        return None
    name = default.lower().split(".")[-1].strip("'\"")
    for kind in ("adamw", "adam", "sgd"):
        if name.startswith(kind):
            return kind
    return "other"


def _header(request: InitRequest, wiring: _Wiring) -> list[str]:
    target = request.script if request.script is not None else f"-m {request.module}"
    source = f" from `{request.help_command}`" if wiring.args or not wiring.not_run else ""
    lines = [
        f"# ddpcli experiment file for {_comment(target)}, written by `ddpcli init`{_comment(source)}.",
        "# `ddpcli plan` shows what each run gets, `ddpcli launch` runs them, `ddpcli compare` lines them up.",
        "# Every field is explained by `ddpcli init --help` and the README's \"The experiment file\".",
    ]  # fmt: skip
    if wiring.args:
        lines.append("# Flags wired to {placeholders} (filled per run; the keys of `ddpcli plan --json`):")
        width = max(len(flag) for flag, _, _ in wiring.args)
        lines += [f"#   {flag:<{width}}  {{{placeholder}}}" for flag, placeholder, _ in wiring.args]
    if wiring.warnings:
        lines.append("# Not wired, or not possible (where a flag is not wired, the runs keep the script's own value):")
        lines += [f"#   - {_comment(warning)}" for warning in wiring.warnings]
    return lines


def _defaults_table(request: InitRequest, wiring: _Wiring) -> list[str]:
    lines = ["", "[defaults]"]
    if request.module is not None:
        lines.append(f"module = {toml_string(request.module)}  # run with python -m, from where you run ddpcli")
    else:
        lines.append(f"script = {toml_string(request.script or '')}  # relative to this file")
    if wiring.args:
        lines.append("args = [")
        lines += [
            f"    {toml_string(flag)}, {toml_string('{' + placeholder + '}')},  # {_comment(comment)}"
            for flag, placeholder, comment in wiring.args
        ]
        lines.append("]")
    else:
        lines.append("args = []  # no flag found to wire; add the script's own arguments here")
    lines += [_assignment(key, value, comment) for key, value, comment in wiring.defaults]
    lines.append('runs_dir = "runs"  # relative to this file: runs/<name>/<run id>/')
    return lines


def _assignment(key: str, value: object, comment: str) -> str:
    line = f"{key} = {toml_value(value)}"
    return f"{line:<29} # {_comment(comment)}" if comment else line


def toml_value(value: object) -> str:
    """A TOML literal for the values an experiment file holds; strings are always escaped."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} has no place in an experiment file")
        return repr(value)
    if isinstance(value, str):
        return toml_string(value)
    raise TypeError(f"no TOML form for {type(value).__name__}")


_TOML_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def toml_string(text: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped, other unicode kept as is.

    A lone surrogate (an undecodable byte in a path) cannot be written in UTF-8 TOML: that is a UserError.
    """
    out = []
    for char in text:
        if char in _TOML_ESCAPES:
            out.append(_TOML_ESCAPES[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04X}")
        elif 0xD800 <= ord(char) <= 0xDFFF:
            raise UserError(f"{text!r} is not valid unicode, so it cannot be written into a TOML file")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _comment(text: str) -> str:
    """One line of comment text: control characters (a newline would end the comment) shown escaped."""
    return "".join(
        char if ord(char) >= 0x20 and ord(char) != 0x7F and not 0xD800 <= ord(char) <= 0xDFFF else f"\\x{ord(char):02x}"
        for char in text
    )


def _origin(found: FoundFlag, given: object) -> str:
    if given is not None:
        default = f"; the script's default is {found.default}" if found.default is not None else ""
        return f"given to ddpcli init{default}"
    return f"the script's {found.flag} default"


def _no_default(found: FoundFlag, what: str) -> str:
    return f"{found.flag} shows no usable default in --help, so it is not wired: the runs use the script's own {what}"


def _int(text: str | None) -> int | None:
    """A whole number as printed (`3`, `3.0`), else None."""
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return int(value) if math.isfinite(value) and value == int(value) else None


def _positive_int(text: str | None) -> int | None:
    value = _int(text)
    return value if value is not None and value >= 1 else None


def _non_negative_int(text: str | None) -> int | None:
    value = _int(text)
    return value if value is not None and value >= 0 else None


def _positive_float(text: str | None) -> float | None:
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) and value > 0 else None
