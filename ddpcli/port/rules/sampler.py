"""Each training DataLoader (one iterated by a loop that steps, there or in the function it is given to) is
sharded: `_ddp_shard(DataLoader(...))` rebuilds it under torchrun with a DistributedSampler that keeps its
shuffle and drop_last, the batch the script's own (per device). At the top of each epoch, the loop around the batch
loop calls `set_epoch(epoch)`, so each epoch is a new permutation (without it every epoch repeats the first).
Loaders that do not train (test, validation) stay whole: every rank evaluates the full set."""

from __future__ import annotations

import json

import libcst as cst

from ddpcli.port.context import Port
from ddpcli.port.facts import OPTIMIZER_MODULES, dotted, keyword, last_name, string_value
from ddpcli.port.rules.training import Training
from ddpcli.script.flow import WHOLE, handed, loader_functions, returned_keys
from ddpcli.script.values import origins

# Samplers `_ddp_shard` shards (a DistributedSampler, a split's indices kept, draws with replacement shared out);
# any other is the script's own.
SHARDABLE = ("torch.utils.data.SubsetRandomSampler", "torch.utils.data.RandomSampler",
             "torch.utils.data.SequentialSampler", "torch.utils.data.sampler.SubsetRandomSampler",
             "torch.utils.data.sampler.RandomSampler", "torch.utils.data.sampler.SequentialSampler")  # fmt: skip
OWN = ("sampler", "batch_sampler")


def _own_sampler(port: Port, call: cst.Call) -> str | None:
    """The loader's own sampler where `_ddp_shard` cannot shard it, as the script writes it: the `sampler=` or
    `batch_sampler=` it is given by keyword or through `**kwargs` (a dict the script builds), whatever names it,
    decided by what each value may be (a batch_sampler is always the script's own)."""
    facts = port.facts
    given: list[tuple[str, cst.CSTNode]] = []
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value in OWN:
            given.append((arg.keyword.value, arg.value))
        elif arg.star == "**":
            for mapping in origins(facts, arg.value):
                if isinstance(mapping, cst.Dict):
                    given += [
                        (key, element.value)
                        for element in mapping.elements
                        if isinstance(element, cst.DictElement) and (key := string_value(element.key)) in OWN
                    ]
                elif isinstance(mapping, cst.Call) and facts.resolve(mapping) == "dict":
                    given += [(arg2.keyword.value, arg2.value) for arg2 in mapping.args
                              if arg2.keyword is not None and arg2.keyword.value in OWN]  # fmt: skip
    for kind, value in given:
        ends = origins(facts, value)
        if kind == "batch_sampler" or not all(_shardable(port, end) for end in ends):
            return port.code(value)
    return None


def _shardable(port: Port, node: cst.CSTNode) -> bool:
    if isinstance(node, cst.Name) and node.value == "None":
        return True
    return isinstance(node, cst.Call) and port.facts.resolve(node) in SHARDABLE


def _loader_name(port: Port, call: cst.Call) -> str:
    parent = port.facts.parents.get(call)
    if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
        return dotted(parent.targets[0].target)
    if isinstance(parent, cst.AnnAssign):
        return dotted(parent.target)
    return ""


def _loader_names(port: Port, call: cst.Call) -> list[str]:
    """The names the loader is bound to: its assignment's, or, built by `def prepare_dataloader(...): return
    DataLoader(...)`, the names the calls of that function are assigned to."""
    facts = port.facts
    own = _loader_name(port, call)
    if own or not isinstance(facts.parents.get(call), cst.Return):
        return [own] if own else []
    function = facts.scope(call)
    if not isinstance(function, cst.FunctionDef):
        return []
    found = []
    for other in facts.calls:
        if dotted(other.func).rsplit(".", 1)[-1] == function.name.value and (name := _loader_name(port, other)):
            found.append(name)
    return found


EPOCH_COUNTER = "_ddp_epoch"


COUNTING = ("range", "itertools.count", "tqdm.trange", "tqdm.auto.trange", "tqdm.notebook.trange")
WRAPPERS = ("tqdm",)  # a progress bar over what it is given: `tqdm(range(n))` counts as range(n) does


def _target(loop: cst.For | cst.While) -> str | None:
    """The name a `for` binds (the first of a tuple's)."""
    if isinstance(loop, cst.For):
        target = loop.target
        if isinstance(target, cst.Tuple) and target.elements:
            target = target.elements[0].value
        if isinstance(target, cst.Name):
            return target.value
    return None


def _epoch_of(port: Port, loop: cst.For | cst.While) -> str | None:
    """The name a `for` binds to the count of its passes, what `set_epoch` takes: `for epoch in range(n)` (or a
    progress bar over one, or a name bound to one), `for epoch, lr in enumerate(lrs)`. None for a loop over
    anything else (`for lr in (0.1, 0.05)`, `for phase in ("warmup", "main")`): its passes are counted instead."""
    name = _target(loop)
    if name is None or not isinstance(loop, cst.For):
        return None
    if isinstance(loop.target, cst.Tuple):
        call = loop.iter
        counted = isinstance(call, cst.Call) and port.facts.resolve(call) == "enumerate"
        return name if counted and len(loop.target.elements) == 2 else None
    return name if _counts(port, loop.iter) else None


def _counts(port: Port, node: cst.CSTNode, depth: int = 0) -> bool:
    """Every value `node` may be is a counting call (`range(...)`), seen through names and progress bars."""
    ends = origins(port.facts, node)
    for end in ends:
        if not isinstance(end, cst.Call):
            return False
        name = port.facts.resolve(end)
        if name.rsplit(".", 1)[-1] in WRAPPERS and end.args and depth < 3:
            if not _counts(port, end.args[0].value, depth + 1):
                return False
        elif name not in COUNTING:
            return False
    return bool(ends)


def _factory_sites(port: Port, call: cst.Call) -> list[tuple[cst.Call, str]] | None:
    """`def make_loader(...): return DataLoader(...)`: the calls of that function and the name each is bound to
    (train and val loaders built by one factory are told apart where it is called); None for a loader not built
    so."""
    facts = port.facts
    function = facts.scope(call)
    if not isinstance(facts.parents.get(call), cst.Return) or not isinstance(function, cst.FunctionDef):
        return None
    calls = [other for other in facts.calls if dotted(other.func).rsplit(".", 1)[-1] == function.name.value]
    return [(other, name) for other in calls if (name := _loader_name(port, other))]


def _iterable_dataset(port: Port, call: cst.Call) -> str | None:
    """The class of the loader's data set where it is a torch IterableDataset the script defines (`class
    Stream(IterableDataset)`) and builds in place or by name: a DistributedSampler cannot shard it."""
    facts = port.facts
    if not call.args or call.args[0].keyword is not None:
        return None
    data = call.args[0].value
    if isinstance(data, cst.Name):
        built = [s for s in facts.assigned_in(facts.scope(call), data.value) if isinstance(s, cst.SimpleStatementLine)]
        values = [small.value for s in built for small in s.body if isinstance(small, cst.Assign)]
        data = values[-1] if values else data
    name = dotted(data.func) if isinstance(data, cst.Call) else ""
    definition = next((n for n in facts.order if isinstance(n, cst.ClassDef) and n.name.value == name), None)
    if definition is None:
        return None
    bases = {facts.resolve(base.value).rsplit(".", 1)[-1] for base in definition.bases}
    return name if bases & {"IterableDataset", "IterDataPipe"} else None


def _shard_by_phase(port: Port, training: Training, call: cst.Call) -> bool:
    """`loaders = {x: DataLoader(...) for x in ["train", "val"]}` iterated as `loaders[phase]` in a loop that steps
    where `phase == "train"` (the transfer-learning tutorial): the training phase's loader sharded, the others
    whole; set_epoch on it at the top of the loop around the phase loop."""
    facts = port.facts
    comp = facts.parents.get(call)
    if not (isinstance(comp, cst.DictComp) and comp.value is call and isinstance(comp.for_in.target, cst.Name)):
        return False
    keys = [string_value(e.value) for e in getattr(comp.for_in.iter, "elements", ())]
    name = _loader_name(port, comp)
    if not name or not keys or None in keys:
        return False
    variable = comp.for_in.target.value
    found = None
    for use in training.uses(name):
        subscript = facts.parents.get(use)
        loop = next((a for a in facts.ancestors(use) if isinstance(a, cst.For)), None)
        stepping = loop is not None and training.steps_in(loop)
        if (
            isinstance(subscript, cst.Subscript)
            and stepping
            and any(
                a is loop.iter
                for a in [subscript, *facts.ancestors(subscript)]  # type: ignore[union-attr]
            )
        ):
            found = (loop, subscript)
            break
    if found is None:
        return False
    loop, subscript = found
    index = subscript.slice[0].slice
    phase = dotted(index.value) if isinstance(index, cst.Index) else ""
    found_key = _stepping_key(port, loop, phase, keys)
    if found_key is None:
        return False
    key = json.dumps(found_key, allow_nan=False)  # "train", as the test and the subscript spell it
    port.edits.rewrite(call, lambda n: cst.parse_expression(
        f"_ddp_shard({cst.Module([]).code_for_node(n)}) if {variable} == {key} else "
        f"{cst.Module([]).code_for_node(n)}"))  # fmt: skip
    port.needs.add("shard")
    port.change(call, "sampler", f"{name}[{key}]: a DistributedSampler under torchrun (the phase that steps; the "
                "other phases whole on every rank), keeping its shuffle and drop_last; the batch stays the "
                "script's")  # fmt: skip
    outer = [a for a in facts.loops_around(loop) if _target(a) != phase]
    if outer and isinstance(outer[0].body, cst.IndentedBlock):
        epoch = _epoch_of(port, outer[0])
        if epoch is not None:
            port.edits.insert_before(outer[0].body.body[0], f"if _ddp:\n    {name}[{key}].sampler.set_epoch({epoch})\n")
            port.change(outer[0], "set_epoch", f"{name}[{key}].sampler.set_epoch({epoch}) at the top of each "
                        "epoch: a new shuffle each epoch, the same on every rank")  # fmt: skip
    return True


def _stepping_key(port: Port, loop: cst.For, phase: str, keys: list[str | None]) -> str | None:
    """The key under which the loop steps: `if phase == "train": optimizer.step()` around the step."""
    for step in port.facts.step_calls():
        if not any(a is loop for a in port.facts.ancestors(step)):
            continue
        for ancestor in port.facts.ancestors(step):
            if ancestor is loop:
                break
            test = ancestor.test if isinstance(ancestor, cst.If) else None
            if isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and dotted(test.left) == phase:
                value = string_value(test.comparisons[0].comparator)
                if value in keys and isinstance(test.comparisons[0].operator, cst.Equal):
                    return value
    named = [key for key in keys if key and "train" in key.lower()]
    return named[0] if len(named) == 1 else None


def _inline_loop(port: Port, training: Training, call: cst.CSTNode) -> cst.For | None:
    """The stepping loop that iterates the DataLoader built in its own header (`for x, y in DataLoader(...)`, or
    through enumerate / tqdm)."""
    node = call
    for _ in range(3):
        parent = port.facts.parents.get(node)
        if isinstance(parent, cst.For) and parent.iter is node:
            return parent if training.steps_in(parent) else None
        if isinstance(parent, cst.Arg):
            node = port.facts.parents[parent]
        else:
            return None
    return None


def _shard_inline(port: Port, call: cst.Call, loop: cst.For) -> None:
    """A loader built anew each epoch: sharded with the epoch of the loop around it (its shuffle a new one each
    epoch, as `set_epoch` gives a kept loader), or the rounds of that loop counted."""
    own = _own_sampler(port, call)
    if own is not None:
        port.loaders_not_ported = True
        port.cannot(call, f"this DataLoader draws with its own sampler ({own}): every rank would "
                    "draw the same batches; give each rank its share by _ddp_rank and _ddp_world")  # fmt: skip
        return
    outer = port.facts.loops_around(loop)
    epoch = _epoch_of(port, outer[0]) if outer else None
    args = [cst.Arg(cst.Name(epoch))] if epoch else []
    port.edits.rewrite(call, lambda node: cst.Call(
        func=cst.Name("_ddp_shard"), args=[cst.Arg(node, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(
            " "))) if args else cst.Arg(node), *args]))  # fmt: skip
    port.needs.add("shard")
    each = f"with the epoch {epoch} (a new shuffle each epoch)" if epoch else "(the same shuffle each time it is built)"
    port.change(call, "sampler", f"the DataLoader built in the training loop: a DistributedSampler under torchrun "
                f"{each}; each rank gets its share and the batch stays the script's")  # fmt: skip


def _flow_loops(port: Port, training: Training, call: cst.Call) -> list[tuple[cst.For, cst.CSTNode, str]]:
    """The stepping loops whose batches come from this loader by the way the script hands it on (`source = data`,
    `loaders["fit"]`), with the loader's spelling there: what `set_epoch` is called on."""
    found = []
    for loop in port.facts.order:
        if isinstance(loop, cst.For) and training.steps_in(loop):
            iterated = _iterated(loop.iter)
            if iterated is not None and call in origins(port.facts, iterated, training=True):
                found.append((loop, loop, port.code(iterated)))
    return found


def _iterated(node: cst.BaseExpression) -> cst.BaseExpression | None:
    """The loader a loop's header iterates: itself, or the first argument of enumerate / tqdm / iter."""
    if (
        isinstance(node, cst.Call)
        and node.args
        and dotted(node.func).rsplit(".", 1)[-1] in ("enumerate", "tqdm", "iter")
    ):
        node = node.args[0].value
    return node if isinstance(node, cst.Name | cst.Attribute | cst.Subscript) else None


def _feeds_the_loss(port: Port, site: cst.CSTNode, call: cst.Call, name: str) -> bool:
    """A loader no stepping loop of this file iterates by name: training when its batches reach the back-propagated
    loss (ddpcli.script.flow: through a function's parameters, returns, attributes); by its name only where the
    flow cannot tell: no loader found, or one DataLoader call of a factory serving every site."""
    flow = port.facts.training_loaders()
    if _handed_to_a_step(port, call):
        return True
    if flow and site is call:
        return call in flow
    return "train" in name.lower()


def _trained_where_returned(port: Port, loader: cst.Call) -> bool | None:
    """Whether another file of the program trains on the loader, where its function returns it (alone, or at a key
    of a dict or a position of a tuple) and another file trains on some of what it returns (`loaders["train"]`
    handed to engine.py's loop): build_loaders' "train" loader is sharded, its "val" one is not, whatever their
    names. None where no other file trains on what the function returns, or one hands the whole tuple on to code
    that picks its loader (the names may decide). A loader the function returns whole is sharded at the calls that
    train on it, not here: get_loader(mode="valid") of the same function stays whole (Image_Segmentation's)."""
    function = port.facts.scope(loader)
    kept = _kept_by_a_class_trained_elsewhere(port, loader)
    if kept is not None:
        return kept
    if isinstance(function, cst.Module) and port.facts.names_trained_elsewhere:  # `loader = DataLoader(...)`,
        assigned = port.facts.parents.get(loader)  # imported by a file that trains on it
        targets = [dotted(t.target) for t in assigned.targets] if isinstance(assigned, cst.Assign) else []
        return any(target in port.facts.names_trained_elsewhere for target in targets) or None
    if not isinstance(function, cst.FunctionDef):
        return None
    wanted = port.facts.loaders_trained_elsewhere.get(function.name.value)
    if not wanted:
        return None
    keys = returned_keys(port.facts, function, loader)
    if keys == {None} and function.name.value in loader_functions(port.facts):
        return False  # returned whole: each file calling it to train shards that call (_shard_returned_elsewhere)
    if keys & wanted:
        return True
    if None in wanted and keys - {None}:  # the whole tuple handed on (`Trainer(config, loaders)`), indexed there
        return None
    return False


def _kept_by_a_class_trained_elsewhere(port: Port, loader: cst.Call) -> bool | None:
    """`self.train = DataLoader(...)` in a method of a class whose instances another file of the program trains on
    by that attribute (`dataset = Cifar(...); for batch in dataset.train:`, davda54/sam's data/cifar.py): True;
    False for the class's other loaders (`self.test`), whatever their names; None where no other file trains on
    an attribute of the class."""
    facts = port.facts
    cls = next((a for a in facts.ancestors(loader) if isinstance(a, cst.ClassDef)), None)
    trained = {attr for owner, attr in facts.attributes_trained_elsewhere if cls and owner == cls.name.value}
    names = [name for name in _loader_names(port, loader) if name.startswith("self.") and name.count(".") == 1]
    if not trained or not names:
        return None
    return any(name.removeprefix("self.") in trained for name in names)


def _handed_to_a_step(port: Port, loader: cst.Call) -> bool:
    """The loader is handed to a function of another file of the program whose parameter reaches a backward
    (`engine.train_one_epoch(train_loader)` with the loop in engine.py), by position or keyword."""
    facts, feeding = port.facts, port.facts.feeding_elsewhere
    return any(
        loader in origins(facts, value, into_containers=keys == WHOLE)
        for call in (facts.calls if feeding else [])
        for value, keys in handed(facts, call, feeding)
    )


def _shard_returned_elsewhere(port: Port) -> None:
    """`self.data_loader = dataloader(...)`, the function in another file of the program that builds and returns the
    DataLoader, its batches back-propagated here, or handed to what trains in a third file: `_ddp_shard(dataloader(
    ...))`. Neither file both builds the loader and trains on it (znxlwm/pytorch-generative-model-collections'
    dataloader.py and GAN classes; StarGAN's get_loader in data_loader.py, handed by main.py to solver.py's Solver)."""
    facts, made = port.facts, port.facts.loaders_elsewhere
    if not made:
        return
    reached = set(facts.backward_sources())
    for call in facts.calls:
        name = last_name(call)
        if name not in made or name in facts.functions or (call not in reached and not _handed_to_a_step(port, call)):
            continue
        port.needs.add("shard")
        port.edits.rewrite(call, lambda built: cst.Call(func=cst.Name("_ddp_shard"), args=[cst.Arg(built)]))
        port.change(call, "sampler", f"{port.code(call.func)}(...): the DataLoader another file of the program builds "
                    "and returns, sharded where it is trained on: a DistributedSampler under torchrun keeping its "
                    "shuffle and drop_last, each pass a new epoch's order, alike on every rank")  # fmt: skip


def _training_data_built_by_name(port: Port) -> None:
    """`data_loader = config.init_obj("data_loader", module_data)` (victoresque/pytorch-template): a class looked up
    on a module by a configuration's name (facts.module_given), so which class is the configuration's. Handed to
    the training of another file (`Trainer(..., data_loader=data_loader)`): sharded there, `_ddp_shard(data_loader)`
    deciding at run time (a DataLoader, its split of the data included, is dealt out; anything else stays whole,
    with a warning); the object itself stays the script's (its own methods: `data_loader.split_validation()`).
    Trained on here: named, not guessed."""
    facts, feeding = port.facts, port.facts.feeding_elsewhere
    built = {call for call in facts.calls if _built_by_name(port, call)}
    if not built:
        return
    handed_on: set[cst.Call] = set()
    for call in facts.calls if feeding else []:
        for value, keys in handed(facts, call, feeding):
            made = [end for end in origins(facts, value, into_containers=keys == WHOLE) if end in built]
            if not made or keys != WHOLE:
                continue
            handed_on.update(made)
            port.needs.add("shard")
            port.edits.rewrite(value, lambda given: cst.Call(func=cst.Name("_ddp_shard"), args=[cst.Arg(given)]))
            port.change(value, "sampler", f"{port.code(value)} handed to {port.code(call.func)}(...), which trains on "
                        "it: a class the configuration names, sharded there when it is a DataLoader (a "
                        "DistributedSampler keeping its shuffle, a split's indices dealt out), else left whole with a "
                        "warning")  # fmt: skip
    reached = set(facts.backward_sources())
    for call in sorted(built - handed_on, key=facts.line):
        if call in reached:
            port.loaders_not_ported = True
            port.cannot(call, f"{port.code(call)}: a class the configuration names: if it is the training data's "
                        "loader, it is not sharded (which class it builds is the configuration's); give it a "
                        "DistributedSampler (rank _ddp_rank of _ddp_world), and call its set_epoch each "
                        "epoch")  # fmt: skip


def _built_by_name(port: Port, call: cst.Call) -> bool:
    """A call of the program's builder by name (facts.module_given), of no optimizer, and not the model it wraps."""
    module = port.facts.module_given(call)
    if module is None or port.facts.resolve(module) in OPTIMIZER_MODULES:
        return False
    assigned = port.facts.parents.get(call)
    targets = [dotted(t.target) for t in assigned.targets] if isinstance(assigned, cst.Assign) else []
    return not any(target in port.models for target in targets)


def apply(port: Port) -> None:
    facts = port.facts
    training = Training(facts)
    _shard_returned_elsewhere(port)
    _training_data_built_by_name(port)
    for call in facts.calls:
        if facts.resolve(call).rsplit(".", 1)[-1] != "DataLoader":
            continue
        if _shard_by_phase(port, training, call):
            continue
        inline = _inline_loop(port, training, call)
        if inline is not None:
            _shard_inline(port, call, inline)
            continue
        sites = _factory_sites(port, call)
        if sites is None:
            names = _loader_names(port, call)
            sites = [(call, name) for name in names[:1]] or [(call, "")]
        shard = []
        for site, name in sites:
            loops = training.batch_loops(name) if name else []
            if not loops and site is call:
                loops = _flow_loops(port, training, call)
            returned = _trained_where_returned(port, call)  # the program's answer, where it has one
            if loops or (_feeds_the_loss(port, site, call, name) if returned is None else returned):
                shard.append((site, name, loops))
        if not shard:
            continue
        name = shard[0][1]
        own = _own_sampler(port, call)
        if own is not None:
            port.loaders_not_ported = True
            port.cannot(call, f"{name or 'this DataLoader'} draws with its own sampler ({own}): "
                        "every rank would draw the same batches; give each rank its share by _ddp_rank and "
                        "_ddp_world")  # fmt: skip
            continue
        iterable = _iterable_dataset(port, call)
        if iterable is not None:
            port.loaders_not_ported = True
            port.cannot(call, f"{name or 'this DataLoader'} iterates an IterableDataset ({iterable}): a "
                        "DistributedSampler cannot shard it, so every rank would train on the same samples; "
                        "have its __iter__ yield every _ddp_world-th sample from _ddp_rank")  # fmt: skip
            continue
        batch = keyword(call, "batch_size")
        per_device = f" ({port.code(batch.value)} per device)" if batch is not None else ""
        for site, name, loops in shard:
            port.edits.rewrite(site, lambda node: cst.Call(func=cst.Name("_ddp_shard"), args=[cst.Arg(node)]))
            port.needs.add("shard")
            port.change(site, "sampler", f"{name or 'the DataLoader'}: a DistributedSampler under torchrun, keeping "
                        f"its shuffle and drop_last; each rank gets its share of every epoch and the batch stays the "
                        f"script's{per_device}, so the global batch is world size x it")  # fmt: skip
            _set_epochs(port, name, loops, global_loader=isinstance(port.facts.scope(site), cst.Module))


def _epoch_loops(port: Port, at: cst.CSTNode, reachable: bool) -> list[cst.For | cst.While]:
    """The loop around the batch loop (or around the call that hands it the loader); for a loader its callers
    reach too (module-level, or kept in `self.`: `def train(epoch): for batch in loader`), the loop around that
    function's calls (`self._run_epoch(epoch)`)."""
    facts = port.facts
    outer = facts.loops_around(at)
    if outer or not reachable or not isinstance(scope := facts.scope(at), cst.FunctionDef):
        return outer[:1]
    callers = [c for c in facts.calls if dotted(c.func).rsplit(".", 1)[-1] == scope.name.value]
    return [loops[0] for c in callers if (loops := facts.loops_around(c))]


def _set_epochs(port: Port, name: str, loops: list[tuple[cst.For, cst.CSTNode, str]], global_loader: bool) -> None:
    seen: set[int] = set()
    for loop, at, spelling in loops:
        for epoch_loop in _epoch_loops(port, at, global_loader or spelling.startswith("self.")):
            _set_epoch(port, spelling, loop, at, epoch_loop, seen)


def _built_in(port: Port, loader: str, epoch_loop: cst.For | cst.While) -> bool:
    """`loader` is bound inside `epoch_loop` (a DataLoader built each epoch): set_epoch at the loop's top would read
    it before its first binding, and name last epoch's loader after that."""
    inside = set(port.facts.walk(epoch_loop.body))
    return any(statement in inside for statement in port.facts.assigned_in(port.facts.scope(epoch_loop), loader))


def _set_epoch(port: Port, name: str, loop: cst.For, at: cst.CSTNode, epoch_loop: cst.For | cst.While,
               seen: set[int]) -> None:  # fmt: skip
    loader = name if at is loop else port.code(next(a.value for a in at.args if dotted(a.value) == name))
    if id(epoch_loop) in seen or (id(epoch_loop), loader) in port.epochs_set:
        return
    seen.add(id(epoch_loop))
    port.epochs_set.add((id(epoch_loop), loader))
    if _built_in(port, loader, epoch_loop):
        port.change(epoch_loop, "set_epoch", f"{loader} is built anew in each pass of this loop: no set_epoch (it "
                    "would name the loader before it is built); each pass over a sharded loader that no set_epoch "
                    "names is the next epoch of the process's count, the same on every rank")  # fmt: skip
        return
    epoch = _epoch_of(port, epoch_loop)
    body = epoch_loop.body
    if not isinstance(body, cst.IndentedBlock):
        port.cannot(epoch_loop, f"{name}: this epoch loop is on one line; call "
                    f"{name}.sampler.set_epoch(epoch) at the top of each epoch")  # fmt: skip
        return
    if epoch is None:  # `while epoch < n:`, `for self.epoch in ...`, `for lr in lrs`: count the loop's rounds
        if id(epoch_loop) not in port.counted_loops:
            port.counted_loops.add(id(epoch_loop))
            start = f"if _ddp:\n    {EPOCH_COUNTER} = 0  # epochs begun: the shuffle's seed\n"
            port.edits.insert_before(epoch_loop, start)
            port.edits.insert_before(body.body[0], f"if _ddp:\n    {EPOCH_COUNTER} += 1\n")
        epoch = f"{EPOCH_COUNTER} - 1"
    port.edits.insert_before(body.body[0], f"if _ddp:\n    {loader}.sampler.set_epoch({epoch})\n")
    port.change(epoch_loop, "set_epoch", f"{loader}.sampler.set_epoch({epoch}) at the top of each epoch: a "
                "new shuffle each epoch, the same on every rank")  # fmt: skip
