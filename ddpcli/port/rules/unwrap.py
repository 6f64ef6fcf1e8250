"""Where the script reaches into a wrapped model, it gets the model itself: `_unwrap(model).state_dict()` saves
the keys the single-device script saved (no `module.` prefix), `_unwrap(model).decode(z)` finds the script's own
method, `torch.save(_unwrap(model), path)` pickles the module. Calling the model (`model(x)`) and the nn.Module
methods the wrapper passes through (train, eval, parameters, to, zero_grad, ...) stay as they are."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from ddpcli.port.context import Port
from ddpcli.port.facts import dotted
from ddpcli.script.flow import origins

PASSES_THROUGH = {
    "train", "eval", "parameters", "to", "cuda", "cpu", "zero_grad", "requires_grad_", "apply", "forward", "half",
    "float", "double", "bfloat16", "type", "no_sync", "module", "training", "children", "modules", "buffers",
    "register_forward_hook", "register_forward_pre_hook", "register_full_backward_hook",
}  # fmt: skip
SAVES = ("torch.save",)


def _unwrapped(node: cst.CSTNode) -> cst.CSTNode:
    return cst.Call(func=cst.Name("_unwrap"), args=[cst.Arg(node)])  # type: ignore[arg-type]


def apply(port: Port) -> None:
    if not port.models:
        return
    facts, models = port.facts, set(port.models)
    for node in facts.walk(facts.module):
        if isinstance(node, cst.Attribute) and dotted(node.value) in models and node.attr.value not in PASSES_THROUGH:
            port.edits.rewrite(node.value, _unwrapped)
            port.needs.add("unwrap")
            what = node.attr.value
            why = (
                "the keys of the script's own model, without DDP's `module.` prefix"
                if "state_dict" in what or what.startswith("named_")
                else "the script's own module's attribute"
            )
            port.change(node, "unwrap", f"{dotted(node.value)}.{what}: the unwrapped model under DDP ({why})")
        elif isinstance(node, cst.Call) and facts.resolve(node) in SAVES and node.args:
            for model in _saved_models(port, node.args[0].value, models):
                port.edits.rewrite(model, _unwrapped)
                port.needs.add("unwrap")
                port.change(model, "unwrap", f"torch.save of {dotted(model)}: the unwrapped model, as the script "
                            "saved it (a pickled DDP wrapper loads only where a process group is set up)")  # fmt: skip


CONTAINERS = (cst.Dict, cst.List, cst.Tuple, cst.Set)


def _saved_models(port: Port, saved: cst.CSTNode, models: set[str], depth: int = 0) -> Iterator[cst.CSTNode]:
    """The wrapped models `torch.save` pickles: the object saved, or a value of the dict, list or tuple it is, written
    in the call or bound to the name saved (`state = {'net': net, ...}; torch.save(state, path)`), nested too."""
    if dotted(saved) in models:
        yield saved
    elif isinstance(saved, CONTAINERS):
        for element in saved.elements:
            value = getattr(element, "value", None)
            if value is not None and depth < 4:
                yield from _saved_models(port, value, models, depth + 1)
    elif isinstance(saved, cst.Name) and depth == 0:
        seen = set()
        for origin in origins(port.facts, saved):
            if isinstance(origin, CONTAINERS) and origin not in seen:
                seen.add(origin)
                yield from _saved_models(port, origin, models, depth + 1)
