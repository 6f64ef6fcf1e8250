"""Gradient noise scale at a fixed parameter point where the true value is known, in a plain DDP script (no ddpcli
import): what the observer measures on any script's DDP model with `noise_scale = true`.

Linear regression y = x.w* + eps with x ~ N(0, I), evaluated at w = w* + delta and never moved (SGD with lr 0: the
optimizer steps, the parameters stay), so every step samples the same gradient distribution; `true_statistics`
gives |G|^2, tr(Sigma) and B_simple exactly over the finite dataset the sampler draws from.

    torchrun --standalone --nproc-per-node 4 tests/observe_scripts/noise_linear_plain.py --batch-size 8
"""

from __future__ import annotations

import argparse
import contextlib
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--grad-accum", type=int, default=1)
    parser.add_argument("--dataset-size", type=int, default=8192)
    parser.add_argument("--dim", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--grad-scaler", type=float, default=0.0, help="train under a GradScaler of this scale")
    parser.add_argument("--comm-hook", action="store_true", help="register torch's allreduce_hook on the DDP model")
    return parser.parse_args(argv)


def make_problem(dataset_size: int, dim: int, seed: int) -> tuple[TensorDataset, torch.Tensor]:
    """The dataset and the fixed evaluation point w = w* + delta, with |delta| = 1."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(dataset_size, dim, generator=generator)
    w_star = torch.randn(dim, generator=generator)
    y = x @ w_star + torch.randn(dataset_size, generator=generator)
    delta = torch.randn(dim, generator=generator)
    return TensorDataset(x, y.unsqueeze(1)), w_star + delta / delta.norm()


def true_statistics(dataset: TensorDataset, w: torch.Tensor) -> dict[str, float]:
    """Per-example gradients of the squared error g_i = 2 (x_i.w - y_i) x_i: G = mean g_i, tr(Sigma) = mean
    |g_i - G|^2."""
    x, y = (tensor.double() for tensor in dataset.tensors)
    per_example = 2 * (x @ w.double() - y.squeeze(1)).unsqueeze(1) * x
    mean = per_example.mean(0)
    grad_sq, trace = float(mean @ mean), float(((per_example - mean) ** 2).sum(1).mean())
    return {"grad_sq_true": grad_sq, "trace_sigma_true": trace, "b_simple_true": trace / grad_sq}


def main() -> None:
    args = parse_args()
    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("gloo")
    dataset, w = make_problem(args.dataset_size, args.dim, args.seed)
    linear = nn.Linear(args.dim, 1, bias=False)
    with torch.no_grad():
        linear.weight.copy_(w)
    model: nn.Module = linear
    if world > 1:
        model = DistributedDataParallel(linear)
        if args.comm_hook:
            model.register_comm_hook(None, default_hooks.allreduce_hook)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=args.grad_scaler) if args.grad_scaler else None
    step, epoch = 0, 0
    while step < args.steps:
        sampler.set_epoch(epoch)
        epoch += 1
        batches = iter(loader)
        while step < args.steps:
            micro = [batch for _, batch in zip(range(args.grad_accum), batches, strict=False)]
            if len(micro) < args.grad_accum:
                break
            for index, (x, y) in enumerate(micro):
                skip_sync = world > 1 and index < len(micro) - 1
                with model.no_sync() if skip_sync else contextlib.nullcontext():
                    loss = F.mse_loss(model(x), y) / args.grad_accum
                    (scaler.scale(loss) if scaler is not None else loss).backward()
            if scaler is not None:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
