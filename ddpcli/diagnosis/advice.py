"""Advice a finding gives, fitted to where the run ran: a fix that fails on the run's device is no advice. Pure.

nn.SyncBatchNorm works only on GPU modules (on a CPU/gloo run DDP refuses it: "SyncBatchNorm layers only work
with GPU modules"), so a CPU run is pointed at what does work there.
"""

from __future__ import annotations

GPU_DEVICES = frozenset({"cuda"})


def batchnorm_fix(device: str | None, backend: str | None) -> str:
    """How to normalise over the global batch on this run's device and backend."""
    sync = "convert them with nn.SyncBatchNorm.convert_sync_batchnorm(model) before wrapping in DDP"
    cpu = (
        "ddpcli.runtime's cross-process BatchNorm (ctx.sync_batchnorm(model), or runtime.convert_batchnorm(model) "
        "before DDP), GroupNorm instead of BatchNorm, or running on GPUs with SyncBatchNorm"
    )
    if device in GPU_DEVICES and backend != "gloo":
        return sync
    if device in GPU_DEVICES:  # CUDA tensors over gloo: SyncBatchNorm's collectives need a GPU backend
        return f"{sync}, with the nccl backend (SyncBatchNorm over gloo is not supported)"
    if device is None:
        return f"on GPUs, {sync}; on CPU (where SyncBatchNorm fails), use {cpu}"
    return f"SyncBatchNorm fails on {device} ({backend or 'no GPU backend'}): use {cpu}"
