"""`nn.DataParallel` (one process driving several GPUs) under torchrun: skipped, each process driving one device
and the DDP wrapper (ddpcli.port.rules.wrap) replacing it, with DataParallel's `module.` names kept in the model's
state_dict (`_ddp_data_parallel`), so checkpoints load both ways; and the script's own tests for it
(`isinstance(m, nn.DataParallel)`) true for that wrapper, as they were for DataParallel under python."""

from __future__ import annotations

import libcst as cst

from ddpcli.port.context import Port
from ddpcli.port.edits import expression

DATA_PARALLEL_CLASSES = ("torch.nn.DataParallel", "torch.nn.parallel.DataParallel",
                         "torch.nn.parallel.data_parallel.DataParallel")  # fmt: skip


def _data_parallel_tests(port: Port) -> None:
    """`isinstance(m, nn.DataParallel)` (a save helper that unwraps `m.module` when it sees one): true under torchrun
    for the DDP wrapper of a model the script put in DataParallel (`_ddp_isinstance`), else the helper saved its
    `module.` names where the script saved the module's own (pytorch-playground's model_snapshot)."""
    for call in port.facts.calls:
        if port.facts.resolve(call) != "isinstance" or len(call.args) != 2:
            continue
        tested = call.args[1].value
        classes = [e.value for e in tested.elements] if isinstance(tested, cst.Tuple) else [tested]
        if any(
            port.facts.resolve(c) in DATA_PARALLEL_CLASSES for c in classes if isinstance(c, cst.Name | cst.Attribute)
        ):
            port.edits.rewrite(call.func, lambda _: cst.Name("_ddp_isinstance"))
            port.needs.add("is_data_parallel")
            port.change(call, "data_parallel", "isinstance(..., nn.DataParallel) is true under torchrun for the "
                        "DDP wrapper of a model the script put in nn.DataParallel, as under python")  # fmt: skip


def apply(port: Port) -> None:
    _data_parallel_tests(port)
    facts = port.facts
    for call in facts.calls:
        name = facts.resolve(call)
        if name.rsplit(".", 1)[-1] == "DataParallel" and call.args:
            inner = port.code(call.args[0].value)
            port.edits.rewrite(call, lambda node, inner=inner: cst.IfExp(
                test=expression("_ddp"), body=expression(f"_ddp_data_parallel({inner})"), orelse=node))  # fmt: skip
            port.needs.add("data_parallel")
            port.change(call, "data_parallel", "nn.DataParallel skipped under torchrun: each process drives one "
                        "device and DistributedDataParallel replaces it, keeping DataParallel's `module.` names in "
                        "the model's state_dict, so checkpoints load in both directions")  # fmt: skip
