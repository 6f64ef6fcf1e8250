"""What the observer writes about the run as a whole: the `run` row at the first optimizer step, the `end` rows and
rank 0's final parameters when the script is done."""

import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.dropout import _DropoutNd
from torch.nn.parallel import DistributedDataParallel

from ddpcli.jsonvalues import write_json_atomic
from ddpcli.rundir.layout import rank_params_file, shards_file
from ddpcli.worker.observer.parallel import params_row
from ddpcli.worker.observer.reading import initial_lrs
from ddpcli.worker.observer.stacks import numerics
from ddpcli.worker.tensors import save_atomic

_SYNCHRONISED_BATCHNORM = ("SyncBatchNorm", "CrossProcessBatchNorm")


def run_row(observer: Any, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """World size, backend, device, DDP and its options, the models, BatchNorm and Dropout layers, AMP."""
    params = [param for group in optimizer.param_groups for param in group["params"]]
    modules = observer.models.modules()
    norms = [layer for module in modules for layer in module.modules() if isinstance(layer, _BatchNorm)]
    synchronised = sum(type(layer).__name__ in _SYNCHRONISED_BATCHNORM for layer in norms)
    return {
        "kind": "run",
        "world_size": dist.get_world_size() if dist.is_initialized() else 1,
        "processes": _launched(),
        "backend": str(dist.get_backend()) if dist.is_initialized() else None,
        "device": params[0].device.type if params else None,
        "ddp": bool(observer.ddp) or any(isinstance(module, DistributedDataParallel) for module in modules),
        "ddp_options": observer.ddp[0] if observer.ddp else {},
        "models": [type(module).__name__ for module in modules],
        "batchnorm_layers": len(norms),
        "batchnorm_synchronized": synchronised,
        "dropout_layers": _dropout_layers(modules),
        "amp": observer.amp,
        "optimizer": optimizer_row(optimizer),
    }


def _dropout_layers(modules: list[torch.nn.Module]) -> int:
    """Dropout modules that drop (p > 0) in training mode at the first step: each process draws its own masks, so a
    multi-process run cannot end with the parameters of one process taking the whole batch. F.dropout called in a
    forward is not a module, and is not counted."""
    return sum(
        isinstance(layer, _DropoutNd) and layer.p > 0 and layer.training
        for module in modules
        for layer in module.modules()
    )


def _launched() -> int | None:
    """The processes torchrun launched (its WORLD_SIZE), whether or not they formed a process group."""
    text = os.environ.get("WORLD_SIZE", "")
    return int(text) if text.isdigit() else None


_HYPER_PARAMETERS = ("betas", "momentum", "weight_decay", "eps", "nesterov", "dampening")


def optimizer_row(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer's class and its first param group's hyper-parameters (what the script really used: nanoGPT's
    AdamW has beta2 0.95, not the 0.999 a note would assume). Tensors stay on the device until the flush."""
    found: dict[str, Any] = {"class": type(optimizer).__name__}
    group = optimizer.param_groups[0] if optimizer.param_groups else {}
    for key in _HYPER_PARAMETERS:
        value = group.get(key)
        if isinstance(value, tuple | list):
            found[key] = [item.detach().clone() if isinstance(item, torch.Tensor) else item for item in value]
        elif value is not None:
            found[key] = value.detach().clone() if isinstance(value, torch.Tensor) else value
    return found


def end_rows(observer: Any) -> list[dict[str, Any]]:
    """The `end` row (steps, process group, training loaders, AMP, hooks, processes spawned) and the parameters'
    digest at the end."""
    loaders = [info for info in observer.loaders.values() if info.get("training")]
    end = {
        "kind": "end",
        "steps": observer.step,
        "process_group": observer.habits.process_group or dist.is_initialized(),
        "spawned": observer.habits.spawned,
        "loaded": observer.habits.loaded,
        "loaders": loaders,
        "initial_lr": initial_lrs(observer.optimizers[0]) if observer.optimizers else None,
        "amp": observer.amp,
        "script_comm_hook": observer.noise.script_comm_hook,
        "noise_scale_requested": observer.noise.requested,
        "noise_scale_by": observer.noise.by,
        "collectives": observer.collectives.end(),
        "stacks": observer.stacks.row(),
        "numerics": numerics(),
        "written": observer.outside.written,
    }
    rows = [end]
    if observer.optimizers:
        rows.append(params_row(observer.optimizers, observer.models.modules(), "end"))
    return rows


def save_params(optimizers: list[torch.optim.Optimizer], path: Path, rank: int = 0) -> None:
    """The parameters the optimizers updated, in their order: keys `<optimizer>.<group>.<index>`, the same for
    a script run bare, under DDP, Lightning or accelerate. Not when the script saved its own (runtime). Ranks other
    than 0 save only where they hold shards (their own file): the pieces compare gathers into the full tensors."""
    if rank != 0:
        if _holds_shards(optimizers):
            save_params(optimizers, path.with_name(rank_params_file(rank)))
        return
    if path.exists() or not optimizers:
        return
    state, shards = {}, {}
    for o, optimizer in enumerate(optimizers):
        for g, group in enumerate(optimizer.param_groups):
            for i, param in enumerate(group["params"]):
                key = f"{o}.{g}.{i}"
                state[key], shard = _plain(param)
                if shard is not None:
                    shards[key] = shard
    save_atomic(state, path)
    if shards:  # no collective at the end (the script may have destroyed its group): rank 0's own shards
        write_json_atomic(shards_file(path), {"what": "this rank's local shards", "shards": shards})


def _holds_shards(optimizers: list[torch.optim.Optimizer]) -> bool:
    params = (param for optimizer in optimizers for group in optimizer.param_groups for param in group["params"])
    return any(callable(getattr(param, "to_local", None)) for param in params)


def _plain(param: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any] | None]:
    """A parameter as a plain CPU tensor (weights_only loads it), and for a DTensor where its local shard sits in
    the full tensor."""
    to_local = getattr(param, "to_local", None)
    if not callable(to_local):
        return param.detach().cpu().clone(), None
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    local = to_local().detach().cpu().clone()
    shape, offset = compute_local_shape_and_global_offset(param.shape, param.device_mesh, param.placements)
    return local, {"offset": [int(n) for n in offset], "shape": [int(n) for n in param.shape],
                   "local_shape": [int(n) for n in shape]}  # fmt: skip
