"""Files the ranks share: a folder each process makes for itself (`with tempfile.TemporaryDirectory() as d:`, `d =
tempfile.mkdtemp()`) where rank 0 alone writes (the rank-0 rule) and every rank reads back (the transfer-learning
tutorial's best-model checkpoint). Under torchrun each rank takes rank 0's path (a broadcast), so what rank 0 wrote
is there for all, and before rank 0 leaves the `with` (which removes the folder) every rank waits at a barrier."""

from __future__ import annotations

import libcst as cst

from ddpcli.port.context import Port

MAKERS = ("tempfile.TemporaryDirectory", "tempfile.mkdtemp", "TemporaryDirectory", "mkdtemp")


def _makes_folder(port: Port, node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Call) and port.facts.resolve(node) in MAKERS


def apply(port: Port) -> None:
    facts = port.facts
    for node in facts.order:
        if isinstance(node, cst.With) and isinstance(node.body, cst.IndentedBlock):
            for item in node.items:
                if (
                    _makes_folder(port, item.item)
                    and item.asname is not None
                    and isinstance(item.asname.name, cst.Name)
                ):
                    _share(port, node, item.asname.name.value, node.body)
        elif isinstance(node, cst.Assign) and _makes_folder(port, node.value) and len(node.targets) == 1:
            target = node.targets[0].target
            if isinstance(target, cst.Name):
                statement = facts.statement(node)
                port.edits.insert_after(statement, f"if _ddp:\n    {target.value} = _ddp_shared({target.value})\n")
                port.needs |= {"shared"}
                port.needs_group_here(statement)
                port.change(node, "shared_path", f"{target.value}: rank 0's folder on every rank under torchrun, so "
                            "the files rank 0 alone writes there are the ones every rank reads")  # fmt: skip


def _share(port: Port, with_node: cst.With, name: str, body: cst.IndentedBlock) -> None:
    first, last = body.body[0], body.body[-1]
    port.edits.insert_before(first, f"if _ddp:\n    {name} = _ddp_shared({name})\n")
    barrier = f"if _ddp:\n    {port.dist}.barrier()  # every rank has read rank 0's files: it may remove them\n"
    if _leaves(last):
        port.edits.insert_before(last, barrier)
    else:
        port.edits.insert_after(last, barrier)
    port.needs.add("shared")
    port.needs_group_here(with_node)
    port.change(with_node, "shared_path", f"{name}: rank 0's temporary folder on every rank under torchrun (rank 0 "
                "writes there, every rank reads what it wrote), and a barrier before rank 0 removes it")  # fmt: skip


def _leaves(statement: cst.BaseStatement) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and any(
        isinstance(small, cst.Return | cst.Raise | cst.Break | cst.Continue) for small in statement.body
    )
