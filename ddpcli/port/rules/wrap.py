"""Every trained model (one whose parameters an optimizer is built from: several in a GAN) is wrapped in
DistributedDataParallel under torchrun, after it is on its device and before its optimizer, rebinding its own name:

    if _ddp:
        model = _DDPModel(model)

`_DDPModel` (the header's) is DistributedDataParallel that is still the script's model for everything but the
training forward, wherever the program reaches it: its attributes and methods, state_dict's names, deepcopy and
pickling (ddpcli.port.rules.unwrap lists where this script does). `nn.DataParallel` (one process, several GPUs) is
skipped under torchrun, each process having one device, and its `module.` names are kept.
"""

from __future__ import annotations

import re

import libcst as cst

from ddpcli.port.context import Port
from ddpcli.port.facts import CONTAINERS, Facts, dotted, last_name
from ddpcli.port.rules import unused
from ddpcli.port.rules.training import Training, parameter_for
from ddpcli.script.flow import PARAMETER_METHODS, parameter_methods
from ddpcli.script.layers import classes_of, unreached_in
from ddpcli.script.values import held, origins

STILL_THE_MODEL = ("the wrapper (_DDPModel) is still the script's model for its attributes, methods, state_dict and "
                   "copies, wherever the program uses them")  # fmt: skip


def trained_models(port: Port, optimizer: cst.Call) -> list[str]:
    """The models to wrap for `optimizer`: those whose parameters it takes, or, for a module container nothing
    calls (`trainable_list = nn.ModuleList([])`, RepDistiller's), each module put in it: DDP averages in the
    backward of its own forward, and the loop calls what the container holds, never the container."""
    found: list[str] = []
    for model in models_trained(port.facts, optimizer):
        found += [name for name in (_held_modules(port.facts, model) or [model]) if name not in found]
    return found


CONTAINER_CLASSES = ("ModuleList", "ModuleDict")
PUT_IN = ("append", "extend", "insert", "add_module")


def _held_modules(facts: Facts, container: str) -> list[str]:
    """The names a module container never called is given (in its constructor's list, or by `.append(x)`), each a
    name the file binds; [] where `container` is not such a container."""
    built = [node.value for node in facts.order if isinstance(node, cst.Assign) and isinstance(node.value, cst.Call)
             and any(dotted(target.target) == container for target in node.targets)]  # fmt: skip
    if not built or not all(last_name(call) in CONTAINER_CLASSES for call in built):
        return []
    if any(dotted(call.func) == container for call in facts.calls):
        return []  # called: the container is the model
    given = [element.value for call in built for arg in call.args[:1] if isinstance(arg.value, cst.List | cst.Tuple)
             for element in arg.value.elements]  # fmt: skip
    puts = [call for call in facts.calls if isinstance(call.func, cst.Attribute) and call.func.attr.value in PUT_IN
            and dotted(call.func.value) == container]  # fmt: skip
    given += [arg.value for call in puts for arg in call.args[-1:]]
    names = [dotted(value) for value in given if isinstance(value, cst.Name | cst.Attribute) and dotted(value)]
    return list(dict.fromkeys(names)) if names and len(names) == len(given) else []


def optimizer_builders(facts: Facts) -> dict[str, tuple[tuple[str, ...], str]]:
    """The file's functions that build an optimizer over a model they are given and do not train it themselves
    (`def build_optimizer(cfg, model): return SGD(model.parameters(), lr=cfg.lr)`), or a model's method over its
    own (`def configure_optimizers(self, cfg)`): name -> (its parameters, a method's without `self`, and the
    model's, `self` for the model the method is called on). Another file of the program that calls one wraps what
    it passes."""
    found: dict[str, tuple[tuple[str, ...], str]] = {}
    training = Training(facts)
    for optimizer in facts.optimizer_calls():
        scope = facts.scope(optimizer)
        if not isinstance(scope, cst.FunctionDef) or training.steps_in(scope):
            continue
        params = tuple(p.name.value for p in scope.params.params if p.name.value not in ("self", "cls"))
        method = any(isinstance(a, cst.ClassDef) for a in facts.ancestors(scope))
        for model in models_trained(facts, optimizer):
            if model in params or (model == "self" and method):  # minGPT's `model.configure_optimizers(config)`
                found.setdefault(scope.name.value, (params, model))
    return found


def models_trained(facts: Facts, optimizer: cst.Call) -> list[str]:
    """`model` in SGD(model.parameters()), [{"params": g.parameters()}], chain(a.parameters(), b.parameters()),
    a method of the program's classes yielding parameters (`model.get_1x_lr_params()`),
    `params = [p for p in model.parameters() if ...]` given by name, or groups a loop fills (`for n, p in
    model.named_parameters(): backbone.append(p)`): whatever the optimizer's arguments hold, as the reader follows
    them (ddpcli.script.values.held)."""
    found: list[str] = []
    yielding = facts.parameter_methods or parameter_methods(facts)  # the program's, or this file's
    for arg in optimizer.args:
        for node in held(facts, arg.value):
            if (
                isinstance(node, cst.Call)
                and isinstance(node.func, cst.Attribute)
                and (node.func.attr.value in PARAMETER_METHODS or node.func.attr.value in yielding)
                and (name := _model_object(dotted(_unindexed(node.func.value))))
                and name not in found
            ):
                found.append(name)
    return found


def _unindexed(node: cst.CSTNode) -> cst.CSTNode:
    """The module a submodule is taken from by indexing (`model[2]`, `model.layers[-1]`, `self.net.blocks[0]`):
    the expression before the first index, whose name the model is."""
    inner = node
    while isinstance(inner, cst.Subscript | cst.Attribute):
        if isinstance(inner, cst.Subscript):
            node = inner.value
        inner = inner.value
    return node


def _model_object(name: str) -> str:
    """The model itself where the optimizer takes a submodule's parameters (`model_conv.fc.parameters()`, the
    transfer-learning tutorial's fixed feature extractor): DDP wraps the module that is called, never a part of it
    (its frozen parameters are not all-reduced: DDP syncs those that require grad). `self.model.fc` -> `self.model`."""
    parts = name.split(".")
    return ".".join(parts[:2]) if parts[0] == "self" and len(parts) > 1 else parts[0]


def _parameters_of(scope: cst.CSTNode) -> set[str]:
    if isinstance(scope, cst.FunctionDef):
        return {param.name.value for param in scope.params.params + scope.params.kwonly_params}
    return set()


def wrap_point(port: Port, optimizer: cst.Call, model: str) -> tuple[cst.BaseStatement, bool] | None:
    """The statement to put the wrap before (False) or after (True): in the innermost block that assigned the model
    before the optimizer's statement, just before that statement, unless the model moves to its device after it."""
    facts = port.facts
    scope = facts.scope(optimizer)
    assigned = facts.assigned_in(scope, model)
    level = facts.statement(optimizer)
    while True:
        block = facts.block_of(level)
        body = list(block.body)
        index = body.index(level)
        holders = {id(s) for s in body[: index + 1]}
        if any(id(a) in holders or any(id(x) in holders for x in facts.ancestors(a)) for a in assigned):
            break
        if block is facts.module or (isinstance(scope, cst.FunctionDef) and block is scope.body):
            if model.split(".")[0] in _parameters_of(scope) | {"self"}:
                break  # a model given to the function that trains it: wrapped there
            return _where_the_global_is(port, scope, model) if isinstance(scope, cst.FunctionDef) else None
        level = facts.statement(facts.parents[block])
    moves = re.compile(rf"^\s*{re.escape(model)}(\s*=\s*{re.escape(model)})?\s*\.\s*(to|cuda)\(")
    later = [s for s in body[index + 1 :] if moves.match(port.code(s)) or _moves_under_a_test(port, s, moves)]
    if later:
        return later[-1], True
    capture = _first_capture(port, body[:index], assigned, model)
    return (capture, False) if capture is not None else (level, False)


def _moves_under_a_test(port: Port, statement: cst.BaseStatement, moves: re.Pattern[str]) -> bool:
    """`if torch.cuda.is_available(): model = model.cuda()` (RepDistiller's): the move, one `if` down; the wrap goes
    after the `if`, on the device (DDP over CPU parameters cannot broadcast them with nccl)."""
    if not isinstance(statement, cst.If) or not isinstance(statement.body, cst.IndentedBlock):
        return False
    return any(moves.match(port.code(inner)) for inner in statement.body.body)


def _where_the_global_is(port: Port, function: cst.FunctionDef, model: str) -> tuple[cst.BaseStatement, bool] | None:
    """A function that builds its optimizer over a model it reads from the module (meliketoy's wide-resnet: `net`
    built at the top level, `def train(epoch)` makes its SGD from `net.parameters()` every epoch): the wrap goes in
    the module's code, once, after the last statement that assigns or moves the model before the function is first
    called there, directly or through the script's functions; in the innermost block holding both (the `__main__`
    guard's), else the block around it (a later `net = ...`, a reload for testing, is not what trains)."""
    facts = port.facts
    if "." in model:
        return None
    callers = _callers(port, function.name.value)
    calls = [call for call in facts.calls if dotted(call.func) in callers and facts.scope(call) is facts.module]
    if not calls:
        return None
    assigned = {id(statement) for statement in facts.assigned_in(facts.module, model)}
    moves = re.compile(rf"^\s*{re.escape(model)}(\s*=\s*{re.escape(model)})?\s*\.\s*(to|cuda)\(")
    level = facts.statement(min(calls, key=facts.line))
    while True:
        block = facts.block_of(level)
        body = list(block.body)
        found = [s for s in body[: body.index(level)] if not isinstance(s, cst.FunctionDef | cst.ClassDef)
                 and (moves.match(port.code(s)) or any(id(n) in assigned for n in facts.walk(s)))]  # fmt: skip
        if found:
            return found[-1], True
        if block is facts.module:
            return None
        level = facts.statement(facts.parents[block])


def _callers(port: Port, name: str) -> set[str]:
    """`name` and the script's top-level functions that call it, however deep (`main()` calling `train(epoch)`)."""
    functions = [s for s in port.facts.module.body if isinstance(s, cst.FunctionDef)]
    found, grown = {name}, True
    while grown:
        grown = False
        for function in functions:
            if function.name.value not in found and any(isinstance(node, cst.Call) and dotted(node.func) in found
                                                        for node in port.facts.walk(function)):  # fmt: skip
                found.add(function.name.value)
                grown = True
    return found


def _first_capture(
    port: Port, before: list[cst.BaseStatement], assigned: list[cst.CSTNode], model: str
) -> cst.BaseStatement | None:
    """The first statement after the model's assignment, in the wrap's block, that keeps a reference to it (a list
    of the models, `nets = [net_SGD, net_Adam]`, or another name bound to it): the wrap goes before it, or what the
    training later reads through that reference would be the model, not its wrapper (MorvanZhou's optimizer
    comparison trains through its list of nets)."""
    holders = [i for i, statement in enumerate(before) if any(
        a is statement or statement in port.facts.ancestors(a) for a in assigned)]  # fmt: skip
    if not holders:
        return None
    for statement in before[holders[-1] + 1 :]:
        if any(_keeps(node, model) for node in port.facts.walk(statement)):
            return statement
    return None


def _put_in_point(port: Port, optimizer: cst.Call, model: str) -> tuple[cst.BaseStatement, bool] | None:
    """For a module an optimizer takes through a container nothing calls (_held_modules): before the first statement
    that puts it in a container, in that statement's block (a branch's module is wrapped in its branch, where it is
    bound: RepDistiller's regressor exists only for `--distill hint`)."""
    containers = [m for m in models_trained(port.facts, optimizer) if model in _held_modules(port.facts, m)]
    if not containers:
        return None
    for node in port.facts.order:
        if isinstance(node, cst.Call | cst.List | cst.Tuple) and _keeps(node, model):
            return port.facts.statement(node), False
    return None


def _keeps(node: cst.CSTNode, model: str) -> bool:
    """`other = model`, a list, tuple, set or dict written with the model among its values, or the model put in a
    container (`module_list.append(model)`)."""
    if isinstance(node, cst.Assign):
        return dotted(node.value) == model
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in PUT_IN:
        return any(dotted(arg.value) == model for arg in node.args)
    values = [getattr(element, "value", None) for element in node.elements] if isinstance(node, CONTAINERS) else []
    return any(value is not None and dotted(value) == model for value in values)


def _moved_elsewhere(port: Port, optimizer: cst.Call, model: str) -> list[tuple[cst.BaseStatement, str]]:
    """`target = model.to(...)` statements outside the optimizer's function, when that function never moves the
    model: DDP wraps what is on its device (the optimizer keeps the same parameters: `.to` moves them in place)."""
    facts = port.facts
    scope = facts.scope(optimizer)
    here = re.compile(rf"\b{re.escape(model)}\s*\.\s*(to|cuda)\(")
    if here.search(port.code(scope)):
        return []
    there = re.compile(rf"^([\w.]+)\s*=\s*{re.escape(model)}\s*\.\s*(to|cuda)\(")
    found = []
    for node in facts.walk(facts.module):
        if isinstance(node, cst.SimpleStatementLine) and facts.scope(node) is not scope:
            match = there.match(port.code(node))
            if match:
                found.append((node, match.group(1)))
    return found


def _wrap_after(port: Port, optimizer: cst.Call, statement: cst.BaseStatement, target: str) -> None:
    port.edits.insert_after(statement, _wrapping(port, statement, target))
    port.change(statement, "ddp_wrap", f"{target} wrapped in DistributedDataParallel under torchrun once it is on "
                "its device (its optimizer, built before, holds the same parameters): each backward averages its "
                f"gradients across ranks; {STILL_THE_MODEL}")  # fmt: skip


def _wrapping(port: Port, statement: cst.BaseStatement, model: str) -> str:
    """The lines that wrap `model` in DDP under torchrun, placed at `statement`: the model counts as trained, and the
    process group must be up by then."""
    port.needs.add("ddp")
    port.needs_group_here(statement)
    if model not in port.models:
        port.models.append(model)
    return _wrap_code(port, statement, model)


def _wrap_code(port: Port, statement: cst.CSTNode, model: str, each: str = "", sequence: str = "list") -> str:
    """`if _ddp: model = DistributedDataParallel(model)` (for a list of models, `each` the name its comprehension
    gave one: `nets = [_DDPModel(net) for net in nets]`), then each rank's randomness its own (once per script):
    where training starts, if that is later in the same block (what is drawn before it, a random split of the data
    or synthetic data, stays rank 0's on every rank), else right after the wrap."""
    one = each or model
    wrapped = f"_DDPModel({_ddp_arguments(port, model, one, f'each model of {model}' if each else model)})"
    if each:
        wrapped = _each(wrapped, each, model, sequence)
    code = f"if _ddp:\n{_sync_batchnorm(port, model, each, sequence)}    {model} = {wrapped}\n"
    port.needs.add("seed")
    start = _training_after(port, statement)
    if start is None:
        code += "_ddp_seed()\n"
    elif id(start) not in port.seeded:
        port.seeded.add(id(start))
        port.edits.insert_before(start, "_ddp_seed()\n")
    if not any(change.kind == "rng" for change in port.changes):
        port.change(statement, "rng", "once the DDP wrap has given every rank rank 0's parameters, where training "
                    "starts, each rank's torch RNG is offset by its rank under torchrun (torch.manual_seed(initial "
                    "seed + rank) on ranks but 0, once; random's and numpy's streams likewise): noise, dropout and "
                    "augmentation drawn per step differ across ranks, as each of N devices' samples would; what is "
                    "drawn before (a random split of the data) is alike on every rank; rank 0 and python keep the "
                    "script's RNG streams")  # fmt: skip
    return code


def _ddp_arguments(port: Port, model: str, one: str, label: str) -> str:
    """`one` (the model, or the name a list's comprehension gives each of its models), and
    `find_unused_parameters=True` where the script drops an output only some layers make, or the model's class
    builds a layer its forward may not reach."""
    found = unused.dropped_layers(port, model)
    if found is not None:
        call, layers = found
        port.change(call, "ddp_wrap", f"{label} wrapped with find_unused_parameters=True: this call drops the output "
                    f"of {', '.join(layers)}, whose parameters then get no gradient in that backward (without it, DDP "
                    "waits for them and the next forward fails)")  # fmt: skip
        return f"{one}, find_unused_parameters=True"
    unreached = _unreached_layers(port, model)
    if not unreached:
        return one
    named = "; ".join(f"{cls}.{', '.join(layers)}" for cls, layers in unreached.items())
    port.change(port.facts.statement(_assigned(port, model)[0]), "ddp_wrap", f"{label} wrapped with "
                f"find_unused_parameters=True: its class builds layers its forward calls only under a condition, or "
                f"never ({named}), whose parameters then get no gradient in a backward (without it, DDP waits for "
                "them and the next forward fails)")  # fmt: skip
    return f"{one}, find_unused_parameters=True"


def _unreached_layers(port: Port, model: str) -> dict[str, list[str]]:
    """The classes `model` is built from (`model = Net()`, `nets = [Net(False), Net(True)]`), in this file or
    another of the program, with the layers their forward may not reach (ddpcli.script.layers)."""
    known = {**port.facts.program_classes, **classes_of(port.facts)}
    ends = [_built_by(end) for value in _assigned(port, model) for end in origins(port.facts, value)]
    classes = [dotted(end.func).rsplit(".", 1)[-1] for end in ends if isinstance(end, cst.Call)]
    return unreached_in(known, list(dict.fromkeys(classes)))


RETURN_THE_MODULE = ("to", "cuda", "cpu", "float", "double", "half", "bfloat16", "train", "eval", "requires_grad_")


def _built_by(end: cst.CSTNode) -> cst.CSTNode:
    """`Generator(...).to(device)` (ProGAN's) is the Generator built: nn.Module's methods that return the module."""
    while (isinstance(end, cst.Call) and isinstance(end.func, cst.Attribute)
           and end.func.attr.value in RETURN_THE_MODULE and isinstance(end.func.value, cst.Call)):  # fmt: skip
        end = end.func.value
    return end


def _assigned(port: Port, model: str) -> list[cst.BaseExpression]:
    """What the script assigns to `model` (`model = Net().to(device)`, `nets = [Net(False), Net(True)]`), in any
    scope: the value of each single-target assignment naming it."""
    return [
        node.value
        for node in port.facts.walk(port.facts.module)
        if isinstance(node, cst.Assign) and len(node.targets) == 1 and dotted(node.targets[0].target) == model
    ]


def _training_after(port: Port, statement: cst.CSTNode) -> cst.BaseStatement | None:
    """The first statement after `statement` in its block that trains (holds an optimizer step, or calls the
    script's function that does), if any."""
    block = port.facts.block_of(statement)  # type: ignore[arg-type]
    body = list(block.body)
    index = next((i for i, item in enumerate(body) if item is statement), None)
    if index is None:
        return None
    training = Training(port.facts)
    return next((later for later in body[index + 1 :] if training.steps_in(later)), None)


def _builder(port: Port, optimizer: cst.Call, model: str) -> tuple[str, cst.FunctionDef | cst.Lambda] | None:
    """The function that builds the optimizer from a model it is given, and does not train it itself, with the name
    it is called by: a def, or a lambda bound to a name (`make_optimizer = lambda m: SGD(m.parameters())`)."""
    lam = next((a for a in port.facts.ancestors(optimizer) if isinstance(a, cst.Lambda | cst.FunctionDef)), None)
    if isinstance(lam, cst.Lambda):
        bound = port.facts.parents.get(lam)
        names = [t.target.value for t in bound.targets if isinstance(t.target, cst.Name)] if isinstance(
            bound, cst.Assign) else []  # fmt: skip
        params = {param.name.value for param in lam.params.params}
        return (names[0], lam) if names and model in params else None
    scope = port.facts.scope(optimizer)
    if not isinstance(scope, cst.FunctionDef) or model not in _parameters_of(scope):
        return None
    return None if Training(port.facts).steps_in(scope) else (scope.name.value, scope)


def _wrap_at_calls(port: Port, helper: str, function: cst.FunctionDef | cst.Lambda, model: str) -> None:
    facts = port.facts
    calls = [call for call in facts.calls if dotted(call.func).rsplit(".", 1)[-1] == helper]
    for call in calls:
        argument = next((a.value for a in call.args if parameter_for(function, call, a.value) == model), None)
        _wrap_before_builder(port, call, helper, _receiver(call) if model == "self" else argument, "")


def _iterated(port: Port, optimizer: cst.Call, model: str) -> str | None:
    """`nets` where the model is the variable of a comprehension or loop over the list that holds the models, and
    the optimizer is built inside it: `[Adam(net.parameters()) for net in nets]`, `for net in nets: opts.append()`."""
    for node in port.facts.walk(optimizer):
        if isinstance(node, cst.Name) and node.value == model and port.facts.is_variable(node):
            for binder in port.facts.values_of(node):
                if isinstance(binder, cst.CompFor | cst.For) and dotted(binder.target) == model:
                    return dotted(binder.iter) or None
    return None


def _wrap_each(port: Port, optimizer: cst.Call, container: str, model: str) -> None:
    """`if _ddp: nets = [_DDPModel(net) for net in nets]`, where the list is assigned, before the optimizers are
    built from its models: a list the script writes out (its models are what it holds), else said, not guessed."""
    ends = [end for value in _assigned(port, container) for end in origins(port.facts, value, into_containers=False)]
    point = wrap_point(port, optimizer, container) if ends else None
    if point is None or not all(isinstance(end, cst.List | cst.Tuple | cst.ListComp) for end in ends):
        port.cannot(optimizer, f"{model}: each model of {container} has an optimizer built here, and the port cannot "
                    f"tell what {container} holds where it is assigned; wrap each in DistributedDataParallel "
                    "yourself once it is on its device")  # fmt: skip
        return
    sequence = "tuple" if all(isinstance(end, cst.Tuple) for end in ends) else "list"
    _place_wrap(port, point, container, _wrap_code(port, point[0], container, each=model, sequence=sequence))
    port.change(optimizer, "ddp_wrap", f"each model of {container} wrapped in DistributedDataParallel under torchrun, "
                "after the list is built and before the optimizers built from its models: each backward averages "
                f"its gradients across ranks, so every rank steps the same; {STILL_THE_MODEL}")  # fmt: skip


def _each(expression: str, each: str, container: str, sequence: str) -> str:
    """`[expression for each in container]`, a tuple where the script wrote one."""
    return f"tuple({expression} for {each} in {container})" if sequence == "tuple" else (
        f"[{expression} for {each} in {container}]")  # fmt: skip


def _place_wrap(port: Port, point: tuple[cst.BaseStatement, bool], model: str, code: str) -> None:
    """The wrap's lines before (or after) the statement, the process group up by then, the model counted trained."""
    statement, after = point
    (port.edits.insert_after if after else port.edits.insert_before)(statement, code)
    port.needs.add("ddp")
    port.needs_group_here(statement)
    if model not in port.models:
        port.models.append(model)


def _sync_batchnorm(port: Port, model: str, each: str = "", sequence: str = "list") -> str:
    """A script with BatchNorm: on GPUs its statistics over the global batch, as one device computed them over B
    (SyncBatchNorm runs on GPUs only: on the CPU each rank keeps its own, and compare names the difference)."""
    if not port.facts.builds_layer("BatchNorm"):
        return ""
    converted = f"torch.nn.SyncBatchNorm.convert_sync_batchnorm({each or model})"
    if each:
        converted = _each(converted, each, model, sequence)
    return (f"    if torch.cuda.is_available():  # BatchNorm statistics over the global batch, as on one device\n"
            f"        {model} = {converted}\n")  # fmt: skip


def _wrap_at_builders_elsewhere(port: Port) -> None:
    """`optimizer = build_optimizer(cfg, model)` where another file of the program defines build_optimizer
    (optimizer_builders): the model passed is wrapped before the call, as for the file's own builder."""
    facts = port.facts
    for call in facts.calls:
        helper = last_name(call)
        if helper not in facts.builders_elsewhere or helper in facts.functions:
            continue
        params, model = facts.builders_elsewhere[helper]
        positional = [arg.value for arg in call.args if arg.keyword is None and not arg.star]
        keyed = {arg.keyword.value: arg.value for arg in call.args if arg.keyword is not None}
        index = params.index(model) if model in params else -1
        argument = keyed.get(model, positional[index] if index < len(positional) else None) if index >= 0 else None
        argument = _receiver(call) if model == "self" else argument
        _wrap_before_builder(port, call, helper, argument, " of another file of the program")


def _receiver(call: cst.Call) -> cst.CSTNode | None:
    """The model a method builds its own optimizer for (`model.configure_optimizers(cfg)`): the call's receiver."""
    return call.func.value if isinstance(call.func, cst.Attribute) else None


def _wrap_before_builder(port: Port, call: cst.Call, helper: str, argument: cst.CSTNode | None, where: str) -> None:
    """The model `argument` wrapped before `call` of a function that builds its optimizer (said not ported where
    the argument spells no name)."""
    name = dotted(argument) if argument is not None else ""
    if not name:
        port.cannot(call, f"{helper}(...) builds the optimizer of a model it is given: wrap that "
                    "model in DistributedDataParallel yourself before this call")  # fmt: skip
        return
    if where and name in port.models:  # another file's builder of a model this file's own rule wrapped
        return
    statement = port.facts.statement(call)
    port.edits.insert_before(statement, _wrapping(port, statement, name))
    port.change(call, "ddp_wrap", f"{name} wrapped in DistributedDataParallel under torchrun before "
                f"{helper}(...){where} builds its optimizer: each backward averages its gradients across "
                f"ranks; {STILL_THE_MODEL}")  # fmt: skip


def _built_under_a_test(port: Port, optimizer: cst.Call, wrap_before: cst.CSTNode) -> bool:
    """The optimizer is built only where a test holds, and the wrap would run whether or not it does: a branch of
    a conditional expression or `and`/`or` in its statement (`Adam(...) if fine_tune_encoder else None`), or an
    `if` around its statement that is not around the wrap."""
    facts = port.facts
    statement = facts.statement(optimizer)
    node: cst.CSTNode = optimizer
    for ancestor in facts.ancestors(optimizer):
        if ancestor is statement:
            break
        if isinstance(ancestor, cst.IfExp) and node is not ancestor.test:
            return True
        if isinstance(ancestor, cst.BooleanOperation) and node is ancestor.right:
            return True
        node = ancestor
    around_wrap = set(facts.ancestors(wrap_before))
    for ancestor in facts.ancestors(statement):
        if isinstance(ancestor, cst.FunctionDef | cst.ClassDef):
            return False
        if isinstance(ancestor, cst.If) and ancestor not in around_wrap:
            return True
    return False


def apply(port: Port) -> None:
    facts = port.facts
    _wrap_at_builders_elsewhere(port)
    done: set[tuple[str, int]] = set()
    for optimizer in facts.optimizer_calls():
        for model in trained_models(port, optimizer):
            key = (model, id(facts.scope(optimizer)))
            if key in done:
                continue
            done.add(key)
            helper = _builder(port, optimizer, model)
            if helper is not None:  # `def make_optimizer(model): return SGD(model.parameters())`: wrap at its calls
                _wrap_at_calls(port, *helper, model)
                continue
            moved = _moved_elsewhere(port, optimizer, model)
            if moved:  # the DDP tutorial's Trainer: `self.model = model.to(gpu_id)` after the optimizer is built
                for statement, target in moved:
                    _wrap_after(port, optimizer, statement, target)
                continue
            container = _iterated(port, optimizer, model)
            if container is not None:  # `opts = [Adam(net.parameters()) for net in nets]`: each model of the list
                _wrap_each(port, optimizer, container, model)
                continue
            held = _put_in_point(port, optimizer, model)
            point = held or wrap_point(port, optimizer, model)
            if point is None:
                port.cannot(optimizer, f"{model}: its optimizer is built where the model is not assigned; wrap it "
                            "in DistributedDataParallel yourself after it is on its device")  # fmt: skip
                continue
            code = _wrap_code(port, point[0], model)
            # a module a container holds may have nothing to train (a loss without parameters), nor may one whose
            # optimizer is built only under a test (a frozen encoder, fine-tuned on a flag)
            if held is not None or _built_under_a_test(port, optimizer, point[0]):
                code = code.replace(
                    "if _ddp:\n", f"if _ddp and any(p.requires_grad for p in {model}.parameters()):\n", 1
                )
            _place_wrap(port, point, model, code)
            port.change(optimizer, "ddp_wrap", f"{model} wrapped in DistributedDataParallel under torchrun, after "
                        "it is on its device and before its optimizer: each backward averages its gradients "
                        f"across ranks, so every rank steps the same; {STILL_THE_MODEL}")  # fmt: skip
