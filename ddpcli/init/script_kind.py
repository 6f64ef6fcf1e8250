"""What kind of script this is, read from its syntax tree: which argument parser it builds, which frameworks it
imports, which optimizer class it constructs. Nothing is run.

`ddpcli init` runs `--help` only for a script that builds a parser that answers it (argparse, click, typer,
HfArgumentParser, jsonargparse / LightningCLI, Fire, ...). A script that builds none is never started: given
`--help` it would simply train (a script that reads `sys.argv` by hand, or nanoGPT's configurator, which asserts).
A comment or a string that mentions "argparse" decides nothing: only imports and calls count. The script's own
folder's modules that it imports are read too (one level), since `get_args()` often lives in a `utils.py`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst

from ddpcli.errors import UserError
from ddpcli.init.derived import Derivation, derivations
from ddpcli.script.flow import training_loaders
from ddpcli.script.frameworks import (
    DATA_PARALLEL_CALLS,
    FABRIC_CLASSES,
    FABRIC_SETTINGS,
    FRAMEWORKS,
    OPTIMIZER_CLASSES,
    SELF_LAUNCHING,
    TORCH_OPTIM,
    Framework,
    is_trainer,
)
from ddpcli.script.modules import imported_names, module_file
from ddpcli.script.reader import Reader, keyword, last_name, opens_to_write, string_value
from ddpcli.script.source import NotPython, read
from ddpcli.script.values import is_loader, sources

# A call of one of these (as its import resolves it) builds a parser; the first kind found in this order wins.
PARSER_CALLS = (
    ("lightning_cli", ("lightning.pytorch.cli.LightningCLI", "pytorch_lightning.cli.LightningCLI",
                       "lightning.pytorch.cli.LightningCLI.__init__")),
    ("jsonargparse", ("jsonargparse.ArgumentParser", "jsonargparse.CLI", "jsonargparse.auto_cli")),
    ("hf", ("transformers.HfArgumentParser", "transformers.hf_argparser.HfArgumentParser")),
    ("typer", ("typer.Typer", "typer.run")),
    ("click", ("click.command", "click.group", "click.option", "click.argument")),
    ("fire", ("fire.Fire",)),
    ("argparse", ("argparse.ArgumentParser",)),
    ("other_parser", ("docopt.docopt", "tyro.cli", "simple_parsing.ArgumentParser", "simple_parsing.parse",
                      "absl.app.run", "hydra.main")),
)  # fmt: skip
KINDS_THAT_ANSWER_HELP = {kind for kind, _ in PARSER_CALLS}
MAX_LOCAL_MODULES = 20  # a script importing half a repository: the first twenty are enough to find its parser


@dataclass(frozen=True)
class Found:
    """A value the source holds, where: `lr=2e-05` at line 42."""

    value: object
    line: int
    how: str


@dataclass
class ScriptFacts:
    """What the source says, for init's decisions."""

    kind: str  # a PARSER_CALLS kind, "configurator", "hand" (reads sys.argv itself) or "none"
    frameworks: set[str] = field(default_factory=set)
    optimizers: list[Found] = field(default_factory=list)  # optimizer kinds the source constructs
    literals: dict[str, Found] = field(default_factory=dict)  # role-named literals: lr=2e-5, batch_size=16
    warmups: list[Found] = field(default_factory=list)  # warmups the script builds itself
    checkpoints: list[Found] = field(default_factory=list)  # relative file names it saves and loads in its cwd
    derivations: list[Derivation] = field(default_factory=list)  # values it derives from the world size
    data_parallel: list[str] = field(default_factory=list)  # evidence: "init_process_group(...) at line 12"
    fabric: tuple[str, ...] | None = None  # Fabric(...) built: the settings its constructor passes itself
    fabric_launches: bool = False  # fabric.launch(...): LT_CLI_USED would make Fabric refuse it
    lightning_cli: cst.Call | None = None
    tree: Reader | None = None
    classes: dict[str, cst.ClassDef] = field(default_factory=dict)

    @property
    def runs_help(self) -> bool:
        return self.kind in KINDS_THAT_ANSWER_HELP


def read_source(path: Path) -> Reader:
    """The script read by ddpcli.script (port's reader too): a UTF-8 byte order mark and an encoding cookie
    (`# -*- coding: latin-1 -*-`) honoured as the interpreter honours them, a syntax error at Python's line."""
    try:
        return Reader.of(read(path))
    except NotPython as error:
        raise UserError(f"{error}, so it has no flags to read") from None
    except cst.ParserSyntaxError as error:  # Python parses it, libcst's grammar does not (a newer syntax)
        raise UserError(f"{path}:{error.raw_line}: not read ({error.message}), so it has no flags to read") from None


def script_facts(path: Path, literal_names: dict[str, str], roots: tuple[Path, ...] = ()) -> ScriptFacts:
    """The facts of the script at `path` and of the modules of its own folder it imports.

    `literal_names` maps a normalised name (`batch_size`, `learning_rate`) to the role it plays, for the literals
    a script hard-codes where it has no flag.
    """
    tree = read_source(path)
    facts = _facts_of(tree, literal_names)
    facts.tree = tree
    facts.derivations = derivations(tree)
    for local in _local_modules(tree, [path.parent, *roots]):
        if local.resolve() == path.resolve():
            continue
        other = _facts_of(read_source(local), literal_names)
        if facts.kind in {"none", "hand"} and other.runs_help:
            facts.kind = other.kind
        facts.frameworks |= other.frameworks
        facts.data_parallel += other.data_parallel
        facts.fabric = facts.fabric if facts.fabric is not None else other.fabric
        facts.fabric_launches |= other.fabric_launches
        facts.optimizers += other.optimizers
        facts.warmups += other.warmups
        facts.checkpoints += other.checkpoints
        facts.classes = {**other.classes, **facts.classes}
    return facts


def _facts_of(tree: Reader, literal_names: dict[str, str]) -> ScriptFacts:
    resolved = [(node, tree.resolve(node)) for node in tree.calls]  # source order: the first literal is the file's
    kind = next(
        (kind for kind, names in PARSER_CALLS for _, name in resolved if name in names),
        "configurator" if _exec_of_a_file(tree) else "hand" if _reads_argv(tree) else "none",
    )
    facts = ScriptFacts(kind=kind)
    imported = tree.imports()
    used = {name for _, name in resolved} | {tree.resolve(base.value) for node in tree.order
                                             if isinstance(node, cst.ClassDef) for base in node.bases}  # fmt: skip
    facts.frameworks = {framework.name for framework in FRAMEWORKS if _drives(framework, imported, used)}
    facts.lightning_cli = next((node for node, name in resolved if name in PARSER_CALLS[0][1]), None)
    facts.data_parallel = _data_parallel_evidence(tree, resolved, imported)
    fabrics = [node for node, name in resolved if name in FABRIC_CLASSES]
    if fabrics:
        given = {arg.keyword.value for node in fabrics for arg in node.args if arg.keyword is not None}
        facts.fabric = tuple(sorted(given & set(FABRIC_SETTINGS)))
        facts.fabric_launches = any(name.endswith(".launch") for _, name in resolved)
    facts.classes = {node.name.value: node for node in tree.module.body if isinstance(node, cst.ClassDef)}
    _calls(tree, facts, literal_names, resolved)
    facts.checkpoints = _relative_checkpoints(tree)
    for node in tree.order:
        _assigned_literals(tree, facts, literal_names, node)
    return facts


def _drives(framework: Framework, imported: set[str], used: set[str]) -> bool:
    """The script is written for `framework`: it imports it and, where the framework names what drives a training
    (its Accelerator, its Trainer or LightningModule), calls or builds a class on one of those."""

    def within(name: str) -> bool:
        return any(name == prefix or name.startswith(prefix + ".") for prefix in framework.imports)

    if not any(within(name) for name in imported):
        return False
    return not framework.drivers or any(within(n) and n.rsplit(".", 1)[-1] in framework.drivers for n in used)


def _calls(
    tree: Reader, facts: ScriptFacts, literal_names: dict[str, str], resolved: list[tuple[cst.Call, str]]
) -> None:
    """Optimizers constructed, warmups built, and role-named keywords (`lr=2e-5`); the batch size of the training
    loader (the one whose batches reach the back-propagated loss) before any other loader's."""
    batched = [call for call in tree.calls if is_loader(tree, call) and keyword(call, "batch_size") is not None]
    training = training_loaders(tree) if len(batched) > 1 else []  # one loader: no flow (and no scopes) to read
    for call in training:
        batch = keyword(call, "batch_size")
        if batch is not None:
            _literal(tree, facts, literal_names, "batch_size", batch.value, f"{last_name(call)}(batch_size=...)")
    for node, name in resolved:
        last = name.rsplit(".", 1)[-1]
        kind = optimizer_class_kind(name)
        if kind is not None:
            facts.optimizers.append(Found(kind, tree.line(node), f"{last}(...)"))
        before = len(facts.warmups)
        for arg in node.args:
            if arg.keyword is not None:
                how = f"{last}({arg.keyword.value}=...)"
                _literal(tree, facts, literal_names, arg.keyword.value, arg.value, how)
        if "warmup" in last.lower() and len(facts.warmups) == before:  # no literal warmup said it already
            facts.warmups.append(Found(None, tree.line(node), f"{last}(...)"))


def _assigned_literals(tree: Reader, facts: ScriptFacts, names: dict[str, str], node: cst.CSTNode) -> None:
    """`{"lr": 2e-5}`, `lr = 2e-5`, `lr: float = 2e-5`, `lr, bs = 2e-5, 16`: role-named literals."""
    if isinstance(node, cst.Dict):
        for element in node.elements:
            key = string_value(element.key) if isinstance(element, cst.DictElement) else None
            if key is not None and isinstance(element, cst.DictElement):
                _literal(tree, facts, names, key, element.value, f"{{{key!r}: ...}}")
    elif isinstance(node, cst.Assign) and len(node.targets) == 1:
        target = node.targets[0].target
        if isinstance(target, cst.Name):
            _literal(tree, facts, names, target.value, node.value, f"{target.value} = ...")
        elif isinstance(target, cst.Tuple) and isinstance(node.value, cst.Tuple):
            for element, value in zip(target.elements, node.value.elements, strict=False):
                if isinstance(element.value, cst.Name):
                    _literal(tree, facts, names, element.value.value, value.value, f"{element.value.value} = ...")
    elif isinstance(node, cst.AnnAssign) and isinstance(node.target, cst.Name) and node.value is not None:
        name = node.target.value
        _literal(tree, facts, names, name, node.value, f"{name}: ... (a default)")


# A script is data-parallel when it joins a process group or wraps its model itself, or when a library that does
# both for it drives the training (its Trainer, Accelerator, Fabric, deepspeed.initialize, ddpcli.runtime): the
# lists are ddpcli.script.frameworks', port's too.


def _data_parallel_evidence(tree: Reader, resolved: list[tuple[cst.Call, str]], imported: set[str]) -> list[str]:
    """Why the script is data-parallel ("init_process_group(...) at line 12", "imports accelerate"), or []."""
    evidence = [
        f"{name.rsplit('.', 1)[-1]}(...) at line {tree.line(node)}"
        for node, name in resolved
        if name.rsplit(".", 1)[-1] in DATA_PARALLEL_CALLS or is_trainer(name)
    ]
    evidence += [
        f"imports {prefix}"
        for prefix in SELF_LAUNCHING
        if any(name == prefix or name.startswith(prefix + ".") for name in imported)
    ]
    return evidence


def optimizer_class_kind(name: str) -> str | None:
    """ddpcli's optimizer kind for a constructed class (`torch.optim.Adadelta` -> other), None if not one."""
    last = name.rsplit(".", 1)[-1]
    if last in OPTIMIZER_CLASSES:
        return OPTIMIZER_CLASSES[last]
    inside = name.startswith(TORCH_OPTIM) and name.count(".") == 2  # not torch.optim.lr_scheduler.X
    return "other" if inside and last[:1].isupper() and last != "Optimizer" else None


def _literal(tree: Reader, facts: ScriptFacts, names: dict[str, str], name: str | None, value: cst.CSTNode,
             how: str) -> None:  # fmt: skip
    """Record `lr=2e-5` (a keyword, a dict key or an assignment) under its role, the first one found."""
    role = names.get((name or "").lower())
    if role is None or not isinstance(value, cst.Integer | cst.Float):
        return
    number = value.evaluated_value
    text = how.replace("...", repr(number))
    if role == "warmup_steps" and number > 0:
        facts.warmups.append(Found(number, tree.line(value), text))
    facts.literals.setdefault(role, Found(number, tree.line(value), text))


CHECKPOINT_NAME = re.compile(r"[\w.-]+\.(pt|pth|ckpt|safetensors|tar)")


SAVES = ("torch.save", "torch.jit.save", "numpy.save", "safetensors.torch.save_file")
SAVE_NAMES = ("save", "save_file", "save_checkpoint", "save_state_dict", "save_pretrained")


def _relative_checkpoints(tree: Reader) -> list[Found]:
    """File names such as "snapshot.pt" used as a path on their own (not joined to a directory) where the script
    writes them: it saves (and may resume) them in its working directory, which every run of a sweep would
    otherwise share. A file it only reads (`x, y = torch.load("data.pt")`) is its data, where it lies: not one."""
    joined = {
        argument.value
        for node in tree.calls
        if last_name(node) in ("join", "Path", "joinpath")
        for argument in node.args[1:]
    } | {
        node.right
        for node in tree.order
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Divide)
    }
    written = _written_paths(tree)
    found = []
    for node in tree.order:
        value = string_value(node)
        if value is not None and node not in joined and node in written and CHECKPOINT_NAME.fullmatch(value):
            found.append(Found(value, tree.line(node), repr(value)))
    return found


def _written_paths(tree: Reader) -> set[cst.CSTNode]:
    """Every node a save's or a writing open's arguments are computed from, as the reader follows them (names to
    their bindings, a function's parameters to what its calls pass: `def keep(state, path): torch.save(state,
    path)`), so the literal a path comes from is among them."""
    found: set[cst.CSTNode] = set()
    for call in tree.calls:
        name = tree.resolve(call)
        writes = name in SAVES or last_name(call) in SAVE_NAMES or (name == "open" and opens_to_write(call))
        for argument in call.args if writes else ():
            found |= set(sources(tree, argument.value))
    return found


def _divides(node: cst.BinaryOperation) -> bool:
    return isinstance(node.operator, cst.Divide)


def _exec_of_a_file(tree: Reader) -> bool:
    """nanoGPT's `exec(open('configurator.py').read())` at module level, after config globals."""
    for statement in tree.module.body:
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
        call = small.value if isinstance(small, cst.Expr) else None
        if (
            isinstance(call, cst.Call)
            and tree.resolve(call) == "exec"
            and any(isinstance(inner, cst.Call) and tree.resolve(inner) == "open" for inner in tree.walk(call))
        ):
            return True
    return False


def _reads_argv(tree: Reader) -> bool:
    """`sys.argv` (or `argv` imported from sys), by what the name resolves to."""
    for node in tree.order:
        if isinstance(node, cst.Attribute) and node.attr.value == "argv" and tree.resolve(node) == "sys.argv":
            return True
        if isinstance(node, cst.Name) and tree.is_variable(node) and tree.resolve(node) == "sys.argv":
            return True
    return False


def _local_modules(tree: Reader, roots: list[Path]) -> list[Path]:
    """The `.py` files under `roots` (the script's folder; for `-m`, also the folder it runs from) that the
    script imports: `import utils`, `from model import GPT`, `from pkg.args import parse`, `from pkg import args`."""
    found: list[Path] = []
    for name in dict.fromkeys(imported_names(tree)):
        for root in roots:
            candidate = module_file(root, name)
            if candidate is not None and candidate not in found:
                found.append(candidate)
    return found[:MAX_LOCAL_MODULES]


def module_source(module: str, search: list[Path]) -> Path | None:
    """The source file `python -m MODULE` would run, found without importing anything (None if not found)."""
    parts = module.split(".")
    for root in search:
        base = root.joinpath(*parts)
        for candidate in (base.with_suffix(".py"), base / "__main__.py"):
            if candidate.is_file():
                return candidate
    return None
