"""What the rules read from the script: its libcst tree with positions and parents, its imports, its optimizers,
their steps, the models they train, its DataLoaders and its loops. Read once, shared by every rule."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst

from ddpcli.script.flow import Feeding, backward_sources, training_loaders
from ddpcli.script.frameworks import OPTIMIZER_CLASSES
from ddpcli.script.layers import Layers
from ddpcli.script.reader import Reader, dotted, import_aliases, keyword, last_name, string_value
from ddpcli.script.values import backward_calls, origins

__all__ = ["Facts", "call_name", "dotted", "dotted_module", "import_aliases", "keyword", "last_name", "string_value"]

OPTIMIZER_MODULES = ("torch.optim", "optim")
# torch.optim.Optimizer's methods that do not move the parameters (an optimizer class's others may: SAM's
# first_step and second_step)
NOT_STEPS = ("zero_grad", "state_dict", "load_state_dict", "add_param_group", "register_step_pre_hook",
             "register_step_post_hook", "register_state_dict_pre_hook", "register_state_dict_post_hook",
             "register_load_state_dict_pre_hook", "register_load_state_dict_post_hook")  # fmt: skip


def dotted_module(node: cst.ImportFrom) -> str:
    return dotted(node.module) if node.module is not None else ""


def call_name(node: cst.Call) -> str:
    return dotted(node.func)


def _optimizer_class(name: str) -> bool:
    """A qualified name that is a torch.optim optimizer class, or one of the optimizer classes init knows."""
    head, _, last = name.rpartition(".")
    return last in OPTIMIZER_CLASSES or (head in OPTIMIZER_MODULES and last[:1].isupper())


CONTAINERS = (cst.Dict, cst.List, cst.Tuple, cst.Set)  # literals whose elements are values the script keeps


def _bound(target: cst.CSTNode) -> list[cst.CSTNode]:
    """What an assignment target binds: itself (`model`, `self.model`), each element of an unpacking; not a name it
    only reads (`net.training = True` sets an attribute of net and leaves `net` bound as it was; `x[net] = 1`)."""
    if isinstance(target, cst.Tuple | cst.List):
        return [bound for element in target.elements for bound in _bound(element.value)]
    if isinstance(target, cst.StarredElement):
        return _bound(target.value)
    return [target] if isinstance(target, cst.Name | cst.Attribute) else []


@dataclass
class Facts(Reader):
    """The script as ddpcli.script.reader reads it (names resolved through imports and scopes), with what the
    port's rules ask of it: statements and blocks, loops, optimizers and their steps, the `__main__` guard."""

    folder: Path | None = None  # the script's folder (its own modules: utils.py), when read from a file
    feeding_elsewhere: Feeding = field(default_factory=dict)
    # functions of the program's other files whose parameters reach a backward (ddpcli.port.program)
    loaders_elsewhere: frozenset[str] = frozenset()  # functions of the program's other files returning a DataLoader
    program_classes: dict[str, Layers] = field(default_factory=dict)  # the classes of the program's files, with the
    # layers their forward may not reach (ddpcli.script.layers)
    loaders_held_elsewhere: frozenset[str] = frozenset()  # functions of the program's other files returning the
    # loaders they build, alone or in a tuple, list or dict (which their file shards)
    loaders_trained_elsewhere: dict[str, set[str | int | None]] = field(default_factory=dict)  # this file's
    # functions returning loaders -> where in their value sit those the program's other files train on
    # (ddpcli.script.flow.loaders_trained_from)
    trains_imported_loaders: bool = False  # this file trains on a name it imports from another file of the program,
    # or on a loader an instance of another file's class keeps (`dataset.train`: flow.kept_loaders)
    names_trained_elsewhere: frozenset[str] = frozenset()  # this file's top-level names another file of the
    # program imports and trains on (`from data import loader`: flow.imported_and_trained)
    builders_elsewhere: dict[str, tuple[tuple[str, ...], str]] = field(default_factory=dict)  # functions of the
    # program's other files building an optimizer over a model they are given (ddpcli.port.rules.wrap)
    parameter_methods: frozenset[str] = frozenset()  # methods of the program's classes yielding parameters
    # (ddpcli.script.flow.parameter_methods: this file's alone where it is read without its program)
    optimizers_elsewhere: frozenset[str] = frozenset()  # optimizer classes the program's other files define
    builders_by_name_elsewhere: dict[str, tuple[int, str]] = field(default_factory=dict)  # the program's other
    # files' functions building an instance of a class looked up on a module they are given (builders_by_name)
    optimizer_factories_elsewhere: frozenset[str] = frozenset()  # functions of the program's other files that
    # return an optimizer class (`get_optimizer(cfg)` returning `torch.optim.SGD` from a table: optimizer_factories)
    attributes_trained_elsewhere: frozenset[tuple[str, str]] = frozenset()  # (class, attribute): loaders the
    # program's other files train on as an attribute of an instance (flow.attributes_trained)
    writes_elsewhere: frozenset[str] = frozenset()  # functions of the program's other files that write files (on
    # rank 0 once ported: what this file reads back after calling one waits at a barrier; rank0.writing_functions)
    stepping_elsewhere: dict[str, frozenset[str]] = field(default_factory=dict)  # the program's other files'
    # classes -> their methods that step an optimizer (stepping_methods)
    _backward_sources: list[cst.CSTNode] | None = None
    _training_loaders: list[cst.Call] | None = None
    _own_optimizers: set[str] | None = None
    _stepping: dict[str, frozenset[str]] | None = None

    def statement(self, node: cst.CSTNode) -> cst.BaseStatement:
        """The statement (a line or a compound statement) holding `node`, as it stands in its block."""
        current = node
        for parent in self.ancestors(node):
            if isinstance(current, cst.BaseStatement) and isinstance(parent, cst.IndentedBlock | cst.Module):
                return current
            current = parent
        raise ValueError("node outside any statement")

    def scope(self, node: cst.CSTNode) -> cst.FunctionDef | cst.Module:
        return next((a for a in self.ancestors(node) if isinstance(a, cst.FunctionDef)), self.module)

    def block_of(self, statement: cst.BaseStatement) -> cst.IndentedBlock | cst.Module:
        parent = self.parents[statement]
        assert isinstance(parent, cst.IndentedBlock | cst.Module)
        return parent

    def loops_around(self, node: cst.CSTNode) -> list[cst.For | cst.While]:
        """The loops holding `node`, innermost first, within its function."""
        loops: list[cst.For | cst.While] = []
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, cst.FunctionDef):
                break
            if isinstance(ancestor, cst.For | cst.While):
                loops.append(ancestor)
        return loops

    def is_optimizer_call(self, call: cst.Call) -> bool:
        """`torch.optim.SGD(...)`, a class of the script's or of its program's that is an optimizer (`SAM(...)` from
        sam.py), an optimizer class looked up by name (`getattr(optim, args.optim)(...)`), or a call of what holds
        an optimizer class (`opt_cls = torch.optim.SGD`, `OPTIMIZERS[name]`, either branch of a conditional, a
        function of the program returning one: `get_optimizer(cfg)(params, ...)`)."""
        if self._names_an_optimizer_class(call.func):
            return True
        looked_up = call.func
        if isinstance(looked_up, cst.Call) and self.resolve(looked_up) == "getattr" and looked_up.args:
            return self.resolve(looked_up.args[0].value) in OPTIMIZER_MODULES
        module = self.module_given(call)
        if module is not None:  # `config.init_obj("optimizer", torch.optim, params)`
            return self.resolve(module) in OPTIMIZER_MODULES
        return self._holds_an_optimizer_class(call.func)

    def module_given(self, call: cst.Call) -> cst.BaseExpression | None:
        """For a call of a function of the program that builds an instance of a class it looks up by name on a
        module it is given (builders_by_name), the argument given for that module."""
        own = self.memo.get("builders_by_name")
        if own is None:
            own = self.memo["builders_by_name"] = self.builders_by_name()
        # this file's first, then the program's (set after this file is first read, so not memoised with it)
        found = own.get(last_name(call)) or self.builders_by_name_elsewhere.get(last_name(call))
        if found is None:
            return None
        position, name = found
        positional = [arg.value for arg in call.args if arg.keyword is None and not arg.star]
        if position < len(positional):
            return positional[position]
        return next((arg.value for arg in call.args if arg.keyword is not None and arg.keyword.value == name), None)

    def builders_by_name(self) -> dict[str, tuple[int, str]]:
        """The file's functions and methods returning an instance of a class they look up by name on a module
        they are given (`def init_obj(self, name, module, *args, **kwargs): return getattr(module,
        self[name]["type"])(*args, **kwargs)`, victoresque/pytorch-template's ConfigParser): each name, with that
        parameter's position (a method's without self) and name."""
        found = {}
        for name, function in self.functions.items():
            params = [p.name.value for p in function.params.params]
            params = params[1:] if params[:1] in (["self"], ["cls"]) else params
            for node in self.walk(function.body):
                value = node.value if isinstance(node, cst.Return) else None
                looked_up = value.func if isinstance(value, cst.Call) else None
                if not (isinstance(looked_up, cst.Call) and self.resolve(looked_up) == "getattr" and looked_up.args):
                    continue
                module = looked_up.args[0].value
                if isinstance(module, cst.Name) and module.value in params:
                    found[name] = (params.index(module.value), module.value)
        return found

    def _names_an_optimizer_class(self, node: cst.CSTNode) -> bool:
        name = self.resolve(node) if isinstance(node, cst.Name | cst.Attribute) else ""
        if not name:
            return False
        if _optimizer_class(name) or name in self.own_optimizer_classes():
            return True
        return name.rsplit(".", 1)[-1] in self.optimizers_elsewhere and not name.startswith("torch.")

    def _holds_an_optimizer_class(self, value: cst.BaseExpression) -> bool:
        """What `value` holds, as far as the reading follows it, is an optimizer class (ends of values.origins; a
        dict of classes indexed by a key not written out: any of its values)."""
        if not isinstance(value, cst.Name | cst.Subscript | cst.Call) or (
            isinstance(value, cst.Name) and not self.is_variable(value)
        ):
            return False  # a class or function spelled out (resolved above), not a value held
        for end in origins(self, value):
            if isinstance(end, cst.Subscript):
                end = next(iter(origins(self, end.value)), end)
            branches = [end.body, end.orelse] if isinstance(end, cst.IfExp) else [end]
            if isinstance(end, cst.Dict):
                branches = [element.value for element in end.elements if isinstance(element, cst.DictElement)]
            if isinstance(end, cst.FunctionDef):  # `make_optimizer = build`: what the function returns
                function = self.functions.get(end.name.value, end)  # the scope's binding is a stub without a body
                branches = [n.value for n in self.walk(function.body) if isinstance(n, cst.Return) and n.value]
                if any(isinstance(b, cst.Call) and self.is_optimizer_call(b) for b in branches):
                    return True
            for branch in branches:
                if self._names_an_optimizer_class(branch):
                    return True
                if isinstance(branch, cst.Call) and last_name(branch) in self.optimizer_factories_elsewhere:
                    return last_name(branch) not in self.functions
        return False

    def optimizer_factories(self) -> frozenset[str]:
        """The file's functions whose returned value is an optimizer class (a table's entry, a conditional's
        branch), for the program's other files that call what they return."""
        found = set()
        for name, function in self.functions.items():
            returns = [n.value for n in self.walk(function.body) if isinstance(n, cst.Return) and n.value is not None]
            if any(self._names_an_optimizer_class(value) or self._holds_an_optimizer_class(value) for value in returns):
                found.add(name)
        return frozenset(found)

    def own_optimizer_classes(self) -> set[str]:
        """The classes the script defines on an optimizer: `class SignSGD(torch.optim.Optimizer)`, or on a class of
        its own that is one (worked out once)."""
        if self._own_optimizers is None:
            classes = [node for node in self.order if isinstance(node, cst.ClassDef)]
            found: set[str] = set()
            while more := {c.name.value for c in classes if c.name.value not in found and any(
                    _optimizer_class(base := self.resolve(arg.value)) or base.endswith(".Optimizer") or base in found
                    for arg in c.bases)}:  # fmt: skip
                found |= more
            self._own_optimizers = found
        return self._own_optimizers

    def optimizer_calls(self) -> list[cst.Call]:
        return [call for call in self.calls if self.is_optimizer_call(call)]

    def optimizer_names(self) -> set[str]:
        """Names an optimizer is assigned to (`optimizer`, `self.opt`, `optimizerD`)."""
        names = set()
        for call in self.optimizer_calls():
            parent = self.parents.get(call)
            if isinstance(parent, cst.Assign):
                names |= {dotted(target.target) for target in parent.targets}
        return names - {""}

    def step_calls(self) -> list[cst.Call]:
        """`optimizer.step()` (or `scaler.step(optimizer)`): calls of `.step` on what is an optimizer, by where
        its value comes from (an optimizer's name, a parameter the callers pass an optimizer to, a loop over
        optimizers, a function returning one). Only where nothing in the script says what the receiver is (a
        parameter of a function it never calls) does its name decide (`opt`, `optim`, not a scheduler's)."""
        optimizers = self.optimizer_names()
        return [call for call in self.calls
                if self._steps_an_optimizer(call, optimizers) or self._steps_through_a_method(call)]  # fmt: skip

    def stepping_methods(self) -> dict[str, frozenset[str]]:
        """The methods of this file's classes that step an optimizer (`def step_and_update_lr(self): ...
        self._optimizer.step()`, a schedule's wrapper; SAM's `second_step`, its base optimizer's step), and those
        that call one of them on self (SAM's `step`); of an optimizer class (`class SAM(torch.optim.Optimizer)`),
        every public method but those of torch's Optimizer that do not update (its `first_step` moves the
        parameters too): a call of one on an instance steps as `.step()` does."""
        if self._stepping is None:
            base = {call for call in self.calls if self._steps_an_optimizer(call, self.optimizer_names())}
            self._stepping = {}
            for cls in (node for node in self.order if isinstance(node, cst.ClassDef)):
                methods = {f.name.value: f for f in cls.body.body if isinstance(f, cst.FunctionDef)}
                stepping = {name for name, f in methods.items() if any(n in base for n in self.walk(f))}
                if cls.name.value in self.own_optimizer_classes():
                    stepping |= {name for name in methods if not name.startswith("_") and name not in NOT_STEPS}
                while more := {name for name, f in methods.items() if name not in stepping and any(
                        isinstance(n, cst.Call) and dotted(n.func) in {f"self.{m}" for m in stepping}
                        for n in self.walk(f))}:  # fmt: skip
                    stepping |= more
                if stepping - {"step"}:
                    self._stepping[cls.name.value] = frozenset(stepping)
        return self._stepping

    def _steps_through_a_method(self, call: cst.Call) -> bool:
        """`optimizer.step_and_update_lr()` on an instance of a class (of this file or the program's) whose method
        of that name steps an optimizer; on a receiver nothing here says the class of, the method's name alone,
        where some class of the program has a stepping method so named. Not a class's call on its own self, and
        only where its function back-propagates too (a step follows a backward: `trainer.fit()`, whose method
        steps inside its own loop, is no step of the caller's)."""
        if not isinstance(call.func, cst.Attribute) or call.func.attr.value == "step":
            return False
        method, receiver = call.func.attr.value, call.func.value
        classes = {**self.stepping_elsewhere, **self.stepping_methods()}
        if dotted(receiver) == "self" or not any(method in methods for methods in classes.values()):
            return False
        scope = self.scope(call)
        if not any(self.scope(backward) is scope for backward in backward_calls(self)):
            return False
        ends = origins(self, receiver)
        if any(isinstance(end, cst.Call) and method in classes.get(last_name(end), ()) for end in ends):
            return True
        return self._undecided(receiver)

    def _steps_an_optimizer(self, call: cst.Call, optimizers: set[str]) -> bool:
        if not isinstance(call.func, cst.Attribute) or call.func.attr.value != "step":
            return False
        receiver = call.func.value
        if dotted(receiver) in optimizers or any(self._is_optimizer(arg.value, optimizers) for arg in call.args):
            return True  # `optimizer.step()`, `scaler.step(optimizer)`
        if call.args and self._is_grad_scaler(receiver):
            return True  # `scaler.step(self.optimizer)`: what a GradScaler steps is an optimizer, whatever its path
        if call.args and self._undecided(receiver) and self._is_optimizer(call.args[0].value, optimizers, True):
            return True  # `scaler.step(optimizer)` in a module whose callers are in another file: both parameters
        return self._is_optimizer(receiver, optimizers, by_name=True)

    def _built_elsewhere(self, call: cst.Call) -> bool:
        """A call of another file's function that builds and returns an optimizer (ddpcli.port.rules.wrap)."""
        name = last_name(call)
        return name in self.builders_elsewhere and name not in self.functions

    def _undecided(self, node: cst.CSTNode) -> bool:
        """Whether nothing in this file says what `node` holds (a parameter of a function called from elsewhere)."""
        return all(isinstance(end, cst.Param | cst.Name | cst.Attribute) for end in origins(self, node))

    def _is_grad_scaler(self, node: cst.CSTNode) -> bool:
        """Whether `node` holds an AMP GradScaler (`torch.amp.GradScaler(...)`, `torch.cuda.amp.GradScaler(...)`,
        an imported `GradScaler(...)`), by where its value comes from."""
        ends = origins(self, node)
        return bool(ends) and all(
            isinstance(end, cst.Call) and self.resolve(end.func).rsplit(".", 1)[-1] == "GradScaler" for end in ends
        )

    def _is_optimizer(self, node: cst.CSTNode, optimizers: set[str], by_name: bool = False) -> bool:
        ends = origins(self, node)
        if any(isinstance(end, cst.Call) and self.is_optimizer_call(end) for end in ends):
            return True
        if any(isinstance(end, cst.Call) and self._built_elsewhere(end) for end in ends):
            return True  # `model.configure_optimizers(cfg)`, `build_optimizer(cfg, model)` of another file
        if any(dotted(end) in optimizers for end in ends if isinstance(end, cst.Name | cst.Attribute)):
            return True
        undecided = all(isinstance(end, cst.Param | cst.Name | cst.Attribute) for end in ends)
        tail = dotted(node).rsplit(".", 1)[-1].lower()
        return by_name and undecided and "opt" in tail and "sched" not in tail

    def assigned_in(self, scope: cst.CSTNode, name: str) -> list[cst.BaseStatement]:
        """Statements of `scope` (not of nested functions) assigning `name` (`x = ...`, `x: T = ...`, `for x in`)."""
        found = []
        for node in self.walk(scope):
            if node is scope or self.scope(node) is not scope:
                continue
            targets: list[cst.CSTNode] = []
            if isinstance(node, cst.Assign):
                targets = [target.target for target in node.targets]
            elif isinstance(node, cst.AnnAssign | cst.AugAssign):
                targets = [node.target]
            elif isinstance(node, cst.WithItem) and node.asname is not None:
                targets = [node.asname.name]
            if any(dotted(bound) == name for target in targets for bound in _bound(target)):
                found.append(self.statement(node))
        return found

    def main_guard(self) -> cst.If | None:
        """`if __name__ == "__main__":` (either side) at the top level of the module."""
        for statement in self.module.body:
            test = statement.test if isinstance(statement, cst.If) else None
            if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
                target = test.comparisons[0]
                sides = {dotted(test.left), dotted(target.comparator)} | {
                    string_value(test.left) or "", string_value(target.comparator) or ""}  # fmt: skip
                if isinstance(target.operator, cst.Equal) and {"__name__", "__main__"} <= sides:
                    assert isinstance(statement, cst.If)
                    return statement
        return None

    def backward_sources(self) -> list[cst.CSTNode]:
        """Every expression a back-propagated loss is computed from (ddpcli.script.flow), worked out once a file:
        the program's facts, the sampler and the model's methods ask it."""
        if self._backward_sources is None:
            self._backward_sources = backward_sources(self)
        return self._backward_sources

    def training_loaders(self) -> list[cst.Call]:
        """The loader calls whose batches reach the back-propagated loss (ddpcli.script.flow), whatever their names;
        worked out once a port (the rules ask it per loader)."""
        if self._training_loaders is None:
            self._training_loaders = training_loaders(self, self.backward_sources())
        return self._training_loaders
