"""Which code trains: the loops and functions that hold an optimizer step (directly, or through a call of a
function of the script that does). The sampler, accumulation and hand-batching rules ask it."""

from __future__ import annotations

import libcst as cst

from ddpcli.port.facts import Facts, dotted
from ddpcli.script.values import trains_at


class Training:
    def __init__(self, facts: Facts) -> None:
        self.facts = facts
        self.steps = facts.step_calls()
        self.holding: set[int] = set()  # ids of nodes that hold a step
        for step in self.steps:
            self.holding |= {id(a) for a in facts.ancestors(step)}
        self.stepping = {name for name, f in facts.functions.items() if id(f) in self.holding}
        for _ in range(3):  # a function that calls a stepping function steps too
            for call in facts.calls:
                if dotted(call.func).rsplit(".", 1)[-1] in self.stepping:
                    self.holding |= {id(a) for a in facts.ancestors(call)}
            self.stepping |= {name for name, f in facts.functions.items() if id(f) in self.holding}

    def steps_in(self, node: cst.CSTNode) -> bool:
        return id(node) in self.holding

    def uses(self, name: str) -> list[cst.CSTNode]:
        """Where `name` (a Name or a dotted attribute) is read."""
        found = []
        for node in self.facts.walk(self.facts.module):
            if isinstance(node, cst.Name | cst.Attribute) and dotted(node) == name:
                parent = self.facts.parents.get(node)
                if not (isinstance(parent, cst.Attribute) and parent.value is node and dotted(parent)):
                    found.append(node)
        return found

    def aliases(self, name: str) -> list[str]:
        """`self.train_data` where `self.train_data = train_data` (a Trainer class keeping its loader)."""
        found = []
        for node in self.facts.walk(self.facts.module):
            if isinstance(node, cst.Assign) and dotted(node.value) == name:
                found += [dotted(t.target) for t in node.targets if dotted(t.target).startswith("self.")]
        return found

    def batch_loops(self, name: str, depth: int = 0) -> list[tuple[cst.For, cst.CSTNode, str]]:
        """Loops iterating `name` (or an attribute it is kept in) that step, with the call that gave the loader to
        their function (or the loop itself) and the loader's expression there: `for x, y in train_loader`,
        `enumerate(loader)`, `tqdm(self.train_data)`."""
        found: list[tuple[cst.For, cst.CSTNode, str]] = []
        for spelling in [name, *(self.aliases(name) if depth < 3 else [])]:
            for use in self.uses(spelling):
                loop = next((a for a in self.facts.ancestors(use) if isinstance(a, cst.For)), None)
                if loop is not None and _within(self.facts, use, loop.iter) and self.steps_in(loop):
                    found.append((loop, loop, spelling))
                call = self.facts.parents.get(self.facts.parents.get(use))  # name -> Arg -> Call
                function = dotted(call.func).rsplit(".", 1)[-1] if isinstance(call, cst.Call) else ""
                if isinstance(call, cst.Call) and function in self.stepping and depth < 3:
                    definition = self.facts.functions[function]
                    if not trains_at(self.facts, definition, call):
                        continue  # `run_epoch(model, val_loader)`: this call back-propagates nothing
                    parameter = parameter_for(definition, call, use)
                    if parameter:
                        inner = self.batch_loops(parameter, depth + 1)
                        found += [
                            (loop, call, spelling) for loop, _, _ in inner if self.facts.scope(loop) is definition
                        ]
        return found


def _within(facts: Facts, node: cst.CSTNode, container: cst.CSTNode) -> bool:
    return node is container or any(a is container for a in facts.ancestors(node))


def parameter_for(function: cst.FunctionDef | cst.Lambda, call: cst.Call, use: cst.CSTNode) -> str | None:
    """The parameter of `function` that the argument `use` of `call` binds (positional or keyword)."""
    params = [p.name.value for p in function.params.params]
    for index, arg in enumerate(call.args):
        if arg.value is use:
            if arg.keyword is not None:
                return arg.keyword.value
            offset = 1 if params[:1] == ["self"] and isinstance(call.func, cst.Attribute) else 0
            return params[index + offset] if index + offset < len(params) else None
    return None
