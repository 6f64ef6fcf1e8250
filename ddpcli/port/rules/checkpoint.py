"""A checkpoint every rank loads (`--resume`, the best weights read back): tensors saved from GPU 0 load where they
were saved, so under torchrun every rank would put its copy on GPU 0. `torch.load(path)` gets
`map_location=_ddp_map_location`: GPU 0 mapped to the rank's own, and None (torch's default) without torchrun, so
python OUT loads as the script did. A load that names its map_location keeps it."""

from __future__ import annotations

import libcst as cst

from ddpcli.port.context import Port
from ddpcli.port.facts import keyword


def apply(port: Port) -> None:
    for call in port.facts.calls:
        if port.facts.resolve(call) != "torch.load" or keyword(call, "map_location") is not None:
            continue
        if len([arg for arg in call.args if arg.keyword is None]) > 1 or any(arg.star for arg in call.args):
            continue  # map_location given by position, or through *args / **kwargs
        port.edits.rewrite(call, _mapped)
        port.needs.add("map")
        port.change(call, "map_location", "torch.load(...) with map_location=_ddp_map_location: what GPU 0 saved "
                    "loads on each rank's own GPU under torchrun (torch's default under python)")  # fmt: skip


def _mapped(node: cst.CSTNode) -> cst.CSTNode:
    assert isinstance(node, cst.Call)
    *rest, last = node.args
    spaced = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    mapping = cst.Arg(cst.Name("_ddp_map_location"), keyword=cst.Name("map_location"),
                      equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))  # fmt: skip
    return node.with_changes(args=[*rest, spaced, mapping])
