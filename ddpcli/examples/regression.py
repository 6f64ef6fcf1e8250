"""An MLP learns a fixed random teacher network: the smallest DDP job whose numbers can be checked exactly.

    python -m ddpcli.examples.regression                                  # one process, defaults
    ddpcli launch my.toml      # with only `module = "ddpcli.examples.regression"`: each run's plan, no flags needed
    torchrun --standalone --nproc-per-node 4 -m ddpcli.examples.regression --batch-size 4
    ddpcli launch experiments.toml                                        # the bundled experiments

The data are synthetic and seeded (no download), the loss is a mean-reduced MSE and the optimizer plain SGD
with a linear warmup, so W processes x batch B end with the same parameters as one process with batch W*B
(up to float summation order); with --batchnorm only if --sync-bn puts the statistics over all processes.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

from ddpcli import runtime

TEACHER_SEED_OFFSET = 1_000_003  # the data never share a random stream with the student's initialisation
LABEL_NOISE = 0.1


# Flags that default to the run `ddpcli launch` started this process for (DDPCLI_RUN), then to a fixed value:
# flag -> (RUN key, default). A flag given on the command line always wins.
FROM_RUN: dict[str, tuple[str, int | float]] = {
    "steps": ("total_steps", 100),
    "batch_size": ("per_device_batch_size", 16),
    "grad_accum": ("grad_accum_steps", 1),
    "lr": ("lr", 0.05),
    "warmup": ("warmup_steps", 0),
    "dataset_size": ("dataset_size", 2048),
    "seed": ("seed", 0),
}


def parse_args(argv: Sequence[str] | None = None, run: Mapping[str, Any] | None = None) -> argparse.Namespace:
    """The command line, with what it leaves out taken from `run` (default: DDPCLI_RUN), then from FROM_RUN's
    defaults: an experiment file that names only the module runs exactly its plan."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, help=_planned("optimizer steps, over as many epochs as needed", "steps"))
    parser.add_argument("--batch-size", type=int, help=_planned("samples per process per micro-batch", "batch_size"))
    parser.add_argument("--grad-accum", type=int, help=_planned("micro-batches per optimizer step", "grad_accum"))
    parser.add_argument("--lr", type=float, help=_planned("learning rate after warmup", "lr"))
    parser.add_argument("--warmup", type=int, help=_planned("optimizer steps of linear lr warmup", "warmup"))
    parser.add_argument("--momentum", type=float, default=0.0, help="SGD momentum")
    parser.add_argument("--dataset-size", type=int, help=_planned("samples in the synthetic set", "dataset_size"))
    parser.add_argument("--seed", type=int, help=_planned("initialisation, data and sampling order", "seed"))
    parser.add_argument("--inputs", type=int, default=16, help="input features")
    parser.add_argument("--hidden", type=int, default=64, help="hidden units of the student MLP")
    parser.add_argument("--batchnorm", action="store_true", help="add a BatchNorm1d after the hidden layer")
    parser.add_argument("--sync-bn", action="store_true", help="BatchNorm statistics over all processes")
    parser.add_argument("--log-every", type=int, default=1, help="log every N optimizer steps (and the last)")
    parser.add_argument(
        "--checkpoint-every", type=int, default=0, help="save a checkpoint every N optimizer steps (0: never)"
    )
    parser.add_argument("--step-delay", type=float, default=0.0, help="seconds to sleep after each step (to watch)")
    parser.add_argument(
        "--noise-scale",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="measure the gradient noise scale (default: what ddpcli launch asks for)",
    )
    args = parser.parse_args(argv)
    run = _launched_run() if run is None else run
    for flag, (key, default) in FROM_RUN.items():
        if getattr(args, flag) is None:
            value = run.get(key)
            usable = isinstance(value, int | float) and not isinstance(value, bool)
            setattr(args, flag, type(default)(value) if usable else default)
    return args


def _planned(words: str, flag: str) -> str:
    key, default = FROM_RUN[flag]
    return f"{words} (default: the run's {key} under ddpcli launch, else {default})"


def _launched_run() -> dict[str, Any]:
    """RUN as `ddpcli launch` passes it (docs/contracts.md); empty under plain python or torchrun."""
    try:
        run = json.loads(os.environ.get("DDPCLI_RUN", "{}"))
    except ValueError:
        return {}
    return run if isinstance(run, dict) else {}


def make_dataset(size: int, inputs: int, seed: int) -> TensorDataset:
    """x ~ N(0, I); y = teacher(x) + noise, the teacher a random two-layer tanh network fixed by the seed."""
    generator = torch.Generator().manual_seed(seed + TEACHER_SEED_OFFSET)
    hidden_weight = torch.randn(inputs, 32, generator=generator) / inputs**0.5
    output_weight = torch.randn(32, 1, generator=generator) / 32**0.5
    x = torch.randn(size, inputs, generator=generator)
    y = torch.tanh(x @ hidden_weight) @ output_weight + LABEL_NOISE * torch.randn(size, 1, generator=generator)
    return TensorDataset(x, y)


def make_model(inputs: int, hidden: int, batchnorm: bool) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Linear(inputs, hidden)]
    if batchnorm:
        layers.append(nn.BatchNorm1d(hidden))
    layers += [nn.Tanh(), nn.Linear(hidden, 1)]
    return nn.Sequential(*layers)


def warmup_lr(step: int, lr: float, warmup: int) -> float:
    """Linear warmup from lr/warmup at step 1 to lr at step `warmup`, then constant."""
    return lr * min(1.0, step / warmup) if warmup > 0 else lr


@runtime.main
def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    ctx = runtime.init(seed=args.seed, noise_scale=args.noise_scale)
    dataset = make_dataset(args.dataset_size, args.inputs, args.seed)
    model = make_model(args.inputs, args.hidden, args.batchnorm)
    if args.sync_bn:
        model = ctx.sync_batchnorm(model)
    model = ctx.wrap(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    loader = ctx.dataloader(dataset, batch_size=args.batch_size)
    start = ctx.resume(model, optimizer)  # after a restart: the last checkpoint's step, else 0

    for step, micro_batches in loader.steps(args.steps, args.grad_accum, start=start):
        lr = warmup_lr(step, args.lr, args.warmup)
        for group in optimizer.param_groups:
            group["lr"] = lr
        step_loss = torch.zeros((), device=ctx.device)
        for index, (x, y) in enumerate(micro_batches):
            with ctx.accumulate(model, index, len(micro_batches)):
                loss = F.mse_loss(model(x.to(ctx.device)), y.to(ctx.device)) / len(micro_batches)
                loss.backward()
            step_loss += loss.detach()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step % args.log_every == 0 or step == args.steps:
            ctx.log(step, loss=step_loss, lr=lr)
        ctx.checkpoint(step, model=model, optimizer=optimizer, every=args.checkpoint_every)
        time.sleep(args.step_delay)
    ctx.finish(model)


if __name__ == "__main__":
    main()
