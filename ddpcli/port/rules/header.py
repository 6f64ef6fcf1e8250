"""The few lines the port adds at the top, after the script's imports: what it imports for DDP, the rank and world
read from torchrun's environment (absent: one process, rank 0, the script's own path), the process-group setup,
and the helpers the other rules used. The setup runs where the script starts (its `if __name__ == "__main__":`,
else right after these lines) and `destroy_process_group` where it ends."""

from __future__ import annotations

import libcst as cst

from ddpcli.port.context import Port
from ddpcli.port.edits import statements
from ddpcli.port.facts import import_aliases

RANKS = """
# ddpcli port: under torchrun (RANK and WORLD_SIZE set) this script trains data-parallel; without them it runs on
# one device exactly as before.
_ddp = "RANK" in os.environ and "WORLD_SIZE" in os.environ
_ddp_rank = int(os.environ["RANK"]) if _ddp else 0
_ddp_world = int(os.environ["WORLD_SIZE"]) if _ddp else 1
_ddp_local_rank = int(os.environ.get("LOCAL_RANK", 0)) if _ddp else 0
_is_main = _ddp_rank == 0  # rank 0 alone prints, logs and writes files
"""
SETUP_FUNCTION = '''

def _ddp_setup():
    """One process group from env:// (nccl with CUDA, gloo otherwise), each rank on its own GPU."""
    if _ddp and not DIST.is_initialized():
        # gloo can abort at exit ("terminate called without an active exception") when a model that outlives the
        # script frees the group while the interpreter ends: torch's collectives imported before the group exists
        # do not keep it, and one reference let go at exit, from Python, means the model's is never the last
        import atexit, gc, torch.distributed.nn.functional  # noqa: E401, F401
        if torch.cuda.is_available():
            torch.cuda.set_device(_ddp_local_rank)
        DIST.init_process_group("nccl" if torch.cuda.is_available() else "gloo", init_method="env://")
        held = [DIST.group.WORLD]
        atexit.register(lambda: (gc.collect(), held.clear()))
        _ddp_rank_zeros_streams()


def _ddp_rank_zeros_streams():
    """Every rank goes on from rank 0's torch, random and numpy streams, as they stand when the group is set up:
    what the script draws before its model is wrapped (a split of the data, synthetic data, a shape) is alike on
    every rank, seeded or not (an unseeded `np.random.shuffle(indices)` would give each rank its own split, and
    the shards would overlap); rank 0's own streams are unchanged. Seeded alike already: nothing changes."""
    import random, sys  # noqa: E401
    numpy = sys.modules.get("numpy")
    # torch's state as bytes: a tensor would be pickled through torch.save, a save the script never made
    states = [(bytes(torch.get_rng_state().tolist()), random.getstate(), numpy.random.get_state() if numpy else None)]
    DIST.broadcast_object_list(states, src=0)
    if not _is_main:
        torch.set_rng_state(torch.tensor(list(states[0][0]), dtype=torch.uint8))
        random.setstate(states[0][1])
        if numpy is not None and states[0][2] is not None:
            numpy.random.set_state(states[0][2])
'''
MODEL = '''

class _DDPModel(DistributedDataParallel):
    """DistributedDataParallel that is still the script's model everywhere but in its training forward (after
    Lightning Fabric's _FabricModule): what the script, or any module it imports, reads, writes or calls on it that
    DDP does not have reaches the script's own module; state_dict, load_state_dict and named_parameters keep the
    names the script's model had (nn.DataParallel's `module.` only where the script used it), and where it did,
    DataParallel's own methods answer (a synchronized BatchNorm's patch_replication_callback reads `replicate`);
    copy.deepcopy, pickle and torch.save give the script's model, not the wrapper."""

    def __init__(self, module, *args, **kwargs):
        super().__init__(module, *args, **kwargs)
        self._ddp_built = True

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            inner = self.__dict__["_modules"].get("module")
            if inner is None:
                raise
            try:
                return getattr(inner, name)
            except AttributeError:
                method = getattr(torch.nn.DataParallel, name, None)
                marked = getattr(torch.nn.DataParallel, "_ddp_port_models", ())  # _ddp_data_parallel's mark
                if callable(method) and (self in marked or inner in marked):
                    return method.__get__(self)  # DataParallel's own (replicate, scatter), which DDP never calls
                raise

    def __setattr__(self, name, value):
        inner = self.__dict__.get("_modules", {}).get("module")
        if self.__dict__.get("_ddp_built") and not name.startswith("_") and name not in self.__dict__:
            setattr(inner, name, value)  # an attribute the script's module has, or gets (its forward reads it)
        else:
            super().__setattr__(name, value)

    def _ddp_original(self):
        """The model as the script had it: nn.DataParallel's view of it where the script used one."""
        marked = getattr(torch.nn.DataParallel, "_ddp_port_models", ())  # any file's mark (_ddp_data_parallel)
        if self.module not in marked and self not in marked:
            return self.module
        view = torch.nn.DataParallel.__new__(torch.nn.DataParallel)  # as nn.DataParallel builds it without GPUs
        torch.nn.Module.__init__(view)
        view.module, view.device_ids = self.module, []
        return view

    def state_dict(self, *args, **kwargs):
        return self._ddp_original().state_dict(*args, **kwargs)

    def load_state_dict(self, *args, **kwargs):
        return self._ddp_original().load_state_dict(*args, **kwargs)

    def named_parameters(self, *args, **kwargs):
        return self._ddp_original().named_parameters(*args, **kwargs)

    def named_buffers(self, *args, **kwargs):
        return self._ddp_original().named_buffers(*args, **kwargs)

    # Python looks these up on the class, never through __getattr__: `model[0]` of an nn.Sequential, `len(layers)`
    def __getitem__(self, index):
        return self._ddp_original()[index]

    def __len__(self):
        return len(self._ddp_original())

    def __iter__(self):
        return iter(self._ddp_original())

    def __bool__(self):
        return bool(self._ddp_original())

    # The script's module tree where the script walks it (`list(model.children())[-1]`, `model.modules()`); what
    # nn.Module itself walks through children() (train, to, apply) goes to the script's module, whole.
    def children(self):
        return self._ddp_original().children() if "_ddp_built" in self.__dict__ else super().children()

    def named_children(self):
        return self._ddp_original().named_children() if "_ddp_built" in self.__dict__ else super().named_children()

    def modules(self):
        return self._ddp_original().modules() if "_ddp_built" in self.__dict__ else super().modules()

    def named_modules(self, *args, **kwargs):
        if "_ddp_built" not in self.__dict__:
            return super().named_modules(*args, **kwargs)
        return self._ddp_original().named_modules(*args, **kwargs)

    def train(self, mode=True):
        if "_ddp_built" not in self.__dict__:
            return super().train(mode)
        self.training = mode
        self.module.train(mode)
        return self

    def _apply(self, fn, recurse=True):
        if "_ddp_built" not in self.__dict__:
            return super()._apply(fn, recurse)
        self.module._apply(fn, recurse)
        return self

    def apply(self, fn):
        if "_ddp_built" not in self.__dict__:
            return super().apply(fn)
        self.module.apply(fn)
        return self

    def __reduce_ex__(self, protocol):
        # protocol 1's form (copyreg._reconstructor): protocol 2's would tie the class pickled to the wrapper's
        return self._ddp_original().__reduce_ex__(1)

    def _ddp_forward(self, name):
        """The script's module's method `name`, run as DDP's forward (Lightning Fabric's mark_forward_method): a
        method reached through the wrapper's attributes runs outside DDP's forward, whose preparation is what makes
        the backward all-reduce the gradients, so each rank would step on its own. DDP calls the module's forward;
        for that one call it is the method, which finds the module's own forward again (a training_step calls
        `self(x)`)."""
        module = self.module
        method = getattr(module, name)

        def through_forward(*args, **kwargs):
            own = module.__dict__.get("forward")

            def restore():
                if own is None:
                    module.__dict__.pop("forward", None)
                else:
                    module.forward = own

            def once(*inner, **named):
                restore()
                return method(*inner, **named)

            module.forward = once
            try:
                return self(*args, **kwargs)
            finally:
                restore()

        return through_forward
'''
SCRIPT_MODEL = '''

def _ddp_script_model(model):
    """What `torch.save(model, ...)` pickles: the script's model, as the script's own save did (the wrapper's
    pickling of it takes copyreg's protocol-1 form, which torch.load(weights_only=True) refuses)."""
    original = getattr(type(model), "_ddp_original", None)
    return original(model) if original is not None else model
'''
FORWARD = '''

def _ddp_forward(model, name):
    """`model.<name>(...)` whose result the script back-propagates: under torchrun, through DDP's forward (the
    wrapper's _ddp_forward, found on its class in whichever file wrapped it); on the script's own model, the method."""
    through = getattr(type(model), "_ddp_forward", None)
    return through(model, name) if through is not None else getattr(model, name)
'''
DATA_PARALLEL = '''

def _ddp_data_parallel(model):
    """Under torchrun, the model the script puts in nn.DataParallel, as it is (one process drives one device),
    remembered for the whole process (the file that wraps it may be another): its DistributedDataParallel keeps the
    `module.` names DataParallel's state_dict had."""
    if "_ddp_port_models" not in vars(torch.nn.DataParallel):
        torch.nn.DataParallel._ddp_port_models = weakref.WeakSet()
    torch.nn.DataParallel._ddp_port_models.add(model)
    return model
'''
IS_DATA_PARALLEL = '''

def _ddp_isinstance(value, classes):
    """isinstance, where a model the script put in nn.DataParallel is still one under torchrun: its DDP wrapper
    stands where DataParallel stood, so a helper that unwraps `m.module` when it sees one (before saving its
    state_dict) gets the script's module, as under python."""
    wanted = classes if isinstance(classes, tuple) else (classes,)
    if torch.nn.DataParallel in wanted and isinstance(value, torch.nn.parallel.DistributedDataParallel):
        marked = getattr(torch.nn.DataParallel, "_ddp_port_models", ())  # _ddp_data_parallel's mark
        if value in marked or value.module in marked:
            return True
    return isinstance(value, classes)
'''
SHARD = '''

class _DDPLoader(torch.utils.data.DataLoader):
    """The script's DataLoader over this rank's share, each pass a new permutation as a RandomSampler's is in one
    process: a pass after its sampler's set_epoch(epoch) (the port calls it at the top of each epoch it sees) is that
    epoch's; any other pass (the loader handed to code the port does not read, `next(iter(loader))` each step, a
    loader built anew each epoch) takes the next number of this process's count of such passes, the same on every
    rank since every rank makes the same passes (Lightning Fabric's loader sets the epoch at each iter too)."""

    passes = 0  # passes no set_epoch named, over every loader this process sharded

    def __iter__(self):
        sampler = self.sampler
        if isinstance(sampler, DistributedSampler):
            if sampler.epoch == self._ddp_epoch_seen:  # no set_epoch since the last pass
                sampler.set_epoch(_DDPLoader.passes)
                _DDPLoader.passes += 1
            self._ddp_epoch_seen = sampler.epoch
        return super().__iter__()


class _DDPSplitSampler(DistributedSampler):
    """A SubsetRandomSampler's split dealt out over the ranks: `indices` is this rank's share of it this epoch, the
    data set's indices as the script's sampler held them (`len(loader.sampler.indices)`: the samples it sees)."""

    def __init__(self, split, dataset, **kwargs):
        super().__init__(dataset, **kwargs)
        self._ddp_split = split

    @property
    def indices(self):
        return [self._ddp_split[i] for i in super().__iter__()]


def _ddp_shard(loader, epoch=None):
    """Under torchrun, the same DataLoader over this rank's share of each epoch: a DistributedSampler keeping the
    loader's shuffle and drop_last (and, for a loader built each epoch, that epoch's shuffle), or, for draws with
    replacement or a count of their own, this rank's share of the draws; the batch stays the script's, per device
    (a data set of whole batches, batch_size=None, is dealt out batch by batch). A loader the port cannot shard
    stays whole, with a warning: the run goes on (the port listed it, where it saw it)."""
    if not _ddp or isinstance(getattr(loader, "sampler", None), DistributedSampler):
        return loader  # one process; or sharded already (by the file that built it, where it is handed on)
    data = torch.utils.data
    if not isinstance(loader, data.DataLoader):  # what a configuration named, handed to the training
        import warnings
        warnings.warn(f"ddpcli port: the training data is a {type(loader).__name__}, not a DataLoader: it stays "
                      "whole on every rank; shard it by _ddp_rank and _ddp_world yourself", stacklevel=2)
        return loader
    dataset, drawn = loader.dataset, loader.sampler
    if isinstance(dataset, data.IterableDataset) or not isinstance(
        drawn, (data.RandomSampler, data.SequentialSampler, data.SubsetRandomSampler)
    ):
        import warnings
        what = "iterates an IterableDataset" if isinstance(dataset, data.IterableDataset) else "has its own sampler"
        warnings.warn(f"ddpcli port: a DataLoader {what}: it stays whole on every rank; where it is a training "
                      "loader, shard it by _ddp_rank and _ddp_world yourself", stacklevel=2)
        return loader
    if isinstance(drawn, data.SubsetRandomSampler):  # a split of the data set: shard the split
        dataset = data.Subset(dataset, list(drawn.indices))
    if isinstance(drawn, data.RandomSampler) and (drawn.replacement or drawn._num_samples is not None):
        share = -(-drawn.num_samples // _ddp_world)  # each rank draws its share, from its own RNG stream
        sampler = data.RandomSampler(dataset, replacement=drawn.replacement, num_samples=share)
    else:
        shuffle = isinstance(drawn, (data.RandomSampler, data.SubsetRandomSampler))
        options = dict(num_replicas=_ddp_world, rank=_ddp_rank, shuffle=shuffle, drop_last=loader.drop_last)
        if isinstance(drawn, data.SubsetRandomSampler):
            sampler = _DDPSplitSampler(list(drawn.indices), dataset, **options)
        else:
            sampler = DistributedSampler(dataset, **options)
        if epoch is not None:
            sampler.set_epoch(epoch)
    sharded = _DDPLoader(
        dataset, batch_size=loader.batch_size, sampler=sampler, num_workers=loader.num_workers,
        collate_fn=loader.collate_fn, pin_memory=loader.pin_memory, drop_last=loader.drop_last,
        timeout=loader.timeout, worker_init_fn=loader.worker_init_fn, generator=loader.generator,
        prefetch_factor=loader.prefetch_factor, persistent_workers=loader.persistent_workers,
    )
    sharded._ddp_epoch_seen = None if epoch is not None else getattr(sampler, "epoch", None)
    return sharded
'''
MAP = """
_ddp_map_location = {"cuda:0": f"cuda:{_ddp_local_rank}"} if _ddp else None  # torch.load: GPU 0's on this rank's
"""
DEVICE = '''


def _ddp_device(device):
    """Under torchrun, this rank's GPU where `device` pins one (an index, "cuda:N", "N", torch.device("cuda", N)),
    so that no two ranks share a GPU; anything else, and everything under python, as the script gave it."""
    if not _ddp or isinstance(device, bool):
        return device
    if isinstance(device, int):
        return _ddp_local_rank
    if isinstance(device, str) and device.isdigit():
        return str(_ddp_local_rank)
    if isinstance(device, str) and device.startswith("cuda:"):
        return f"cuda:{_ddp_local_rank}"
    if isinstance(device, torch.device) and device.type == "cuda" and device.index is not None:
        return torch.device("cuda", _ddp_local_rank)
    return device
'''
SEED = '''

def _ddp_seed():
    """Under torchrun, once the first model is wrapped (DDP gave it rank 0's parameters): this rank's torch, random
    and numpy streams offset by its rank, so what the script draws per step (noise, dropout, augmentation) differs
    across ranks; rank 0 keeps the script's own streams (one process under torchrun draws as python does)."""
    global _ddp_seeded
    if _ddp and _ddp_rank > 0 and not globals().get("_ddp_seeded"):
        _ddp_seeded = True
        torch.manual_seed(torch.initial_seed() + _ddp_rank)
        import random, sys  # noqa: E401
        random.seed(random.getrandbits(32) + _ddp_rank)
        if "numpy" in sys.modules:  # the script's np.random, where it draws noise from it
            sys.modules["numpy"].random.seed((int(sys.modules["numpy"].random.randint(2**31)) + _ddp_rank) % 2**32)
'''
SHARED = '''

def _ddp_shared(path):
    """Under torchrun, rank 0's path for a folder every rank made for itself (a TemporaryDirectory): rank 0 writes
    there and every rank reads what it wrote (ranks of one machine; the others' own folders stay empty)."""
    if not _ddp:
        return path
    paths = [path]
    DIST.broadcast_object_list(paths, src=0)
    return paths[0]
'''
SAME = '''


def _ddp_same(value):
    """Under torchrun, rank 0's value on every rank: a random draw that decides what is built (a model's width, a
    search's trial) or the order batches are sliced from is one draw for the run, not one per rank; under python,
    the value itself. A tensor travels as a tensor (pickled, it would pass through torch.save)."""
    if not _ddp or not DIST.is_initialized():
        return value
    if isinstance(value, torch.Tensor):
        on = torch.device("cuda", torch.cuda.current_device()) if DIST.get_backend() == "nccl" else value.device
        shared = value.to(on, copy=True)
        DIST.broadcast(shared, src=0)
        return shared.to(value.device)
    shared = [value]
    DIST.broadcast_object_list(shared, src=0)
    return shared[0]
'''
ANY = '''


def _ddp_any(flag):
    """Under torchrun, True on every rank when it is True on any: a batch a rank skips (its loss nan) is skipped
    by all, so none waits in an all-reduce the others never reach; under python, the flag itself."""
    if not _ddp or not DIST.is_initialized():
        return flag
    flags = [None] * DIST.get_world_size()
    DIST.all_gather_object(flags, bool(flag))
    return any(flags)
'''
QUIET = '''

def _ddp_quiet(*args, **kwargs):
    """What print, a logger or a save does on the ranks but 0: nothing (their arguments were evaluated)."""
'''
LOG_CONFIG = '''


def _ddp_log_config(config):
    """A logging.config.dictConfig configuration whose file handlers write on rank 0 alone: on the other ranks a
    copy whose handlers' filenames are os.devnull; rank 0's and python's, the script's own."""
    if _is_main or not isinstance(config, dict):
        return config
    import copy

    config = copy.deepcopy(config)
    for handler in (config.get("handlers") or {}).values():
        if isinstance(handler, dict) and "filename" in handler:
            handler["filename"] = os.devnull
    return config
'''
RANK_ZERO = '''


class _DDPRankZero:
    """What a writer or tracker that rank 0 alone builds (a SummaryWriter, a wandb run) is on the other ranks,
    wherever the program hands it: every method does nothing and returns None; its plain values (a SummaryWriter's
    log_dir, where the program may put its own files) are rank 0's."""

    def __init__(self, values):
        self.__dict__.update(values)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _ddp_quiet


def _ddp_rank_zero(build, shared=True):
    """Rank 0 builds it; under torchrun the other ranks get a _DDPRankZero with its plain values, received from
    rank 0 (every rank runs this line; `shared=False` where rank 0 alone does)."""
    if not _ddp:
        return build()
    built = build() if _is_main else None
    plain = (str, int, float, bool, type(None), os.PathLike)
    values = [{k: v for k, v in getattr(built, "__dict__", {}).items() if isinstance(v, plain)}]
    if shared and DIST.is_initialized():
        DIST.broadcast_object_list(values, src=0)
    return built if _is_main else _DDPRankZero(values[0])
'''
WANDB = '''


def _ddp_wandb_init(*args, **kwargs):
    """wandb.init as the script calls it on rank 0; on the other ranks a disabled run (its calls do nothing, no
    files, no network) whose config is rank 0's, a sweep's values included: `wandb.config.lr` reads alike on every
    rank, where without an init it raises."""
    import wandb

    if not _ddp:
        return wandb.init(*args, **kwargs)
    run = wandb.init(*args, **kwargs) if _is_main else wandb.init(*args, **{**kwargs, "mode": "disabled"})
    shared = [dict(wandb.config) if _is_main else None]
    if DIST.is_initialized():
        DIST.broadcast_object_list(shared, src=0)
        if not _is_main:
            wandb.config.update(shared[0], allow_val_change=True)
    return run
'''
SETUP = (
    '(nccl with CUDA, gloo otherwise; LOCAL_RANK the current GPU, so "cuda" is each rank\'s own; every rank goes '
    "on from rank 0's random streams, so what the script draws before the wrap is alike on every rank)"
)
TEARDOWN = "if _ddp:\n    DIST.destroy_process_group()\n"


def _binds(port: Port, name: str, origin: str) -> bool:
    """`name` is `origin` where the header stands: imported so by a top-level import up to the header's anchor."""
    anchor = _anchor(port)
    if anchor is None:
        return False
    body = list(port.facts.module.body)
    imported: dict[str, str] = {}
    for statement in body[: body.index(anchor) + 1]:
        if isinstance(statement, cst.SimpleStatementLine):
            imported |= {local: full for small in statement.body for local, full in import_aliases(small)}
    return imported.get(name) == origin


def imports(port: Port) -> list[str]:
    wanted = [("os", "import os", "os"), ("torch", "import torch", "torch"),
              (port.dist, f"import torch.distributed as {port.dist}" if port.dist != "torch.distributed" else "",
               "torch.distributed")]  # fmt: skip
    if "contextlib" in port.needs:
        wanted.insert(0, ("contextlib", "import contextlib", "contextlib"))
    if "data_parallel" in port.needs:
        wanted.append(("weakref", "import weakref", "weakref"))
    if "ddp" in port.needs:
        wanted.append(("DistributedDataParallel", "from torch.nn.parallel import DistributedDataParallel",
                       "torch.nn.parallel.DistributedDataParallel"))  # fmt: skip
    if "shard" in port.needs:
        wanted.append(("DistributedSampler", "from torch.utils.data.distributed import DistributedSampler",
                       "torch.utils.data.distributed.DistributedSampler"))  # fmt: skip
    lines = []
    for name, line, origin in wanted:
        if name in port.renames:  # the script's own `os` is not the module: the port's under the name renamed
            lines.append(line if " as " in line else f"{line} as {name}")
        elif line and not _binds(port, name, origin):
            lines.append(line)
    return lines


def _is_import_line(statement: cst.BaseStatement) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and all(
        isinstance(small, cst.Import | cst.ImportFrom) for small in statement.body
    )


def _anchor(port: Port) -> cst.BaseStatement | None:
    """Where the module starts: the last statement of its docstring, its `__future__` imports and its first block of
    imports (comments and blank lines between them are theirs). Any later statement may use what the header
    defines (a tutorial's module-level code between import blocks), so the header goes no further."""
    anchor = None
    for index, statement in enumerate(port.facts.module.body):
        if (index == 0 and _is_docstring(statement)) or _is_import_line(statement):
            anchor = statement
        else:
            break
    return anchor


def _is_docstring(statement: cst.BaseStatement) -> bool:
    return (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
            and isinstance(statement.body[0], cst.Expr)
            and isinstance(statement.body[0].value, cst.SimpleString | cst.ConcatenatedString))  # fmt: skip


# The helpers the rules may need (port.needs), in the order the header defines them.
_HELPERS = (("ddp", MODEL), ("script_model", SCRIPT_MODEL), ("forward", FORWARD), ("data_parallel", DATA_PARALLEL),
            ("is_data_parallel", IS_DATA_PARALLEL), ("shard", SHARD), ("quiet", QUIET), ("log_config", LOG_CONFIG),
            ("rank_zero", RANK_ZERO), ("wandb", WANDB), ("map", MAP), ("device", DEVICE), ("seed", SEED),
            ("shared", SHARED), ("same", SAME), ("any", ANY))  # fmt: skip


def apply(port: Port) -> None:
    facts = port.facts
    anchor = _anchor(port)
    code = "\n".join(imports(port)) + "\n" + RANKS
    code += SETUP_FUNCTION if not port.module or port.wraps_at_module_level else ""
    code += "".join(helper for need, helper in _HELPERS if need in port.needs)
    code = code.replace("DIST.", f"{port.dist}.")
    guard = facts.main_guard()
    at_start = guard is None or port.wraps_at_module_level or not isinstance(guard.body, cst.IndentedBlock)
    if port.module:
        _module_header(port, anchor, code)
        return
    if at_start:
        code += "\n\n_ddp_setup()\n"
    if not facts.module.body:  # nothing but comments (an empty __init__.py): the header is the whole module
        teardown = TEARDOWN.replace("DIST.", f"{port.dist}.")
        whole = code + teardown
        port.edits.rewrite(facts.module, lambda module: module.with_changes(body=statements(whole, port.edits.newline)))
        return
    if anchor is None:
        port.edits.insert_before(facts.module.body[0], code)
    else:
        port.edits.insert_after(anchor, code)
    line = anchor or facts.module.body[0]
    port.change(line, "process_group", "rank, world size and local rank from torchrun's environment (RANK, "
                "WORLD_SIZE, LOCAL_RANK); without them the script's own single-device path")  # fmt: skip
    teardown = TEARDOWN.replace("DIST.", f"{port.dist}.")
    if at_start:
        port.edits.insert_after(facts.module.body[-1], teardown)
        port.change(line, "process_group", f"one process group from env:// {SETUP} where the script starts; "
                    "destroy_process_group at its end")  # fmt: skip
    else:
        assert guard is not None and isinstance(guard.body, cst.IndentedBlock)
        if _exits(port, guard.body.body[-1]):  # `sys.exit(main())`: the teardown in a finally
            port.edits.rewrite(guard.body, lambda block: _in_try(block, teardown))
        else:
            port.edits.insert_before(guard.body.body[0], "_ddp_setup()\n")
            port.edits.insert_after(guard.body.body[-1], teardown)
        port.change(guard, "process_group", f"one process group from env:// {SETUP} at the start of the script's "
                    "main; destroy_process_group at its end")  # fmt: skip


def _module_header(port: Port, anchor: cst.BaseStatement | None, code: str) -> None:
    """A module of the program: the same names, read from the same environment; the script sets the group up
    before it calls in (its setup runs first even where a module wraps at import: `_ddp_setup` is idempotent)."""
    if port.wraps_at_module_level:
        code += "\n\n_ddp_setup()\n"
    body = port.facts.module.body  # not empty: a rule changed something in it
    (port.edits.insert_after if anchor is not None else port.edits.insert_before)(anchor or body[0], code)
    port.change(
        anchor or body[0],
        "process_group",
        "rank, world size and local rank from torchrun's environment, "
        "as the script reads them (a module of its program: the script sets up the process group)",
    )


def _exits(port: Port, statement: cst.BaseStatement) -> bool:
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
        small = statement.body[0]
        if isinstance(small, cst.Raise):
            return True
        if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
            return port.facts.resolve(small.value) in ("sys.exit", "exit", "quit", "os._exit")
    return False


def _in_try(block: cst.CSTNode, teardown: str) -> cst.CSTNode:
    assert isinstance(block, cst.IndentedBlock)
    body = cst.IndentedBlock(list(block.body))
    final = cst.Finally(body=cst.IndentedBlock(list(cst.parse_module(teardown).body)))
    setup = cst.parse_statement("_ddp_setup()\n")
    return block.with_changes(body=[setup, cst.Try(body=body, finalbody=final)])
