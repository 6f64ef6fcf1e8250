"""The framework rows of `ddpcli.script.frameworks` applied to one script, and the optimizer's kind.

A switch is wired only when the script has that flag, the machine calls for it (a CPU switch only where no GPU
is listed) and the user did not set the flag after `--` themselves. The optimizer comes from the script's own
`--optimizer`/`--optim`/`--opt` default, else from the optimizer class its source constructs; unknown stays
`other` (the lr is then kept, not scaled) with a note, never a silent `sgd`.
"""

from __future__ import annotations

from ddpcli.init.help_text import HelpOption, spellings
from ddpcli.init.roles import FoundFlag
from ddpcli.init.wiring import Source, Wiring
from ddpcli.script.frameworks import FABRIC_ENV, FRAMEWORKS, GENERIC_SWITCHES, Switch


def wire_switches(options: list[HelpOption], source: Source, cpu_only: bool, given_flags: set[str],
                  wiring: Wiring) -> None:  # fmt: skip
    """Each framework's and the generic switches; accelerate's env variable where it has no --cpu flag."""
    frameworks = [framework for framework in FRAMEWORKS if framework.name in source.frameworks]
    framework_rows = [switch for framework in frameworks for switch in framework.switches]
    rows = [*framework_rows, *GENERIC_SWITCHES]
    for switch in rows:
        option = _option_for(switch, options)
        if option is None or (switch.cpu_only and not cpu_only):
            continue
        flag = _long_flag(option)
        if flag in given_flags or flag in wiring.wired_flags:
            continue
        if switch.when_default and not any(word in str(option.default).lower() for word in switch.when_default):
            continue
        if switch.value is None and option.takes_value:
            continue  # a boolean switch, but this script's flag takes a value: not the flag the row means
        wiring.wire(flag, switch.value, switch.why)
        if switch.cpu_only and switch in framework_rows:  # the switch that makes the framework data-parallel here
            wiring.notes.append(f"{flag} {switch.value or ''}".rstrip() + f" set: {switch.why}")
    for framework in frameworks:
        if framework.cpu_env and cpu_only:
            has_switch = any(_option_for(switch, options) for switch in framework.switches if switch.cpu_only)
            if not has_switch:
                wiring.env.update(framework.cpu_env)
                names = ", ".join(f"{key}={value}" for key, value in framework.cpu_env.items())
                wiring.notes.append(f"{framework.name} on a machine without GPUs and no CPU flag: {names} in env")


def wire_fabric(source: Source, cpu_only: bool, wiring: Wiring) -> None:
    """Lightning Fabric's settings in the LT_* environment `fabric run` sets, since torchrun sets none: Fabric
    reads each before its constructor's argument. LT_CLI_USED=1 (Fabric then joins the process group in its
    constructor, as under `fabric run`) only where it breaks nothing: Fabric refuses it with `fabric.launch()` and
    with a constructor setting that differs from the environment's."""
    if source.fabric is None:
        return
    for name, value, only_cpu in FABRIC_ENV:
        if only_cpu and not cpu_only:
            continue
        (wiring.run_env if "{" in value else wiring.env)[name] = value
    names = ", ".join(f"{name}={value}" for name, value, only_cpu in FABRIC_ENV if cpu_only or not only_cpu)
    if source.fabric or source.fabric_launches:
        why = (f"Fabric({', '.join(f'{setting}=...' for setting in source.fabric)}) in the source"
               if source.fabric else "the script calls fabric.launch()")  # fmt: skip
        wiring.notes.append(
            f"Lightning Fabric under torchrun: {names} in env (as `fabric run` sets them; Fabric reads them before "
            f"its constructor's arguments, so every run is DDP over its own processes). LT_CLI_USED is not set: "
            f"{why}, and with LT_CLI_USED=1 Fabric refuses it"
        )
        return
    wiring.env["LT_CLI_USED"] = "1"
    wiring.notes.append(
        f"Lightning Fabric under torchrun: {names} and LT_CLI_USED=1 in env, as `fabric run` sets them (Fabric() "
        "builds no settings itself here; without them it takes one device and each process trains alone)"
    )


def _option_for(switch: Switch, options: list[HelpOption]) -> HelpOption | None:
    for option in options:
        if any(spellings(flag) & set(switch.names) for flag in option.flags if flag.startswith("--")):
            return option
    return None


def _long_flag(option: HelpOption) -> str:
    return next(flag for flag in option.flags if flag.startswith("--"))


LR_RULE_WORDS = {
    "sgd": "lr rule linear (lr x the global batch's scale)",
    "adam": "lr rule square root (lr x the square root of the global batch's scale)",
    "adamw": "lr rule square root (lr x the square root of the global batch's scale)",
    "other": "lr rule none known: lr kept, say which rule you want (scaling = linear or sqrt)",
}


def wire_optimizer(found: FoundFlag | None, source: Source, wiring: Wiring) -> None:
    """`optimizer = ...` in [defaults]: the flag's default, else the class built in the source, else other."""
    kind = optimizer_kind(found.default) if found is not None else None
    if kind is not None and found is not None:
        wiring.defaults.append(
            ("optimizer", kind, f"from the script's {found.flag} default {found.default}: {LR_RULE_WORDS[kind]}")
        )
    else:
        kinds = {built for built, _ in source.optimizers}
        where = "; ".join(sorted({where for _, where in source.optimizers}))
        if len(kinds) == 1:
            kind = kinds.pop()
            wiring.defaults.append(("optimizer", kind, f"the source builds {where}: {LR_RULE_WORDS[kind]}"))
        else:
            kind = "other"
            what = f"several optimizers in the source ({where})" if kinds else "no optimizer flag or class found"
            wiring.defaults.append(("optimizer", kind, f"{what}: set sgd, adam or adamw for the lr rule"))
            wiring.warnings.append(
                f'{what}: optimizer = "other" keeps the lr as it is across batch sizes; set it to sgd, adam or '
                "adamw in [defaults] so that scaling = auto follows the optimizer"
            )
    if "lr" in wiring.stand_ins:
        wiring.defaults.append(("scaling", "none", "the script's lr cannot be set by a flag: every run keeps it"))
    elif not any(key == "scaling" for key, _, _ in wiring.defaults):
        wiring.defaults.append(("scaling", "auto", "sgd: lr x batch scale; adam(w): x its square root"))


def optimizer_kind(default: str | None) -> str | None:
    """An optimizer flag's default as ddpcli's optimizer kind: adamw_torch -> adamw, Adam -> adam, SGD -> sgd,
    momentum and nesterov (timm's names for SGD) -> sgd."""
    if not default:
        return None
    name = default.lower().split(".")[-1].strip("'\"")
    for prefix, kind in (("adamw", "adamw"), ("adam", "adam"), ("sgd", "sgd"), ("momentum", "sgd"),
                         ("nesterov", "sgd")):  # fmt: skip
        if name.startswith(prefix):
            return kind
    return "other"


def wire_workdir(source: Source, wiring: Wiring) -> None:
    """A script that saves and resumes a file in its working directory (the DDP tutorial's snapshot.pt) would
    make every run after the first resume from the previous run's file: each run gets its own directory."""
    if source.checkpoints:
        wiring.defaults.append(("workdir", "run", "each run in its own directory: see the note above"))
        wiring.notes.append(
            f'the script saves or loads {"; ".join(source.checkpoints)} in its working directory: workdir = "run" '
            "starts each run in its run directory, so no run resumes another's file (its relative data paths then "
            "start there too; DDPCLI_EXPERIMENT_DIR names this file's folder)"
        )
