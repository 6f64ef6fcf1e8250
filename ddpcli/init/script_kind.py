"""What kind of script this is, read from its syntax tree: which argument parser it builds, which frameworks it
imports, which optimizer class it constructs. Nothing is run.

`ddpcli init` runs `--help` only for a script that builds a parser that answers it (argparse, click, typer,
HfArgumentParser, jsonargparse / LightningCLI, Fire, ...). A script that builds none is never started: given
`--help` it would simply train (a script that reads `sys.argv` by hand, or nanoGPT's configurator, which asserts).
A comment or a string that mentions "argparse" decides nothing: only imports and calls count. The script's own
folder's modules that it imports are read too (one level), since `get_args()` often lives in a `utils.py`.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

from ddpcli.errors import UserError
from ddpcli.init.derived import Derivation, derivations
from ddpcli.script.frameworks import (
    DATA_PARALLEL_CALLS,
    FABRIC_CLASSES,
    FABRIC_SETTINGS,
    FRAMEWORKS,
    OPTIMIZER_CLASSES,
    SELF_LAUNCHING,
    TORCH_OPTIM,
    is_trainer,
)
from ddpcli.script.source import NotPython, parse_ast, read

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
    lightning_cli: ast.Call | None = None
    tree: ast.Module | None = None
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)

    @property
    def runs_help(self) -> bool:
        return self.kind in KINDS_THAT_ANSWER_HELP


def read_source(path: Path) -> ast.Module:
    """The syntax tree as Python builds it (ddpcli.script.source, port's reader too): a UTF-8 byte order mark and an
    encoding cookie (`# -*- coding: latin-1 -*-`) honoured as the interpreter honours them, a syntax error at
    Python's line."""
    try:
        return parse_ast(read(path))
    except NotPython as error:
        raise UserError(f"{error}, so it has no flags to read") from None


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


def _facts_of(tree: ast.Module, literal_names: dict[str, str]) -> ScriptFacts:
    aliases = _import_aliases(tree)
    # In the file's order (ast.walk is breadth-first: a loader wrapped in a call, as the port's
    # `_ddp_shard(DataLoader(...))`, came after every unwrapped one): the first literal of a role is the file's first.
    calls = sorted((node for node in ast.walk(tree) if isinstance(node, ast.Call)),
                   key=lambda node: (node.lineno, node.col_offset))  # fmt: skip
    resolved = [(node, _resolve(_dotted(node.func), aliases)) for node in calls]
    kind = next(
        (kind for kind, names in PARSER_CALLS for _, name in resolved if name in names),
        "configurator" if _exec_of_a_file(tree) else "hand" if _reads_argv(tree, aliases) else "none",
    )
    facts = ScriptFacts(kind=kind)
    imported = set(aliases.values())
    facts.frameworks = {
        framework.name
        for framework in FRAMEWORKS
        if any(name == prefix or name.startswith(prefix + ".") for name in imported for prefix in framework.imports)
    }
    facts.lightning_cli = next((node for node, name in resolved if name in PARSER_CALLS[0][1]), None)
    facts.data_parallel = _data_parallel_evidence(resolved, imported)
    fabrics = [node for node, name in resolved if name in FABRIC_CLASSES]
    if fabrics:
        facts.fabric = tuple(sorted({kw.arg for node in fabrics for kw in node.keywords if kw.arg in FABRIC_SETTINGS}))
        facts.fabric_launches = any(name.endswith(".launch") for _, name in resolved)
    facts.classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    for node, name in resolved:
        last = name.rsplit(".", 1)[-1]
        kind = optimizer_class_kind(name)
        if kind is not None:
            facts.optimizers.append(Found(kind, node.lineno, f"{last}(...)"))
        before = len(facts.warmups)
        for keyword in node.keywords:
            _literal(facts, literal_names, keyword.arg, keyword.value, f"{last}({keyword.arg}=...)")
        if "warmup" in last.lower() and len(facts.warmups) == before:  # no literal warmup said it already
            facts.warmups.append(Found(None, node.lineno, f"{last}(...)"))
    facts.checkpoints = _relative_checkpoints(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    _literal(facts, literal_names, key.value, value, f"{{{key.value!r}: ...}}")
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            _literal(facts, literal_names, node.targets[0].id, node.value, f"{node.targets[0].id} = ...")
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            _literal(facts, literal_names, node.target.id, node.value, f"{node.target.id}: ... (a default)")
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Tuple):
            values = node.value.elts if isinstance(node.value, ast.Tuple) else []
            for target, value in zip(node.targets[0].elts, values, strict=False):
                if isinstance(target, ast.Name):
                    _literal(facts, literal_names, target.id, value, f"{target.id} = ...")
    return facts


# A script is data-parallel when it joins a process group or wraps its model itself, or when a library that does
# both for it drives the training (its Trainer, Accelerator, Fabric, deepspeed.initialize, ddpcli.runtime): the
# lists are ddpcli.script.frameworks', port's too.


def _data_parallel_evidence(resolved: list[tuple[ast.Call, str]], imported: set[str]) -> list[str]:
    """Why the script is data-parallel ("init_process_group(...) at line 12", "imports accelerate"), or []."""
    evidence = [
        f"{name.rsplit('.', 1)[-1]}(...) at line {node.lineno}"
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


def _literal(facts: ScriptFacts, names: dict[str, str], name: str | None, value: ast.AST, how: str) -> None:
    """Record `lr=2e-5` (a keyword, a dict key or an assignment) under its role, the first one found."""
    role = names.get((name or "").lower())
    if role is None or not isinstance(value, ast.Constant):
        return
    number = value.value
    if isinstance(number, bool) or not isinstance(number, int | float):
        return
    if role == "warmup_steps" and number > 0:
        facts.warmups.append(Found(number, value.lineno, how.replace("...", repr(number))))
    facts.literals.setdefault(role, Found(number, value.lineno, how.replace("...", repr(number))))


CHECKPOINT_NAME = re.compile(r"[\w.-]+\.(pt|pth|ckpt|safetensors|tar)")


def _relative_checkpoints(tree: ast.Module) -> list[Found]:
    """File names such as "snapshot.pt" used as a path on their own (not joined to a directory): the script
    saves or resumes them in its working directory, which every run of a sweep would otherwise share."""
    joined = {
        id(argument)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and _dotted(node.func).rsplit(".", 1)[-1] in ("join", "Path", "joinpath")
        for argument in node.args[1:]
    } | {id(node.right) for node in ast.walk(tree) if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)}
    return [
        Found(node.value, node.lineno, repr(node.value))
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in joined
        and CHECKPOINT_NAME.fullmatch(node.value)
    ]  # fmt: skip


def _import_aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> what it is: `np` -> numpy, `ArgumentParser` -> argparse.ArgumentParser."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                aliases[alias.asname or top] = alias.name if alias.asname else top
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


def _dotted(node: ast.AST) -> str:
    """`torch.optim.AdamW` for an attribute chain on a name; the last name otherwise (`make().AdamW` -> AdamW)."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    elif isinstance(node, ast.Call):
        return _dotted(node.func) if not parts else parts[0]
    return ".".join(reversed(parts))


def _resolve(dotted: str, aliases: dict[str, str]) -> str:
    head, _, rest = dotted.partition(".")
    origin = aliases.get(head)
    return (f"{origin}.{rest}" if rest else origin) if origin else dotted


def _exec_of_a_file(tree: ast.Module) -> bool:
    """nanoGPT's `exec(open('configurator.py').read())` at module level, after config globals."""
    for node in tree.body:
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name)
            and node.value.func.id == "exec"
            and any(isinstance(inner, ast.Call) and _dotted(inner.func) == "open" for inner in ast.walk(node))
        ):
            return True
    return False


def _reads_argv(tree: ast.Module, aliases: dict[str, str]) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "argv" and _dotted(node.value) == "sys":
            return True
        if isinstance(node, ast.Name) and aliases.get(node.id) == "sys.argv":
            return True
    return False


def _local_modules(tree: ast.Module, roots: list[Path]) -> list[Path]:
    """The `.py` files under `roots` (the script's folder; for `-m`, also the folder it runs from) that the
    script imports: `import utils`, `from model import GPT`, `from pkg.args import parse`, `from pkg import args`."""
    dotted: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            dotted += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            dotted += [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
    found: list[Path] = []
    for name in dict.fromkeys(dotted):
        for root in roots:
            base = root.joinpath(*name.split("."))
            for candidate in (base.with_suffix(".py"), base / "__init__.py"):
                if candidate.is_file() and candidate not in found:
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
