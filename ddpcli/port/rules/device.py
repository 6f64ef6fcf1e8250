"""Each rank on its own device. The process-group setup makes LOCAL_RANK the current CUDA device, so "cuda" (and
`torch.device("cuda")`, a flag's `torch.device(args.device)`) already names this rank's GPU and stays as the script
wrote it: `use_amp = device == "cuda"` holds as before. Where the script names GPU 0 ("cuda:0") or calls
`.cuda()`, the port names cuda:LOCAL_RANK; without torchrun _ddp_local_rank is 0, the device the script used."""

from __future__ import annotations

import libcst as cst

from ddpcli.port.context import Port
from ddpcli.port.facts import dotted, string_value

CUDA = ("cuda:0",)  # "cuda" stays: the group's setup makes LOCAL_RANK the current device, which it names
LOCAL = 'f"cuda:{_ddp_local_rank}"'


def _device_context(port: Port, node: cst.CSTNode) -> bool:
    """A string in torch.device(...), .to(...), or assigned to a name that says device."""
    parent = port.facts.parents.get(node)
    if isinstance(parent, cst.Arg) and parent.keyword is not None and parent.keyword.value == "map_location":
        return True
    for ancestor in port.facts.ancestors(node):
        if isinstance(ancestor, cst.Call):
            name = dotted(ancestor.func)
            if name.endswith("device") or name.rsplit(".", 1)[-1] == "to":
                return True
        if isinstance(ancestor, cst.Assign):
            return any("device" in dotted(target.target).lower() for target in ancestor.targets)
        if isinstance(ancestor, cst.BaseStatement):
            return False
    return False


def apply(port: Port) -> None:
    facts = port.facts
    for node in facts.walk(facts.module):
        if isinstance(node, cst.SimpleString) and string_value(node) in CUDA and _device_context(port, node):
            port.edits.rewrite(node, lambda _: cst.parse_expression(LOCAL))
            port.change(node, "device", f"{node.value} -> cuda:LOCAL_RANK: each rank on its own GPU")
        elif (
            isinstance(node, cst.Call)
            and isinstance(node.func, cst.Attribute)
            and node.func.attr.value == "cuda"
            and not node.args
            and dotted(node.func.value) not in ("torch", "")
        ):
            port.edits.rewrite(node, lambda n: n.with_changes(args=[cst.Arg(cst.Name("_ddp_local_rank"))]))
            port.change(node, "device", ".cuda() -> .cuda(_ddp_local_rank): each rank on its own GPU")
