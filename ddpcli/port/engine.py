"""The port of one script: refuse it, or run every rule and apply their edits in one pass."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import libcst as cst

from ddpcli.errors import UserError
from ddpcli.port import names, refusals
from ddpcli.port.context import Port
from ddpcli.port.facts import Facts
from ddpcli.port.records import PortRefused, PortResult
from ddpcli.port.rules import (
    accumulation,
    checkpoint,
    device,
    download,
    hand_batching,
    header,
    loss,
    rank0,
    sampler,
    shared,
    unwrap,
    wrap,
)  # fmt: skip
from ddpcli.script import source as script_source

# wrap first (the others read port.models); header last (it defines what the others used).
RULES: tuple[Callable[[Port], None], ...] = (
    wrap.apply, unwrap.apply, device.apply, sampler.apply, loss.apply, rank0.apply, download.apply,
    accumulation.apply, hand_batching.apply, shared.apply, checkpoint.apply, header.apply,
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


def _port(source: str, name: str, path: Path | None) -> PortResult:
    facts = read(source, name)
    facts.folder = path.parent if path is not None else None
    reasons = refusals.already_parallel(facts, name)
    reasons += refusals.self_launching(facts, path, name) if path is not None else []
    if not reasons:
        reasons += refusals.nothing_trains(facts, name)
    if reasons:
        raise PortRefused(reasons)
    try:
        return _run_rules(facts)
    except RecursionError:
        raise PortRefused([f"{name}: nested too deeply for the port to read; port it by hand"]) from None


# Rules that shard the data: only where a model is wrapped (its gradients averaged), else each rank would train a
# model of its own on its share and the ranks would end apart, with exit code 0.
SHARDING = (sampler.apply, hand_batching.apply)


def _run_rules(facts: Facts) -> PortResult:
    port = Port(facts, renames=names.taken(facts))
    for rule in RULES:
        if rule in SHARDING and not port.models:
            continue
        rule(port)
    _no_loader_note(port)
    port.changes.sort(key=lambda change: change.line)
    port.not_ported.sort(key=lambda item: item.line)
    for node in names.set_aside(facts, port.renames):  # before any rule's edit of the node
        port.edits.rewrites[node].insert(0, names.hidden)
    written = port.edits.apply(facts.module)
    if port.renames:
        written = written.visit(names.Rename(port.renames))
    return PortResult(written.code, port.changes, port.not_ported)


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
    if not kinds & {"sampler", "hand_batches"} and not port.loaders_not_ported:
        step = steps[0]
        port.cannot(step, "no training DataLoader found for this step's data: every rank would train on the "
                    "same samples; shard them by _ddp_rank and _ddp_world")  # fmt: skip


def port_script(path: Path) -> PortResult:
    """The port of the script at `path`, read as Python reads it (its coding cookie or byte order mark: the result
    says the encoding to write it back in); a syntax error at Python's line."""
    try:
        source = script_source.read(path)
        script_source.parse_ast(source)
    except UserError as error:
        raise PortRefused([str(error)]) from None
    result = port_source(source.text, str(path), path)
    result.encoding = source.encoding
    return result
