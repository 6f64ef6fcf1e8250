"""Test instrumentation for tests/test_port_published.py: what a training process did, seen from outside the script.

Python imports this module at start-up when its folder is on PYTHONPATH. It does nothing unless PORT_PROBE_DIR is
set; then it imports torch and records, without changing what the script computes:
- every DataLoader iteration (one per epoch, or a peek such as `next(iter(loader))`): which dataset it read (by the
  order DataLoaders were first built over each dataset, so a loader rebuilt over the same dataset, as a port does
  to add a sampler, counts as the same; two SubsetRandomSampler splits of one dataset are two), the sample
  indices its sampler gave, and whether it ran to its end;
- every `torch.save` call of the script (the path, or the type of the file object), not the observer's;
- at exit, the parameters of every optimizer the process built, in order (what "identical parameters" compares).
It writes `<PORT_PROBE_DIR>/<RANK or 'main'>-<pid>.probe.json` and `.params.pt` beside it at exit.

Two switches make a run fit the equivalence claim 2 x B/2 == 1 x B where the script itself does not, applied alike
to both runs compared: PORT_PROBE_FLOAT64=1 (float64 by default: Adam amplifies float32 rounding of near-zero
gradients) and PORT_PROBE_NOISE_OFF=1 (dropout is the identity, randn_like gives zeros: per-sample noise drawn from
the same seed on every rank is not the noise one process draws for the whole batch). PORT_PROBE_SEED=N seeds torch,
random and numpy at start-up, for a published script that seeds nothing (its runs are then comparable bit for bit).
PORT_PROBE_MKDIRS=A:B makes those folders in the working directory first, as a user of a script that expects them
does (a launched run's working directory is its run directory, made by ddpcli); PORT_PROBE_DATA=FOLDER copies the
files under FOLDER there (the synthetic data of a script that reads its own files: tests/port_scripts/_synthetic.py).
"""

from __future__ import annotations

import os

if os.environ.get("PORT_PROBE_DIR"):
    import atexit
    import json

    import torch
    import torch.nn.functional as F
    import torch.utils.data.dataloader as dataloader_module

    _DIR = os.environ["PORT_PROBE_DIR"]
    _TAG = os.environ.get("RANK", "main")
    _RUN_DIR = os.environ.get("DDPCLI_RUN_DIR", "")
    _datasets: list[tuple[object, frozenset[int] | None]] = []  # (dataset, split) in the order loaders were first
    # built over them (kept alive: ids stay unique)
    _iterations: list[dict] = []
    _saves: list[str] = []
    _optimizers: list[torch.optim.Optimizer] = []

    for _folder in filter(None, os.environ.get("PORT_PROBE_MKDIRS", "").split(os.pathsep)):
        os.makedirs(_folder, exist_ok=True)
    if os.environ.get("PORT_PROBE_DATA"):  # the script's data files, copied into its working directory (each rank:
        import shutil  # a file is written under a name of its own, then renamed: a rank never reads half of one)

        for _root, _, _names in os.walk(os.environ["PORT_PROBE_DATA"]):
            _here = os.path.relpath(_root, os.environ["PORT_PROBE_DATA"])
            os.makedirs(_here, exist_ok=True)
            for _name in _names:
                _target = os.path.join(_here, _name)
                if _name != ".done" and not os.path.exists(_target):
                    shutil.copyfile(os.path.join(_root, _name), f"{_target}.{os.getpid()}")
                    os.replace(f"{_target}.{os.getpid()}", _target)
    if os.environ.get("PORT_PROBE_SEED"):
        import random

        import numpy

        random.seed(int(os.environ["PORT_PROBE_SEED"]))
        numpy.random.seed(int(os.environ["PORT_PROBE_SEED"]))
        torch.manual_seed(int(os.environ["PORT_PROBE_SEED"]))
    if os.environ.get("PORT_PROBE_FLOAT64") == "1":
        torch.set_default_dtype(torch.float64)
    if os.environ.get("PORT_PROBE_NOISE_OFF") == "1":
        F.dropout = lambda input, p=0.5, training=True, inplace=False: input
        F.dropout2d = lambda input, p=0.5, training=True, inplace=False: input
        torch.randn_like = lambda input, **kwargs: torch.zeros_like(input, **kwargs)

    _loader_init = torch.utils.data.DataLoader.__init__

    def _identity(loader) -> tuple[object, frozenset[int] | None]:
        """What a loader reads: its dataset, and the split of it a SubsetRandomSampler draws from. The port's shard of
        such a split is a loader over `Subset(dataset, split)`: the same identity (its indices are positions in the
        split, one to one with the split's)."""
        dataset, sampler = loader.dataset, loader.sampler
        if isinstance(dataset, torch.utils.data.Subset):
            return dataset.dataset, frozenset(int(i) for i in dataset.indices)
        if isinstance(sampler, torch.utils.data.SubsetRandomSampler):
            return dataset, frozenset(int(i) for i in sampler.indices)
        return dataset, None

    def _serial(loader) -> int:
        dataset, split = _identity(loader)
        return next((i for i, (seen, part) in enumerate(_datasets) if seen is dataset and part == split), -1)

    def _init_loader(self, *args, **kwargs):
        _loader_init(self, *args, **kwargs)
        if _serial(self) < 0:
            _datasets.append(_identity(self))

    torch.utils.data.DataLoader.__init__ = _init_loader

    _iter_init = dataloader_module._BaseDataLoaderIter.__init__
    _next_index = dataloader_module._BaseDataLoaderIter._next_index

    def _init_iter(self, loader):
        _iter_init(self, loader)
        self._probe = {"loader": _serial(loader), "indices": [], "complete": False}
        _iterations.append(self._probe)

    def _next(self):
        try:
            index = _next_index(self)
        except StopIteration:
            self._probe["complete"] = True
            raise
        self._probe["indices"].extend(int(i) for i in (index if isinstance(index, list) else [index]))
        return index

    dataloader_module._BaseDataLoaderIter.__init__ = _init_iter
    dataloader_module._BaseDataLoaderIter._next_index = _next

    _save = torch.save

    def _record_save(obj, f, *args, **kwargs):
        path = os.fspath(f) if isinstance(f, (str, os.PathLike)) else type(f).__name__
        if not (_RUN_DIR and path.startswith(_RUN_DIR) and os.path.basename(path).startswith(".")):
            # not ddpcli's observer writing final_params.pt (by a hidden temporary beside it, then a rename)
            _saves.append(_temporary(path))
        return _save(obj, f, *args, **kwargs)

    def _temporary(path):
        """A file in a TemporaryDirectory (/tmp/tmpXXXX/best.pt) as <tmp>/best.pt: its folder's name is random."""
        import tempfile

        parts = os.path.relpath(path, tempfile.gettempdir()).split(os.sep) if os.path.isabs(path) else [".."]
        return os.path.join("<tmp>", *parts[1:]) if parts[0].startswith("tmp") and len(parts) > 1 else path

    torch.save = _record_save

    _optimizer_init = torch.optim.Optimizer.__init__

    def _init_optimizer(self, *args, **kwargs):
        _optimizer_init(self, *args, **kwargs)
        _optimizers.append(self)

    torch.optim.Optimizer.__init__ = _init_optimizer

    def _write() -> None:
        if not (_iterations or _saves or _optimizers):
            return  # torchrun's own agent, or a process that trained nothing
        stem = os.path.join(_DIR, f"{_TAG}-{os.getpid()}")
        params = [p.detach().cpu().clone() for o in _optimizers for g in o.param_groups for p in g["params"]]
        _save(params, f"{stem}.params.pt")
        with open(f"{stem}.probe.json", "w", encoding="utf-8") as handle:
            json.dump({"rank": _TAG, "iterations": _iterations, "saves": _saves}, handle)

    atexit.register(_write)
