"""Which of the script's flags carry which of the plan's values: batch, accumulation, lr, warmup, length, seed
and output directory, each wired to its `{placeholder}` only when the baseline's value for it is known (given to
init, or the script's own default). A made-up value would silently change what the script does: a flag that
cannot be wired is said once, in the file's header and on stderr, and the runs keep the script's own value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ddpcli.errors import UserError
from ddpcli.init.derived import Derivation, derived_per_rank
from ddpcli.init.help_text import HelpOption
from ddpcli.init.roles import ROLE_BY_KEY, FoundFlag, find_option
from ddpcli.init.values import as_int, non_negative_int, positive_float, positive_int
from ddpcli.script.frameworks import LR_RULES, WARMUP_NOT_IN_STEPS, LrRule

NOMINAL_BATCH = 32  # only for the plan's arithmetic when the script has no batch flag: marked a stand-in
NOMINAL_LR = 0.001


@dataclass(frozen=True)
class Source:
    """What init knows of the script besides its options (read from its syntax tree)."""

    frameworks: frozenset[str] = frozenset()
    literals: dict[str, tuple[object, str]] = field(default_factory=dict)  # role -> (value, "where")
    warmups: tuple[str, ...] = ()  # warmups the script builds itself, as "what (line N)"
    optimizers: tuple[tuple[str, str], ...] = ()  # (kind, "what (line N)") constructed in the source
    total_over_ranks: frozenset[str] = frozenset()  # configurator names the script divides by the world size
    one_more_step: frozenset[str] = frozenset()  # configurator names N of `if i > N: break`
    equals_form: bool = False  # `--key=value` (nanoGPT's configurator) instead of `--key value`
    checkpoints: tuple[str, ...] = ()  # relative checkpoint names it saves or resumes, as "'x.pt' at line N"
    derived: tuple[Derivation, ...] = ()  # batch or accumulation the script computes from the world size
    fabric: tuple[str, ...] | None = None  # Fabric(...) built, with these settings passed to its constructor
    fabric_launches: bool = False


@dataclass
class Wiring:
    """Decisions about the script's flags: args, [defaults] and [baseline] values, env, notes and warnings."""

    equals_form: bool = False
    args: list[tuple[tuple[str, ...], str]] = field(default_factory=list)  # tokens, comment
    wired_flags: set[str] = field(default_factory=set)
    defaults: list[tuple[str, object, str]] = field(default_factory=list)  # key, value, comment
    baseline: list[tuple[str, object, str]] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    run_env: dict[str, str] = field(default_factory=dict)  # per run: "{nproc_per_node}" is each run's own count
    notes: list[str] = field(default_factory=list)  # decisions the header explains
    warnings: list[str] = field(default_factory=list)  # what could not be wired (also on stderr)
    stand_ins: list[str] = field(default_factory=list)
    batch: int = NOMINAL_BATCH
    accum: int = 1
    batch_wired: bool = False
    accum_wired: bool = False
    kept: Derivation | None = None  # the script keeps this global batch (or token budget) at every world size

    def wire(self, flag: str, value: str | None, comment: str) -> None:
        """`--flag VALUE` (or `--flag=VALUE`; a bare `--flag` when value is None) in every run's args."""
        if value is None:
            tokens: tuple[str, ...] = (flag,)
        else:
            tokens = (f"{flag}={value}",) if self.equals_form else (flag, value)
        self.args.append((tokens, comment))
        self.wired_flags.add(flag)


def wire_roles(
    flags: dict[str, FoundFlag], options: list[HelpOption], source: Source, given_batch: int | None,
    given_lr: float | None, help_command: str,
) -> Wiring:  # fmt: skip
    wiring = Wiring(equals_form=source.equals_form)
    _wire_batch(flags, source, given_batch, help_command, wiring)
    _wire_accum(flags, source, wiring)
    _wire_lr(flags, options, source, given_lr, help_command, wiring)
    _wire_warmup(flags, options, source, wiring)
    _wire_length(flags, source, wiring)
    _wire_seed_and_output(flags, wiring)
    return wiring


def _wire_batch(
    flags: dict[str, FoundFlag], source: Source, given: int | None, help_command: str, wiring: Wiring
) -> None:
    found = flags.get("per_device_batch_size")
    if found is None and given is None and (kept := _kept_global(source)) is not None:
        _wire_kept(kept, wiring)
        return
    if found is None:
        value = _stand_in(wiring, "per_device_batch_size", given, source, NOMINAL_BATCH, "batch")
        wiring.batch = value if isinstance(value, int) and value >= 1 else NOMINAL_BATCH
        return
    default = positive_int(found.default)
    if given is None and default is None:
        raise UserError(_no_value(help_command, found, "--per-device-batch-size N", "the one-device batch"))
    wiring.batch = given or default or NOMINAL_BATCH
    wiring.batch_wired = True
    wiring.wire(found.flag, "{per_device_batch_size}", "samples per process per micro-batch")
    wiring.baseline.append(("per_device_batch_size", wiring.batch, _origin(found, given)))


def _kept_global(source: Source) -> Derivation | None:
    """The first batch or accumulation the script derives from the world size, where it divides at 1 process."""
    return next((each for each in source.derived if derived_per_rank(each, 1) is not None), None)


def _wire_kept(kept: Derivation, wiring: Wiring) -> None:
    """A script that keeps its global batch: the baseline is what it computes at 1 process, as stand-ins (no flag
    reaches them); every run is planned as the script computes it (`_experiments`)."""
    wiring.kept = kept
    at_one = derived_per_rank(kept, 1) or 1
    if kept.role == "per_device_batch_size":
        wiring.batch = at_one
        wiring.baseline.append(("per_device_batch_size", at_one, f"stand-in: the script computes it, {kept.where()}"))
        wiring.stand_ins.append("per_device_batch_size")
    else:
        wiring.batch, wiring.accum = kept.batch or 1, at_one
        wiring.baseline += [
            ("per_device_batch_size", wiring.batch, f"stand-in: hard-coded {kept.batch_name} = {kept.batch}"),
            ("grad_accum_steps", at_one, f"stand-in: the script computes it, {kept.where()}"),
        ]
        wiring.stand_ins += ["per_device_batch_size", "grad_accum_steps"]
        if kept.tokens_per_sample:
            wiring.defaults.append(("sample_tokens", kept.tokens_per_sample, f"tokens per sequence: the script's "
                                    f"budget is {kept.total} tokens a step"))  # fmt: skip
    wiring.notes.append(kept_note(kept))


def kept_note(kept: Derivation) -> str:
    """What the script keeps constant, in its own units: tokens for a token budget."""
    unit = f"{kept.total_name} = {kept.total}" if kept.total_name else str(kept.total)
    if kept.tokens_per_sample:
        what = (
            f"a budget of {kept.total} tokens per optimizer step ({unit}): {kept.global_samples} sequences of "
            f"{kept.tokens_per_sample} tokens, micro-batches of {kept.batch_name} = {kept.batch} sequences"
        )
    else:
        what = f"a global batch of {kept.total} samples ({unit})"
    return (
        f"the script keeps {what} at every world size: {kept.where()}. Every run is planned as the script computes "
        f"it (N processes: {kept.name} = {kept.total // (kept.tokens_per_sample or 1) // (kept.batch or 1)} / N); "
        "no run can keep the per-device batch, and the lr stays the script's"
    )


def _stand_in(wiring: Wiring, key: str, given: object, source: Source, nominal: object, what: str) -> object:
    """A value the script has no flag for: the user's, else the literal the source hard-codes, else nominal;
    only the user's is not a stand-in (they said the script uses it)."""
    if given is not None:
        wiring.baseline.append((key, given, f"given to ddpcli init: the script has no {what} flag"))
        wiring.warnings.append(f"no {what} flag found: {key} {given} is yours; the script must use it itself")
        return given
    literal = source.literals.get(key)
    value, where = (literal[0], f"hard-coded: {literal[1]}") if literal else (nominal, "not found in the source")
    wiring.baseline.append((key, value, f"stand-in, {where}; no flag, not passed to the script"))
    wiring.stand_ins.append(key)
    wiring.warnings.append(
        f"no {what} flag found: the script decides its own {what} ({where}); {key} = {value} in [baseline] only "
        f"stands in for it (plan labels it yours to fill in, or pass --{key.replace('_', '-')} to init)"
    )
    return value


def _wire_accum(flags: dict[str, FoundFlag], source: Source, wiring: Wiring) -> None:
    found = flags.get("grad_accum_steps")
    if found is None and wiring.kept is not None and wiring.kept.role == "grad_accum_steps":
        return  # derived by the script: wired as a stand-in by _wire_kept
    if found is None:
        wiring.warnings.append(ROLE_BY_KEY["grad_accum_steps"].missing)
        return
    default = positive_int(found.default)
    if default is None:
        wiring.warnings.append(_not_usable(found, "accumulation"))
        return
    wiring.accum, wiring.accum_wired = default, True
    if found.flag.lstrip("-") in source.total_over_ranks:
        wiring.wire(found.flag, "{grad_accum_steps * world_size}", "the script divides it by the world size")
        wiring.notes.append(f"{found.flag} is the total over all ranks (the script divides it by the world size)")
    else:
        wiring.wire(found.flag, "{grad_accum_steps}", "micro-batches per optimizer step")
    if default != 1:
        wiring.baseline.append(("grad_accum_steps", default, _whose(found)))


def _wire_lr(
    flags: dict[str, FoundFlag], options: list[HelpOption], source: Source, given: float | None,
    help_command: str, wiring: Wiring,
) -> None:  # fmt: skip
    found = flags.get("lr")
    if found is None:
        _stand_in(wiring, "lr", given, source, NOMINAL_LR, "learning-rate")
        return
    rule = next((rule for rule in LR_RULES if _rule_applies(rule, found, options)), None)
    if given is None and found.default is None and rule is not None:
        lr, note = _library_lr(rule, found, options, wiring)
        wiring.notes.append(note)
    else:
        default = positive_float(found.default)
        if given is None and default is None:
            raise UserError(_no_value(help_command, found, "--lr X", "the one-device lr"))
        lr = given or default
    wiring.wire(found.flag, "{lr}", "scaled with the global batch")
    wiring.baseline.append(("lr", lr, _origin(found, given) if rule is None or given else "timm's rule, see above"))
    _wire_min_lr(options, lr, wiring)


def _rule_applies(rule: LrRule, found: FoundFlag, options: list[HelpOption]) -> bool:
    return found.flag.lstrip("-").replace("-", "_") == rule.lr and all(
        find_option(options, (name,)) is not None for name in (rule.base, rule.size)
    )


def _library_lr(rule: LrRule, found: FoundFlag, options: list[HelpOption], wiring: Wiring) -> tuple[float, str]:
    """timm's lr for the baseline's global batch, computed as timm does; passing --lr turns timm's rule off."""
    base, size = find_option(options, (rule.base,)), find_option(options, (rule.size,))
    assert base is not None and size is not None
    base_lr, base_size = positive_float(base.default), positive_int(size.default)
    if base_lr is None or base_size is None:
        raise UserError(f"{base.flags[-1]} or {size.flags[-1]} shows no usable default: give the lr with --lr X")
    scale_option = find_option(options, (rule.scale,))
    optimizer = find_option(options, ("opt", "optimizer", "optim"))
    chosen = (scale_option.default if scale_option else None) or (
        "sqrt" if optimizer and any(part in str(optimizer.default).lower() for part in rule.sqrt_optimizers)
        else "linear"
    )  # fmt: skip
    ratio = wiring.batch * wiring.accum / base_size
    lr = base_lr * (math.sqrt(ratio) if chosen == "sqrt" else ratio)
    wiring.defaults.append(("scaling", chosen, f"{rule.library}'s own rule for this optimizer"))
    return lr, (
        f"{rule.library} scales its lr by the global batch itself when {found.flag} is unset "
        f"({base.flags[-1]} {base_lr:g} per {size.flags[-1]} {base_size}, {chosen}). This file passes "
        f"{found.flag} {{lr}}, which turns {rule.library}'s rule off: ddpcli scales with the same {chosen} rule "
        f"instead, from the baseline's {lr:.6g} ({rule.library}'s value for its global batch "
        f"{wiring.batch * wiring.accum}). Not wired: {base.flags[-1]} (wiring it too would scale twice)"
    )


def _wire_min_lr(options: list[HelpOption], lr: float, wiring: Wiring) -> None:
    """nanoGPT's `min_lr = 6e-5  # ~= learning_rate/10`: keep the same ratio to the run's lr."""
    option = find_option(options, ("min_lr",))
    value = positive_float(option.default) if option else None
    if option is None or value is None:
        return
    ratio = lr / value
    if ratio > 1 and abs(ratio - round(ratio)) < 1e-6 * ratio:
        wiring.wire(option.flags[0], f"{{lr / {round(ratio)}:.3e}}", f"the script's ratio: lr / {round(ratio)}")


def _wire_warmup(flags: dict[str, FoundFlag], options: list[HelpOption], source: Source, wiring: Wiring) -> None:
    warmup = flags.get("warmup_steps")
    steps = non_negative_int(warmup.default) if warmup else None
    if warmup is not None and steps is not None:
        wiring.wire(warmup.flag, "{warmup_steps}", "rescaled to keep the baseline's warmup samples")
        wiring.baseline.append(("warmup_steps", steps, _whose(warmup)))
        return
    other = find_option(options, WARMUP_NOT_IN_STEPS)
    own = [f"{other.flags[-1]} {other.default}"] if other and other.default not in (None, "0", "0.0") else []
    own += list(source.warmups)
    if own:
        wiring.warnings.append(
            f"the script warms up itself ({'; '.join(own)}): not wired, every run keeps it as the script computes "
            "it, and plan does not call the runs warmup-free"
        )
        wiring.stand_ins.append("warmup_steps")
        literal = source.literals.get("warmup_steps")
        if literal is not None and isinstance(literal[0], int) and literal[0] >= 0:
            wiring.baseline.append(("warmup_steps", literal[0], f"stand-in, hard-coded in the script: {literal[1]}"))
    elif warmup is not None:
        wiring.warnings.append(_not_usable(warmup, "warmup"))
    else:
        wiring.warnings.append(ROLE_BY_KEY["warmup_steps"].missing)


def _wire_length(flags: dict[str, FoundFlag], source: Source, wiring: Wiring) -> None:
    """max_steps from a steps flag; else epochs, which ddpcli counts only with a dataset size."""
    steps, epochs, size = flags.get("max_steps"), flags.get("epochs"), flags.get("dataset_size")
    size_value = positive_int(size.default) if size else None
    if size is not None and size_value is not None:
        wiring.wire(size.flag, "{dataset_size}", "samples per epoch")
        wiring.defaults.append(("dataset_size", size_value, _whose(size)))
    max_steps = positive_int(steps.default) if steps else None
    if steps is not None and max_steps is not None:
        if steps.flag.lstrip("-") in source.one_more_step:
            wiring.wire(steps.flag, "{total_steps - 1}", f"the script runs {steps.flag} + 1 iterations")
            wiring.defaults.append(("max_steps", max_steps + 1, f"{_whose(steps)} + 1"))
        else:
            wiring.wire(steps.flag, "{total_steps}", "the same for every run")
            wiring.defaults.append(("max_steps", max_steps, _whose(steps)))
        return
    epoch_count = positive_int(epochs.default) if epochs else None
    if epochs is not None and epoch_count is not None and size_value is not None:
        wiring.wire(epochs.flag, "{epochs}", "the same for every run")
        wiring.defaults.append(("epochs", epoch_count, _whose(epochs)))
        return
    if steps is None and epochs is None:
        wiring.warnings.append(ROLE_BY_KEY["max_steps"].missing)
        return
    reasons = [f"{steps.flag} shows no positive default"] if steps is not None else []
    if epochs is not None:
        reasons.append(f"{epochs.flag} {'shows no whole default' if epoch_count is None else 'needs a dataset size'}")
    wiring.warnings.append(
        f"steps not wired ({'; '.join(reasons)}, for ddpcli to count steps): every run trains as long as the "
        "script decides"
    )


def _wire_seed_and_output(flags: dict[str, FoundFlag], wiring: Wiring) -> None:
    seed = flags.get("seed")
    if seed is None:
        wiring.warnings.append(ROLE_BY_KEY["seed"].missing)
    elif (value := as_int(seed.default)) is None:
        wiring.warnings.append(_not_usable(seed, "seed"))
    else:
        wiring.wire(seed.flag, "{seed}", "the same on every rank")
        wiring.defaults.append(("seed", value, _whose(seed)))
    output = flags.get("run_dir")
    if output is not None:
        wiring.wire(output.flag, "{run_dir}", "each run writes into its own run directory")


def _whose(found: FoundFlag) -> str:
    if found.option is not None and found.option.given:
        return f"{found.flag} as given after -- to ddpcli init"
    return f"the script's {found.flag} default"


def _origin(found: FoundFlag, given: object) -> str:
    if given is not None:
        default = f"; the script's default is {found.default}" if found.default is not None else ""
        return f"given to ddpcli init{default}"
    return _whose(found)


def _no_value(help_command: str, found: FoundFlag, option: str, what: str) -> str:
    if found.default is None:
        return f"{help_command} shows no default for {found.flag}: give {what} with {option}"
    return f"{help_command} shows an invalid default for {found.flag}: {found.default}; give {what} with {option}"


def _not_usable(found: FoundFlag, what: str) -> str:
    shown = "shows no default" if found.default is None else f"has an invalid default ({found.default})"
    return f"{found.flag} {shown}, so it is not wired: the runs use the script's own {what}"
