"""Where the script reaches into a wrapped model after the wrap, listed: `model.state_dict()`, `model.decode(z)`,
`model.n_classes = 3`, `torch.save(model, path)`. Nothing is rewritten: the wrapper (`_DDPModel`, the header's) is
the script's model for all of these wherever they happen, in this script or in a module it imports (which the port
does not read): attributes and methods reach the script's module, state_dict keeps its names (DataParallel's
`module.` only where the script used it), torch.save and copy.deepcopy give the script's model. Calling the model
(`model(x)`) and what DDP and nn.Module answer themselves (train, eval, parameters, to, zero_grad, ...) are not
listed."""

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


def apply(port: Port) -> None:
    if not port.models:
        return
    facts, models = port.facts, set(port.models)
    for node in facts.walk(facts.module):
        if isinstance(node, cst.Attribute) and dotted(node.value) in models and node.attr.value not in PASSES_THROUGH:
            what = node.attr.value
            why = (
                "with the names it has without DDP"
                if "state_dict" in what or what.startswith("named_")
                else "its own attribute"
            )
            port.change(node, "unwrap", f"{dotted(node.value)}.{what}: the script's model's, through its DDP wrapper "
                        f"({why})")  # fmt: skip
        elif isinstance(node, cst.Call) and facts.resolve(node) in SAVES and node.args:
            for model in _saved_models(port, node.args[0].value, models):
                port.change(model, "unwrap", f"torch.save of {dotted(model)}: pickles the script's model, not its "
                            "DDP wrapper (which loads only where a process group is set up)")  # fmt: skip


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
