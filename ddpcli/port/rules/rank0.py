"""Rank 0 alone writes and talks: torch.save, files opened for writing, images and plots saved, prints, loggers
and writers (TensorBoard, wandb), each statement under `if _is_main:`; a progress bar is disabled elsewhere. A rank
that reads back a file the script saves waits at a barrier first, so rank 0 has written it; so does one reading
back what another file of the program writes (pytorchtools.py's EarlyStopping saving the best weights, read back
by the script after training): in the script, every read; in a module, a read inside a function (one at import
time runs before the program writes anything)."""

from __future__ import annotations

import libcst as cst

from ddpcli.port.context import Port
from ddpcli.port.facts import Facts, dotted, keyword, last_name
from ddpcli.port.pure import PURE_BUILTINS, PURE_METHODS, PURE_MODULES
from ddpcli.port.rules.training import Training
from ddpcli.port.rules.unwrap import model_given
from ddpcli.port.siblings import only_prints
from ddpcli.script.reader import open_mode, opens_its_receiver, opens_to_write
from ddpcli.script.values import origins, reaching

WRITES = {"torch.save", "save_image", "savefig", "imsave", "save_pretrained", "to_csv", "to_json", "dump",
          "np.save", "np.savez", "np.savetxt", "numpy.save", "os.makedirs", "os.mkdir", "write_text", "write_bytes",
          "mkdir", "imwrite", "basicConfig", "shutil.copyfile", "shutil.copy", "shutil.copy2", "shutil.move",
          "copyfile", "shutil.rmtree", "rmtree", "shutil.copytree", "copytree", "os.remove", "os.unlink", "os.rename",
          "os.replace", "os.rmdir", "os.removedirs", "os.symlink", "os.link", "unlink", "rmdir", "touch", "symlink_to",
          "hardlink_to"}  # fmt: skip
# WRITES: what changes the file system, by the name the call resolves to (`shutil.rmtree`) or, where no other call
# is spelled so, by its last name (`path.unlink()`): done by one rank. A folder removed on every rank and made on
# rank 0 alone is a race (rank 1's rmtree after rank 0's makedirs: "Parent directory out does not exist").
LOG_LEVELS = {"debug", "info", "warning", "warn", "error", "critical", "exception", "log"}
WRITER_CLASSES = {"SummaryWriter", "CSVLogger", "TensorBoardLogger"}
WRITERS_BY_MODULE = {"tensorboard_logger.Logger"}  # a class named too plainly to match by its last name alone
LOGGING_MODULES = ("wandb.", "tensorboard_logger.")  # module-level logging functions: configure, log_value
PROGRESS_BARS = ("tqdm", "trange")
FILE_HANDLERS = {"logging.FileHandler", "logging.handlers.RotatingFileHandler", "logging.handlers.WatchedFileHandler",
                 "logging.handlers.TimedRotatingFileHandler"}  # fmt: skip
READS = {"torch.load", "load_state_dict_from_file"}


def writing_functions(facts: Facts) -> frozenset[str]:
    """The names of the file's functions and methods that write files (WRITES, a file opened for writing), or call
    one of the file's that does: what rank 0 alone will write once ported, for the program's other files."""
    defined = [node for node in facts.walk(facts.module) if isinstance(node, cst.FunctionDef)]
    calls = {id(function): [n for n in facts.walk(function.body) if isinstance(n, cst.Call)] for function in defined}
    writing = {function.name.value for function in defined if any(
        facts.resolve(call) in WRITES or last_name(call) in WRITES or _opens_for_writing(call)
        for call in calls[id(function)]
    )}  # fmt: skip
    for _ in range(3):  # a helper calling the file's own save
        writing |= {f.name.value for f in defined if any(last_name(call) in writing for call in calls[id(f)])}
    return frozenset(writing)


def _a_progress_bar(port: Port, value: cst.BaseExpression) -> bool:
    """`value` holds a tqdm bar, as the reader follows it (`pbar = tqdm(total=n)`; `self.pbar`)."""
    return any(isinstance(end, cst.Call) and last_name(end) in PROGRESS_BARS for end in origins(port.facts, value))


def builds_a_writer(facts: Facts, call: cst.Call) -> bool:
    """A TensorBoard, CSV or experiment writer's class called: it opens its files where it is built."""
    return last_name(call) in WRITER_CLASSES or facts.resolve(call) in WRITERS_BY_MODULE


def _opens_for_writing(call: cst.Call) -> bool:
    """The builtin `open`, a module's (`gzip.open(path, "wt")`) or a path's (`fname.open("wt")`), in a mode that
    writes."""
    if dotted(call.func) != "open" and not (isinstance(call.func, cst.Attribute) and call.func.attr.value == "open"):
        return False
    return opens_to_write(call)


def _talks_or_writes(port: Port, call: cst.Call, writers: set[str], loggers: set[str]) -> str | None:
    """What this call does that only rank 0 should, or None."""
    name = port.facts.resolve(call)
    receiver = dotted(call.func.value) if isinstance(call.func, cst.Attribute) else ""
    last = last_name(call)
    if name in ("print", "tqdm.write", "sys.stdout.write") or name.endswith("tqdm.write"):
        return "print"
    if "." in name and only_prints(port.facts.folder, name):  # the script's own progress_bar (utils.py)
        return "print"
    if name in WRITES or last in WRITES:
        return "write"
    if any(receiver == writer or receiver.startswith(f"{writer}.") for writer in writers) or name.startswith(
        LOGGING_MODULES
    ):
        return "logger"  # `writer.add_scalar(...)`, `experiment.config.update(...)`: None on the ranks but 0
    if last == "write" and isinstance(call.func, cst.Attribute) and _a_progress_bar(port, call.func.value):
        return "print"  # `bar.write(...)`: tqdm's write is a class method, it prints where the bar is disabled
    if last in LOG_LEVELS and (receiver in loggers or receiver == "logging" or receiver in ("logger", "log")):
        return "logger"
    return None


def apply(port: Port) -> None:
    facts = port.facts
    writers = {dotted(t.target) for c in facts.calls
               if (builds_a_writer(facts, c) or facts.resolve(c) == "wandb.init")
               and isinstance(a := facts.parents.get(c), cst.Assign) for t in a.targets}  # fmt: skip
    loggers = {dotted(t.target) for c in facts.calls if facts.resolve(c) == "logging.getLogger"
               and isinstance(a := facts.parents.get(c), cst.Assign) for t in a.targets}  # fmt: skip
    written: list[cst.CSTNode] = []  # every write, for the reads that may come after one
    for node in facts.walk(facts.module):
        if isinstance(node, cst.Call) and facts.resolve(node) == "wandb.init":
            _wandb_init(port, node)
            continue
        if isinstance(node, cst.Expr) and isinstance(node.value, cst.Call):
            value = node.value
            if facts.resolve(value) == "wandb.init":
                continue  # the call itself, met next
            what = _talks_or_writes(port, value, writers, loggers)
            if not what:
                continue
            if what == "write":
                written.append(node)
            _script_models_given(port, value)
            line = facts.parents[node]
            if _inside_guard(port, node):
                pass
            elif isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1 and not _has_effects(port, value):
                port.edits.guard(line, "_is_main")
            else:  # its arguments run everywhere (a DDP forward in them), the call on rank 0; or one of a line's
                port.edits.rewrite(value.func, _on_rank_zero)
                port.needs.add("quiet")
            port.change(node, "rank0", f"{port.code(value.func)}(...) on rank 0 only ({what}: once, not once "
                        "per rank)")  # fmt: skip
        elif isinstance(node, cst.With) and any(
            isinstance(item.item, cst.Call) and _opens_for_writing(item.item) for item in node.items
        ):
            written.append(node)
            if _runs_more_than_writes(port, node):  # the training inside a `with open(log, "w")`: every rank runs it
                for item in node.items:
                    if isinstance(item.item, cst.Call) and _opens_for_writing(item.item):
                        _open_on_rank_zero(port, item.item)
                continue
            port.edits.guard(node, "_is_main")
            port.change(node, "rank0", "a file opened for writing: rank 0 writes it, once")
        elif (
            isinstance(node, cst.Call)
            and _opens_for_writing(node)
            and not isinstance(facts.parents.get(facts.parents.get(node)), cst.With)
        ):
            written.append(node)
            _open_on_rank_zero(port, node)
        elif isinstance(node, cst.Call) and facts.resolve(node) == "logging.config.dictConfig" and node.args:
            written.append(node)
            _log_config_on_rank_zero(port, node)
        elif isinstance(node, cst.Call) and facts.resolve(node) in FILE_HANDLERS:
            written.append(node)
            _log_file_on_rank_zero(port, node)
        elif isinstance(node, cst.Call) and builds_a_writer(facts, node):
            shared = not _inside_guard(port, node)
            port.edits.rewrite(node, lambda n, shared=shared: _built_on_rank_zero(n, shared))
            port.needs |= {"quiet", "rank_zero"}
            port.change(node, "rank0", f"{port.code(node.func)} built on rank 0 only; on the other ranks a stand-in "
                        "whose every method does nothing, wherever the program hands it, and whose plain values "
                        "(a log_dir) are rank 0's")  # fmt: skip
        elif isinstance(node, cst.Call) and last_name(node) == "tqdm" and keyword(node, "disable") is None:
            port.edits.rewrite(node, lambda n: n.with_changes(args=[*_with_comma(n.args), cst.Arg(
                cst.parse_expression("not _is_main"), keyword=cst.Name("disable"),
                equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))]))  # fmt: skip
            port.change(node, "rank0", "progress bar shown on rank 0 only")
    written += [call for call in facts.calls
                if last_name(call) in facts.writes_elsewhere and last_name(call) not in facts.functions]  # fmt: skip
    if written or facts.writes_elsewhere:
        _barriers(port, written, everywhere=bool(facts.writes_elsewhere) and not port.module)


def _wandb_init(port: Port, call: cst.Call) -> None:
    """`wandb.init(...)` -> `_ddp_wandb_init(...)`: the run on rank 0, a disabled one with rank 0's config elsewhere
    (the script reads `wandb.config` on every rank; a sweep sets it on rank 0)."""
    port.edits.rewrite(call.func, lambda _: cst.Name("_ddp_wandb_init"))
    port.needs.add("wandb")
    port.needs_group_here(call)
    port.change(call, "rank0", "wandb.init(...) on rank 0; on the other ranks a disabled run (no files, no network, "
                "its calls do nothing) with rank 0's config, so wandb.config reads alike on every rank")  # fmt: skip


def _built_on_rank_zero(call: cst.Call, shared: bool) -> cst.Call:
    """`SummaryWriter(...)` -> `_ddp_rank_zero(lambda: SummaryWriter(...))` (its arguments evaluated on rank 0, as
    the script's)."""
    args = [cst.Arg(cst.Lambda(params=cst.Parameters(), body=call))]
    if not shared:
        args.append(cst.Arg(cst.Name("False"), keyword=cst.Name("shared"), equal=cst.AssignEqual(
            cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))))  # fmt: skip
    return cst.Call(func=cst.Name("_ddp_rank_zero"), args=args)


def _script_models_given(port: Port, call: cst.Call) -> None:
    """A wrapped model handed to what rank 0 alone runs (`writer.add_graph(net, x)`, `print(net)`,
    `wandb.watch(model)`) is the script's model: a DDP forward there is a collective the other ranks never join (and
    jit's trace cannot follow), its repr and hooks are the wrapper's. torch.save's is the unwrap rule's."""
    if port.facts.resolve(call) in ("torch.save",):
        return
    for arg in call.args:
        if (model := model_given(arg.value, set(port.models))) is not None:
            port.needs.add("script_model")
            port.edits.rewrite(arg.value, lambda given: cst.Call(func=cst.Name("_ddp_script_model"),
                                                                 args=[cst.Arg(given)]))  # fmt: skip
            port.change(arg.value, "unwrap", f"{model} handed to {port.code(call.func)}(...), which "
                        f"rank 0 alone runs: the script's model (_ddp_script_model({model})), not its "
                        "DDP wrapper (whose forward is a collective every rank must join, whose repr and hooks are "
                        "the wrapper's)")  # fmt: skip


def _on_rank_zero(func: cst.CSTNode) -> cst.CSTNode:
    """`print` -> `(print if _is_main else _ddp_quiet)`: the call's arguments are evaluated on every rank."""
    assert isinstance(func, cst.BaseExpression)
    return cst.IfExp(test=cst.Name("_is_main"), body=func, orelse=cst.Name("_ddp_quiet"),
                     lpar=[cst.LeftParen()], rpar=[cst.RightParen()])  # fmt: skip


def _has_effects(port: Port, call: cst.Call) -> bool:
    """An argument may do what every rank must do: it calls anything but formatting and reading numbers (a function
    of the program, `print(f"val {evaluate(model, loader)}")`, `print(train_one_epoch(...))`, a model: under DDP a
    collective or a training step), or binds a name the code after it reads (`print(f"{(steps := len(loader))}")`).
    Then the arguments are evaluated on every rank and the print is rank 0's (`_ddp_quiet` elsewhere)."""
    for node in port.facts.walk(call):
        if isinstance(node, cst.NamedExpr):
            return True
        if node is call or not isinstance(node, cst.Call):
            continue
        if not _pure(port, node):
            return True
    return False


def _pure(port: Port, call: cst.Call) -> bool:
    if isinstance(call.func, cst.Name):
        return call.func.value in PURE_BUILTINS and port.facts.resolve(call) in ("", call.func.value)
    if isinstance(call.func, cst.Attribute) and call.func.attr.value in PURE_METHODS:
        return not isinstance(call.func.value, cst.Name) or call.func.value.value not in port.facts.functions
    name = port.facts.resolve(call)
    return name.startswith(PURE_MODULES) and name != "torch.save"


def _runs_more_than_writes(port: Port, block: cst.With) -> bool:
    """The block does what every rank must do: it steps an optimizer, back-propagates, calls a trained model or a
    function of the script (the training loop inside `with open("log.csv", "w") as log:`), leaves the loop or the
    function around it (an early stop's `break` written beside the log line: every rank must leave), or binds a
    name read outside it (every rank reads it)."""
    if Training(port.facts).steps_in(block) or _leaves(port, block) or _binds_what_is_read_outside(port, block):
        return True
    for node in port.facts.walk(block.body):
        if isinstance(node, cst.Call) and (last_name(node) == "backward" or _has_effects(port, node)):
            return True
        if isinstance(node, cst.Call) and dotted(node.func) in port.models:
            return True
    return False


def _leaves(port: Port, block: cst.With) -> bool:
    """A `break` or `continue` of a loop around the block, a `return` or a `raise` out of it: the rank that skipped
    the block would not leave with rank 0."""
    facts = port.facts
    for node in facts.walk(block.body):
        if not isinstance(node, cst.Break | cst.Continue | cst.Return | cst.Raise):
            continue
        for ancestor in facts.ancestors(node):
            if ancestor is block:
                return True
            if isinstance(ancestor, cst.FunctionDef | cst.Lambda | cst.ClassDef):
                break
            if isinstance(ancestor, cst.For | cst.While) and isinstance(node, cst.Break | cst.Continue):
                break
            if isinstance(ancestor, cst.Try) and isinstance(node, cst.Raise):
                break
    return False


def _binds_what_is_read_outside(port: Port, block: cst.With) -> bool:
    """A name bound in the block (`best = total` beside the log line) that a read outside it gets from there (the
    reader's flow: a later block that binds the name again before its read does not count), where the block run on
    rank 0 alone would leave it unbound, or stale, on the other ranks."""
    scope = port.facts.scope_of(block)
    if scope is None:
        return False
    inside = set(port.facts.walk(block))
    bound = {assignment.name for assignment in scope.assignments if assignment.node in inside}
    return any(
        isinstance(access.node, cst.Name) and access.node not in inside and access.node.value in bound
        and any(binding in inside for binding in reaching(port.facts, access.node))
        for access in scope.accesses
    )  # fmt: skip


def _open_on_rank_zero(port: Port, call: cst.Call) -> None:
    """`log = open("log.txt", "w")`: rank 0 opens the file, the others the null device with the same mode, so every
    later `log.write` runs everywhere and lands once. A mode that also reads ("r+", "w+") cannot be emptied so."""
    value = open_mode(call)
    if value is not None and "+" not in value and (opens_its_receiver(call) or _a_path_opened_by_keywords(call)):
        _path_open_on_rank_zero(port, call)  # `fname.open("wt")`: the builtin open of the null device elsewhere
        return
    at = next((i for i, arg in enumerate(call.args) if arg.keyword is None or arg.keyword.value == "file"), None)
    if at is None or (call.args[at].keyword is None and at != 0) or value is None or "+" in value:
        within = isinstance(port.facts.parents.get(call), cst.WithItem)
        where = "in a `with` block every rank runs" if within else "outside a `with`"
        port.cannot(call, f"a file opened for writing {where}: every rank writes it; open it on rank 0 only "
                    "(if _is_main)")  # fmt: skip
        return

    def elsewhere(n: cst.Call) -> cst.Call:
        args = list(n.args)
        args[at] = args[at].with_changes(value=cst.parse_expression("os.devnull"))
        return n.with_changes(args=args)

    port.edits.rewrite(call, lambda n: cst.IfExp(test=cst.Name("_is_main"), body=n, orelse=elsewhere(n)))
    port.change(call, "rank0", f"{port.code(call)} on rank 0; the other ranks write to os.devnull (once, not once "
                "per rank)")  # fmt: skip


def _log_config_on_rank_zero(port: Port, call: cst.Call) -> None:
    """`logging.config.dictConfig(config)`: its file handlers write on rank 0, on the others to os.devnull
    (`_ddp_log_config`, the header's), as a FileHandler built in the script does (victoresque/pytorch-template's
    setup_logging: every rank appended to info.log)."""
    port.needs.add("log_config")
    port.edits.rewrite(call.args[0].value, lambda given: cst.Call(func=cst.Name("_ddp_log_config"),
                                                                   args=[cst.Arg(given)]))  # fmt: skip
    port.change(call, "rank0", "logging.config.dictConfig(...): the configuration's log files are written on rank 0; "
                "the other ranks' file handlers write to os.devnull (one log, not one line per rank)")  # fmt: skip


def _log_file_on_rank_zero(port: Port, call: cst.Call) -> None:
    """`logging.FileHandler(path)`: rank 0's handler writes the file, the others' os.devnull. On every rank, each
    rank opened (and created) the file, in a folder rank 0 alone may make: rank 1 raced rank 0's os.makedirs
    (FileNotFoundError, pytorch-playground's logger); a handler on rank 0 alone would leave the others without the
    object the script configures."""
    at = next((i for i, arg in enumerate(call.args) if (arg.keyword is None and i == 0)
               or (arg.keyword is not None and arg.keyword.value == "filename")), None)  # fmt: skip
    if at is None or call.args[at].star:
        port.cannot(call, "a log file every rank opens: open it on rank 0 only (os.devnull on the others)")
        return

    def elsewhere(n: cst.Call) -> cst.Call:
        args = list(n.args)
        path = args[at].value
        args[at] = args[at].with_changes(value=cst.IfExp(test=cst.Name("_is_main"), body=path,
                                                         orelse=cst.parse_expression("os.devnull")))  # fmt: skip
        return n.with_changes(args=args)

    port.edits.rewrite(call, elsewhere)
    port.change(call, "rank0", f"{port.code(call.func)}(...) writes its file on rank 0; the other ranks' handler "
                "writes to os.devnull (one log, and no rank opens a file in a folder rank 0 makes)")  # fmt: skip


def _with_comma(args: tuple[cst.Arg, ...]) -> list[cst.Arg]:
    if not args:
        return []
    *rest, last = args
    return [*rest, last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))]


def _inside_guard(port: Port, node: cst.CSTNode) -> bool:
    """An enclosing statement already runs on rank 0 alone (a `with open(..., "w")` around a torch.save)."""
    return any(getattr(how, "guard_test", None) == "_is_main"
               for ancestor in port.facts.ancestors(node) for how in port.edits.rewrites.get(ancestor, ()))  # fmt: skip


def _a_path_opened_by_keywords(call: cst.Call) -> bool:
    """`path.open(mode="a", encoding=...)`: a method open given no file, by position or by name."""
    named = {arg.keyword.value for arg in call.args if arg.keyword is not None}
    return (
        isinstance(call.func, cst.Attribute)
        and all(arg.keyword is not None for arg in call.args)
        and not named & {"file", "filename", "name", "fileobj"}
    )


def _path_open_on_rank_zero(port: Port, call: cst.Call) -> None:
    """`path.open("w", ...)` (its receiver the file): rank 0 opens it, the others `open(os.devnull, "w", ...)`."""

    def elsewhere(n: cst.Call) -> cst.Call:
        return cst.Call(func=cst.Name("open"), args=[cst.Arg(cst.parse_expression("os.devnull")), *n.args])

    port.edits.rewrite(call, lambda n: cst.IfExp(test=cst.Name("_is_main"), body=n, orelse=elsewhere(n)))
    port.change(call, "rank0", f"{port.code(call)} on rank 0; the other ranks write to os.devnull (once, not once "
                "per rank)")  # fmt: skip


def _read_back_statement(port: Port, call: cst.Call) -> cst.CSTNode:
    """Where a read-back must wait: before the outermost `with open(...)` of its function around it (the open is
    already the read: rank 0 may not have written the file yet), else before the read's own statement."""
    facts = port.facts
    statement = facts.statement(call)
    for ancestor in facts.ancestors(call):
        if isinstance(ancestor, cst.FunctionDef):
            break
        if isinstance(ancestor, cst.With) and any(
            isinstance(item.item, cst.Call) and dotted(item.item.func) == "open" for item in ancestor.items
        ):
            statement = ancestor
    return statement


def _before_every_write(port: Port, call: cst.Call, written: list[cst.CSTNode]) -> bool:
    """A read that runs once, before anything is written: at module level (in no function, which could be called
    later, and no loop, which could come back to it) and above every write (time_sequence_prediction reads the
    traindata.pt another script wrote, then saves plots)."""
    facts = port.facts
    if any(isinstance(node, cst.FunctionDef | cst.For | cst.While) for node in facts.ancestors(call)):
        return False
    return all(facts.line(node) > facts.line(call) for node in written)


def _barriers(port: Port, written: list[cst.CSTNode], everywhere: bool = False) -> None:
    """Before each read that may come after a write. `everywhere`: the script of a program whose other files write
    (through a function, a method, an object called: which call writes is theirs to know), every read."""
    facts = port.facts
    for call in facts.calls:
        if facts.resolve(call) in READS and (everywhere or not _before_every_write(port, call, written)):
            statement = _read_back_statement(port, call)
            port.edits.insert_before(statement, f"if _ddp:\n    {port.dist}.barrier()  # rank 0 has written it\n")
            port.needs_group_here(statement)
            port.change(call, "barrier", "a barrier before reading back a file: rank 0, which alone writes, has "
                        "written it")  # fmt: skip
