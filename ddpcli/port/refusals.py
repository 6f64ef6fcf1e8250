"""Why a script is not ported (exit 2, nothing written, one line a reason): it is data-parallel already (the
evidence named), it is written for a framework that starts its own processes (its own switch named, as
`ddpcli init` wires it), or nothing in it steps an optimizer (said by what it does instead: processes of
its own, a hand-written update). Frameworks are those ddpcli.init.script_kind finds
in the imports (by ddpcli.script.frameworks' tables), so port and init agree on what a script is."""

from __future__ import annotations

from pathlib import Path

import libcst as cst

from ddpcli.init.script_kind import script_facts
from ddpcli.port.facts import Facts
from ddpcli.script.frameworks import DATA_PARALLEL_CALLS, FRAMEWORKS, TRAINER_MODULES, is_trainer

ALREADY = DATA_PARALLEL_CALLS


def _hf_trainer(name: str) -> bool:
    """A Trainer of the libraries init counts as data-parallel by themselves (ddpcli.script.frameworks, one list
    for both commands), or their TrainingArguments."""
    return is_trainer(name) or (name.split(".")[0] in TRAINER_MODULES and name.endswith(".TrainingArguments"))


def _switch(framework: str) -> str:
    """The framework's own flags that make it data-parallel, from ddpcli.init's rows."""
    rows = next(f for f in FRAMEWORKS if f.name == framework).switches
    wanted = [s for s in rows if s.value in ("{nproc_per_node}", "ddp")]
    return ", ".join(f"{s.names[0]}={s.value}".replace("{nproc_per_node}", "N") for s in wanted)


def already_parallel(facts: Facts, name: str) -> list[str]:
    reasons, seen = [], set()
    for node in facts.walk(facts.module):
        if isinstance(node, cst.Call):
            last = facts.resolve(node).rsplit(".", 1)[-1]  # `DDP(model)` after `import ... as DDP` too
            if last in ALREADY and last not in seen:
                seen.add(last)
                reasons.append(f"{name}:{facts.line(node)}: already data-parallel: it {ALREADY[last]}; run "
                               f"`ddpcli init {name}` on it as it is")  # fmt: skip
    return reasons


def self_launching(facts: Facts, path: Path, name: str) -> list[str]:
    try:
        frameworks = script_facts(path, {}).frameworks
    except Exception:  # the script's own folder's modules may not parse: the script's imports still decide
        frameworks = set()
    imported = set(facts.aliases.values())
    reasons = []
    if any(i.startswith(("lightning.fabric", "lightning_fabric")) or i.endswith(".Fabric") for i in imported):
        reasons.append(f"{name}: written for Lightning Fabric, which launches its own processes: "
                       "Fabric(strategy=\"ddp\", devices=N) with fabric.launch() makes it data-parallel")  # fmt: skip
    elif "lightning" in frameworks:
        reasons.append(f"{name}: written for Lightning, which launches its own processes: its Trainer's "
                       f"switches ({_switch('lightning')}) make it data-parallel; `ddpcli init {name}` wires "
                       "them")  # fmt: skip
    if "accelerate" in frameworks:
        reasons.append(f"{name}: written for accelerate, which launches its own processes: `accelerate launch` "
                       f"(or torchrun) runs its Accelerator data-parallel as it is; on CPU its switch is --cpu "
                       f"(ACCELERATE_USE_CPU=1); `ddpcli init {name}` wires it")  # fmt: skip
    trainer = next((c for c in facts.calls if _hf_trainer(facts.resolve(c))), None)
    if trainer is not None:
        reasons.append(f"{name}:{facts.line(trainer)}: written for the Hugging Face Trainer, which is "
                       "data-parallel under torchrun by itself (TrainingArguments reads LOCAL_RANK; "
                       f"ddp_backend is its switch); run `ddpcli init {name}` on it as it is")  # fmt: skip
    return reasons


OWN_PROCESSES = {  # what starts training processes of its own (Hogwild, spawn): not one process a rank
    f"{package}.{call}"
    for package in ("multiprocessing", "torch.multiprocessing")
    for call in ("Process", "Pool", "spawn", "start_processes", "get_context")
}


def nothing_trains(facts: Facts, name: str, unread: list[str] | None = None) -> list[str]:
    """No optimizer step: said by what the script does instead (its own processes, a hand-written update), that the
    loop may be in code of the user's the port does not read (`unread`: imports from outside the script's folder),
    or that nothing trains at all."""
    if facts.step_calls():
        return []
    starts = next((call for call in facts.calls if facts.resolve(call) in OWN_PROCESSES), None)
    if starts is not None:
        return [f"{name}:{facts.line(starts)}: it starts its own training processes ({facts.resolve(starts)}), "
                "and no optimizer steps in this file: ddpcli port writes one process a rank for torchrun, which "
                "this is not"]  # fmt: skip
    backward = next((call for call in facts.calls if _method(call) == "backward"), None)
    if backward is not None:
        return [f"{name}:{facts.line(backward)}: it back-propagates and updates its parameters by hand, with no "
                "torch.optim optimizer (no `optimizer.step()`): wrap the model in DistributedDataParallel "
                "yourself; its backward then averages the gradients across ranks before your update"]  # fmt: skip
    if unread:
        return [f"{name}: no optimizer step found in it or the modules of its folder it imports (no "
                f"`optimizer.step()`); it imports {', '.join(unread)} from outside its folder, which the port does "
                "not read: where the training loop is there, run ddpcli port on a script beside that code, or make "
                "that loop data-parallel by hand"]  # fmt: skip
    return [f"{name}: no optimizer step found (no `optimizer.step()`): nothing trains, so there is nothing to "
            "make data-parallel"]  # fmt: skip


def _method(call: cst.Call) -> str:
    return call.func.attr.value if isinstance(call.func, cst.Attribute) else ""
