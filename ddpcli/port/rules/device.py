"""Each rank on its own device. The process-group setup makes LOCAL_RANK the current CUDA device, so "cuda" (and
`torch.device("cuda")`) already names this rank's GPU and stays as the script wrote it: `use_amp = device ==
"cuda"` holds as before. What pins one GPU names this rank's under torchrun, and stays as written under python:
"cuda:0" becomes cuda:LOCAL_RANK (0 without torchrun), `.cuda()` `.cuda(_ddp_local_rank)`; any other pin, whatever
spells its index (`torch.device("cuda", 0)`, `torch.device(args.device)` whose flag says "cuda:1", `.cuda(0)`,
`torch.cuda.set_device(args.gpu)`, "cuda:1"), goes through `_ddp_device`, the identity under python; and
`os.environ["CUDA_VISIBLE_DEVICES"] = ...` is left to python alone (under torchrun it would show every rank the
same GPU; torchrun's own CUDA_VISIBLE_DEVICES chooses the job's GPUs)."""

from __future__ import annotations

import re

import libcst as cst

from ddpcli.port.context import Port
from ddpcli.port.edits import guarded
from ddpcli.port.facts import dotted, keyword, string_value
from ddpcli.script.reader import last_name, literal_value

CUDA = ("cuda:0",)  # "cuda" stays: the group's setup makes LOCAL_RANK the current device, which it names
LOCAL = 'f"cuda:{_ddp_local_rank}"'
PINNED = re.compile(r"cuda:\d+")
VISIBLE = "CUDA_VISIBLE_DEVICES"


def _device_context(port: Port, node: cst.CSTNode) -> bool:
    """A string in torch.device(...), .to(...), or assigned to a name that says device."""
    parent = port.facts.parents.get(node)
    if isinstance(parent, cst.Arg) and parent.keyword is not None and parent.keyword.value == "map_location":
        return True
    for ancestor in port.facts.ancestors(node):
        if isinstance(ancestor, cst.Call) and last_name(ancestor) in ("device", "to", "set_device"):
            return True  # `torch.device(...)`, `nn.Linear(4, 1).to(...)`
        if isinstance(ancestor, cst.Assign):
            return any("device" in dotted(target.target).lower() for target in ancestor.targets)
        if isinstance(ancestor, cst.BaseStatement):
            return False
    return False


def _through_device(node: cst.CSTNode) -> cst.CSTNode:
    return cst.Call(func=cst.Name("_ddp_device"), args=[cst.Arg(node)])  # type: ignore[arg-type]


def _names_one_device(port: Port, call: cst.Call) -> bool:
    """`torch.device(...)` that may name one GPU: an index given, or a value the reading cannot see ("cuda",
    "cpu" and "cuda:0" spelled out are not: the first two name no index, the last is rewritten where it stands)."""
    if len(call.args) > 1 or keyword(call, "index") is not None:
        return True
    return bool(call.args) and not _spelled_out(call.args[0].value)


def _spelled_out(node: cst.CSTNode) -> bool:
    """A string the script writes, or a choice of such strings (`"cuda:0" if cuda else "cpu"`): the string rules
    see each of them where it stands."""
    if isinstance(node, cst.IfExp):
        return _spelled_out(node.body) and _spelled_out(node.orelse)
    return isinstance(literal_value(node), str)


def _pin(port: Port, node: cst.CSTNode, what: str) -> None:
    port.edits.rewrite(node, _through_device)
    port.needs.add("device")
    port.change(node, "device", f"{what} -> _ddp_device(...): under torchrun the GPU it names is this rank's "
                "(LOCAL_RANK), so no two ranks share one; as written under python")  # fmt: skip


def _cuda_call(port: Port, node: cst.Call) -> None:
    """`x.cuda()` on this rank's GPU; `x.cuda(0)` (or `device=0`) through _ddp_device; `torch.cuda` is a module."""
    receiver = dotted(node.func.value)  # type: ignore[attr-defined]
    if receiver == "torch":
        return
    if not node.args and receiver:
        port.edits.rewrite(node, lambda n: n.with_changes(args=[cst.Arg(cst.Name("_ddp_local_rank"))]))
        port.change(node, "device", ".cuda() -> .cuda(_ddp_local_rank): each rank on its own GPU")
    elif node.args and (node.args[0].keyword is None or node.args[0].keyword.value == "device"):
        _pin(port, node.args[0].value, port.code(node))


def _visible_devices(port: Port, statement: cst.CSTNode) -> bool:
    """`os.environ["CUDA_VISIBLE_DEVICES"] = ...`, or its setdefault."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return False
    small = statement.body[0]
    if isinstance(small, cst.Assign) and len(small.targets) == 1:
        target = small.targets[0].target
        return (isinstance(target, cst.Subscript) and port.facts.resolve(target.value) == "os.environ"
                and len(target.slice) == 1 and isinstance(target.slice[0].slice, cst.Index)
                and string_value(target.slice[0].slice.value) == VISIBLE)  # fmt: skip
    call = small.value if isinstance(small, cst.Expr) else None
    return (isinstance(call, cst.Call) and port.facts.resolve(call) == "os.environ.setdefault" and bool(call.args)
            and string_value(call.args[0].value) == VISIBLE)  # fmt: skip


def apply(port: Port) -> None:
    facts = port.facts
    for node in facts.walk(facts.module):
        if isinstance(node, cst.SimpleString) and string_value(node) in CUDA and _device_context(port, node):
            port.edits.rewrite(node, lambda _: cst.parse_expression(LOCAL))
            port.change(node, "device", f"{node.value} -> cuda:LOCAL_RANK: each rank on its own GPU")
        elif (
            isinstance(node, cst.SimpleString)
            and PINNED.fullmatch(string_value(node) or "")
            and _device_context(port, node)
        ):
            _pin(port, node, node.value)
        elif isinstance(node, cst.Call) and facts.resolve(node) == "torch.device" and _names_one_device(port, node):
            _pin(port, node, port.code(node))
        elif isinstance(node, cst.Call) and facts.resolve(node) == "torch.cuda.set_device" and node.args:
            _pin(port, node.args[0].value, port.code(node))
        elif isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "cuda":
            _cuda_call(port, node)
        elif _visible_devices(port, node):
            port.edits.rewrite(node, lambda statement: guarded(statement, "not _ddp"))
            port.change(node, "device", f"{VISIBLE} set under python only: under torchrun it would show every rank "
                        f"the same GPU; torchrun's own {VISIBLE} (set before it) chooses the job's GPUs, and each "
                        "rank takes cuda:LOCAL_RANK of them")  # fmt: skip
