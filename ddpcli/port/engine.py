"""The port of one script: refuse it, or run every rule and apply their edits in one pass."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst

from ddpcli.errors import UserError
from ddpcli.port import names, program, refusals
from ddpcli.port.context import Port
from ddpcli.port.facts import Facts, last_name
from ddpcli.port.records import PortRefused, PortResult
from ddpcli.port.rules import (
    accumulation,
    checkpoint,
    data_parallel,
    decisions,
    device,
    download,
    hand_batching,
    header,
    kept_graph,
    loss,
    rank0,
    sampler,
    shared,
    unwrap,
    wrap,
)  # fmt: skip
from ddpcli.script import source as script_source
from ddpcli.script.flow import Feeding
from ddpcli.script.modules import unread_imports

# wrap first (the others read port.models); header last (it defines what the others used).
RULES: tuple[Callable[[Port], None], ...] = (
    wrap.apply, data_parallel.apply, kept_graph.apply, unwrap.apply, decisions.apply, device.apply, sampler.apply,
    loss.apply, rank0.apply, download.apply, accumulation.apply, hand_batching.apply, shared.apply, checkpoint.apply,
    header.apply,
)  # fmt: skip


def read(source: str, name: str) -> Facts:
    try:
        return Facts.read(source)
    except cst.ParserSyntaxError as error:  # Python parses it (port_script checked) but libcst does not
        raise PortRefused([f"{name}:{error.raw_line}: not valid Python for libcst ({error.message})"]) from None


@contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """The cyclic collector paused while a tree is read and rewritten: each of its full collections goes over every
    node of the tree (hundreds of thousands for 10,000 lines), which made the port's time grow faster than its
    lines; a tree holds no cycles to collect, and what it used is freed when the port returns."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def port_source(source: str, name: str, path: Path | None = None) -> PortResult:
    """The data-parallel version of `source` (the script named `name`, read from `path` for its framework)."""
    with _no_cyclic_gc():
        return _port(source, name, path)


def _port(
    source: str, name: str, path: Path | None, whole: Program | None = None, facts: Facts | None = None
) -> PortResult:
    facts = facts if facts is not None else read(source, name)
    facts.folder = path.parent if path is not None else None
    if whole is not None:
        facts.feeding_elsewhere = whole.facts.feeding_elsewhere("__main__")
        facts.loaders_elsewhere = whole.facts.loaders_elsewhere("__main__")
    reasons = refusals.already_parallel(facts, name)
    reasons += refusals.self_launching(facts, path, name) if path is not None else []
    if not reasons and not (whole is not None and whole.facts.steps):  # a module of the program may step
        unread = unread_imports(facts, path.parent) if path is not None else []
        reasons += refusals.nothing_trains(facts, name, unread)
    if reasons:
        raise PortRefused(reasons)
    try:
        return _run_rules(facts, program_trains=whole is not None and whole.facts.trains_elsewhere("__main__"))
    except RecursionError:
        raise PortRefused([f"{name}: nested too deeply for the port to read; port it by hand"]) from None


# Rules that shard the data: only where a model is wrapped (its gradients averaged), else each rank would train a
# model of its own on its share and the ranks would end apart, with exit code 0.
SHARDING = (sampler.apply, hand_batching.apply)


def _run_rules(facts: Facts, module: bool = False, program_trains: bool = False) -> PortResult:
    port = Port(facts, renames=names.taken(facts), module=module, program_trains=program_trains)
    for rule in RULES:
        if rule in SHARDING and not (port.models or port.program_trains):
            continue
        if rule is header.apply and module and not port.changes:
            break  # a module nothing in it changes: left as it is
        rule(port)
    if not module:
        _no_loader_note(port)
    port.changes.sort(key=lambda change: change.line)
    port.not_ported.sort(key=lambda item: item.line)
    for node in names.set_aside(facts, port.renames):  # before any rule's edit of the node
        port.edits.rewrites[node].insert(0, names.hidden)
    written = port.edits.apply(facts.module)
    if port.renames:
        written = written.visit(names.Rename(port.renames))
    return PortResult(written.code, port.changes, port.not_ported)


def port_module(
    facts: Facts,
    program_trains: bool,
    feeding: Feeding,
    loaders: frozenset[str] = frozenset(),
) -> PortResult:
    """A module of the script's program (ddpcli.port.program), as read once: every rule, no refusal (the script's
    decide), and no process group of its own; its source unchanged where no rule changed it."""
    with _no_cyclic_gc():
        facts.feeding_elsewhere, facts.loaders_elsewhere = feeding, loaders
        return _run_rules(facts, module=True, program_trains=program_trains)


def rules_only(source: str, name: str) -> PortResult:
    """Every rule on `source`, refused or not (the robustness run's way of giving the rules any file)."""
    with _no_cyclic_gc():
        return _run_rules(read(source, name))


def _no_loader_note(port: Port) -> None:
    """What stays whole under torchrun: everything, where no model is wrapped (every wrap records a ddp_wrap
    change and names its model), else the data of a step no sharding rule reached."""
    kinds = {change.kind for change in port.changes}
    steps = port.facts.step_calls()
    if not steps:
        return
    if not port.models:
        unsharded = ("the data is not sharded either (with no gradients averaged, each rank would train a model of "
                     "its own on its share): every rank trains on all of it, as one process does")  # fmt: skip
        if any("DistributedDataParallel" in item.reason for item in port.not_ported):
            port.cannot(steps[0], f"no model is wrapped, so {unsharded}; shard the loader once the model is wrapped")
        else:
            port.cannot(steps[0], f"no model found whose parameters an optimizer takes: {unsharded}. Wrap the "
                        "trained model in DistributedDataParallel and shard its loader yourself")  # fmt: skip
        return
    if not kinds & {"sampler", "hand_batches"} and not port.loaders_not_ported and not _loaders_from_elsewhere(port):
        sliced = hand_batching.hand_slices(port)
        for piece, data in sliced:
            port.cannot(
                piece,
                f"data sliced by hand ({port.code(piece)}; {data}) with no DataLoader: every rank "
                "would train on the same samples; give each rank its share by _ddp_rank and _ddp_world",
            )
        if not sliced:
            port.cannot(steps[0], "no training DataLoader found for this step's data: every rank would train on "
                        "the same samples; shard them by _ddp_rank and _ddp_world")  # fmt: skip


def _loaders_from_elsewhere(port: Port) -> bool:
    """The step's data comes from a function of another file of the program that builds and returns loaders
    (`self.train_loader, self.val_loader, ... = make_data_loader(args)`), or is a name imported from one (`from
    data import loader`): that file's port shards them."""
    made = port.facts.loaders_held_elsewhere
    if port.facts.trains_imported_loaders:  # `from data import loader`: data.py's port shards it
        return True
    return bool(made) and any(
        isinstance(node, cst.Call) and last_name(node) in made and last_name(node) not in port.facts.functions
        for node in port.facts.backward_sources()
    )


def port_script(path: Path) -> PortResult:
    """The port of the script at `path` alone, read as Python reads it (its coding cookie or byte order mark: the
    result says the encoding to write it back in); a syntax error at Python's line."""
    return port_program(path).script


@dataclass
class Program:
    """The script and the modules of its folder it imports (ddpcli.port.program), ported together."""

    script: PortResult
    modules: list[program.Module] = field(default_factory=list)  # those written as ported copies
    facts: program.ProgramFacts = field(default_factory=program.ProgramFacts)


def port_program(path: Path) -> Program:
    """The port of the script at `path` and of each module of its program a rule changes: the script's result
    (refused as the script alone would be, unless a module steps), and the modules to write beside their originals,
    every import of a copied module pointing at its copy."""
    try:
        source = script_source.read(path)
        script_source.parse_ast(source)
    except UserError as error:
        raise PortRefused([str(error)]) from None
    with _no_cyclic_gc():
        modules = program.modules_of(path)
        ported = Program(PortResult(""), facts=program.read_program(modules))
        ported.script = _port(source.text, str(path), path, ported, modules["__main__"].facts)
    ported.script.encoding = source.encoding
    script_wraps = any(change.kind == "ddp_wrap" for change in ported.script.changes)
    for name, module in modules.items():
        if name != "__main__":
            module.result = _module_port(module, ported.facts, name, script_wraps)
    copies = program.copied(modules)
    mapping = {name: modules[name].ported_name for name in copies}
    reexported = program.reexports(modules)
    names, defined = frozenset(modules), program.package_names(modules)
    for name, module in modules.items():  # in the order the program imports them
        if name not in copies or module.result is None:
            continue
        assert module.source is not None  # ported: read
        module.result.source = program.point_at_copies(module.result.source, module.source.text, mapping,
                                                       module.package, module.result, reexported, names,
                                                       defined)  # fmt: skip
        ported.modules.append(module)
    ported.script.source = program.point_at_copies(ported.script.source, source.text, mapping, "", ported.script,
                                                   reexported, names, defined)  # fmt: skip
    return ported


def _module_port(
    module: program.Module, facts: program.ProgramFacts, name: str, script_wraps: bool
) -> PortResult | None:
    """A module's port (None where Python could not read it either: it is left as it is)."""
    if module.source is None or module.facts is None:
        return None
    try:
        result = port_module(module.facts, facts.trains_elsewhere(name, script_wraps), facts.feeding_elsewhere(name),
                             facts.loaders_elsewhere(name))  # fmt: skip
    except (PortRefused, RecursionError):
        return None
    result.encoding = module.source.encoding
    return result
