"""Checkpoint and resume for the runtime helper (`ctx.checkpoint`, `ctx.resume`): what a restart needs to go on
exactly where the run left off, written so that a crash while saving never leaves a half file."""

import os
from pathlib import Path

import torch
from torch import nn

from ddpcli.rundir.layout import CHECKPOINT_FILE
from ddpcli.worker.observer.hooks import active
from ddpcli.worker.runtime.models import unwrap
from ddpcli.worker.stream import rank_stream
from ddpcli.worker.tensors import save_atomic


def save_checkpoint(
    run_dir: Path, step: int, elapsed: float, model: nn.Module, optimizer: torch.optim.Optimizer, device: torch.device
) -> None:
    """Model and optimizer state, the step (the data order is a function of it: see `EpochLoader.steps`), the RNG
    states and the logged time, renamed into place (ddpcli.worker.tensors.save_atomic)."""
    state = {
        "step": step,
        "time": elapsed,
        "model": unwrap(model).state_dict(),
        "optimizer": optimizer.state_dict(),
        "rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state_all() if device.type == "cuda" else [],
    }
    save_atomic(state, run_dir / CHECKPOINT_FILE)


def restarted() -> bool:
    """A torchrun restart (TORCHELASTIC_RESTART_COUNT > 0) or `ddpcli launch --resume` (DDPCLI_RESUME=1)."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0 or os.environ.get("DDPCLI_RESUME") == "1"


def load_checkpoint(
    run_dir: Path, model: nn.Module, optimizer: torch.optim.Optimizer, device: torch.device
) -> tuple[int, float | None]:
    """Load the last checkpoint into model, optimizer and the RNGs: (its step, the logged time it had), or (0, None)
    when there is none yet (the attempt that died never reached one)."""
    path = run_dir / CHECKPOINT_FILE
    if not path.exists():
        return 0, None
    state = torch.load(path, map_location=device, weights_only=True)
    unwrap(model).load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["rng"].cpu())
    if state["cuda_rng"]:
        torch.cuda.set_rng_state_all([value.cpu() for value in state["cuda_rng"]])
    return int(state["step"]), float(state["time"])


def announce_resume(step: int) -> None:
    """Tell the observation file the step this attempt goes on from: the rows the attempt that died wrote after its
    checkpoint are replaced by this attempt's (each step appears once), and the observer counts on from there."""
    observer, stream = active(), rank_stream()
    if observer is not None:
        observer.resumed_at(step)
    elif stream is not None:
        stream.add({"kind": "resume", "step": step})
