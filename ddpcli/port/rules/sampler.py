"""Each training DataLoader (one iterated by a loop that steps, there or in the function it is given to) is
sharded: `_ddp_shard(DataLoader(...))` rebuilds it under torchrun with a DistributedSampler that keeps its
shuffle and drop_last, the batch the script's own (per device). At the top of each epoch, the loop around the batch
loop calls `set_epoch(epoch)`, so each epoch is a new permutation (without it every epoch repeats the first).
Loaders that do not train (test, validation) stay whole: every rank evaluates the full set."""

from __future__ import annotations

import libcst as cst

from ddpcli.port.context import Port
from ddpcli.port.facts import dotted, keyword
from ddpcli.port.rules.training import Training


def _loader_name(port: Port, call: cst.Call) -> str:
    parent = port.facts.parents.get(call)
    if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
        return dotted(parent.targets[0].target)
    if isinstance(parent, cst.AnnAssign):
        return dotted(parent.target)
    return ""


def _epoch_of(loop: cst.For | cst.While) -> str | None:
    if isinstance(loop, cst.For):
        target = loop.target
        if isinstance(target, cst.Tuple) and target.elements:
            target = target.elements[0].value
        if isinstance(target, cst.Name):
            return target.value
    return None


def apply(port: Port) -> None:
    facts = port.facts
    training = Training(facts)
    for call in facts.calls:
        if facts.resolve(call).rsplit(".", 1)[-1] != "DataLoader":
            continue
        name = _loader_name(port, call)
        loops = training.batch_loops(name) if name else []
        trains = bool(loops) or "train" in name.lower()
        if not trains:
            continue
        port.edits.rewrite(call, lambda node: cst.Call(func=cst.Name("_ddp_shard"), args=[cst.Arg(node)]))
        port.needs.add("shard")
        batch = keyword(call, "batch_size")
        per_device = f" ({port.code(batch.value)} per device)" if batch is not None else ""
        port.change(call, "sampler", f"{name or 'the DataLoader'}: a DistributedSampler under torchrun, keeping its "
                    f"shuffle and drop_last; each rank gets its share of every epoch and the batch stays the "
                    f"script's{per_device}, so the global batch is world size x it")  # fmt: skip
        _set_epochs(port, training, name, loops)


def _set_epochs(port: Port, training: Training, name: str, loops: list[tuple[cst.For, cst.CSTNode]]) -> None:
    facts = port.facts
    seen: set[int] = set()
    for loop, at in loops:
        outer = facts.loops_around(at)
        if not outer:
            continue  # one pass over the data: no epoch to reshuffle
        epoch_loop = outer[0]
        if id(epoch_loop) in seen:
            continue
        seen.add(id(epoch_loop))
        epoch = _epoch_of(epoch_loop)
        loader = name if at is loop else port.code(next(a.value for a in at.args if dotted(a.value) == name))
        body = epoch_loop.body
        if epoch is None or not isinstance(body, cst.IndentedBlock):
            port.cannot(epoch_loop, f"{name}: this epoch loop has no epoch variable; call "
                        f"{name}.sampler.set_epoch(epoch) at the top of each epoch")  # fmt: skip
            continue
        port.edits.insert_before(body.body[0], f"if _ddp:\n    {loader}.sampler.set_epoch({epoch})\n")
        port.change(epoch_loop, "set_epoch", f"{loader}.sampler.set_epoch({epoch}) at the top of each epoch: a "
                    "new shuffle each epoch, the same on every rank")  # fmt: skip
