"""Gradient noise scale at a fixed parameter point, where the true value is known exactly.

Linear regression y = x.w* + sigma*eps with x ~ N(0, I), evaluated at w = w* + delta and never updated (no
optimizer), so every step samples the same gradient distribution. The per-example gradients of the squared error
are g_i = 2 (x_i.w - y_i) x_i; over the finite dataset the sampler draws from, G = mean g_i and
tr(Sigma) = mean |g_i - G|^2 give B_simple exactly. The last metrics row carries the runtime's estimate and these
true values (`grad_sq_true`, `trace_sigma_true`, `b_simple_true`), so a test can compare them.

    torchrun --standalone --nproc-per-node 4 tests/scripts/noise_linear.py --batch-size 8
    python tests/scripts/noise_linear.py --batch-size 8 --grad-accum 4
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

from ddpcli import runtime


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--grad-accum", type=int, default=1)
    parser.add_argument("--dataset-size", type=int, default=8192)
    parser.add_argument("--dim", type=int, default=8)
    parser.add_argument("--label-noise", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--noise-beta", type=float, default=0.999, help="close to 1: average over all steps")
    parser.add_argument("--loss-scale", type=float, default=1.0, help="multiply the loss, as AMP's GradScaler does")
    parser.add_argument("--sgd", action="store_true", help="step an SGD of lr 0 (optimizer steps, fixed parameters)")
    return parser.parse_args(argv)


def make_problem(args: argparse.Namespace) -> tuple[TensorDataset, torch.Tensor]:
    """The dataset and the fixed evaluation point w = w* + delta, with |delta| = 1."""
    generator = torch.Generator().manual_seed(args.seed)
    x = torch.randn(args.dataset_size, args.dim, generator=generator)
    w_star = torch.randn(args.dim, generator=generator)
    y = x @ w_star + args.label_noise * torch.randn(args.dataset_size, generator=generator)
    delta = torch.randn(args.dim, generator=generator)
    return TensorDataset(x, y.unsqueeze(1)), w_star + delta / delta.norm()


def true_statistics(dataset: TensorDataset, w: torch.Tensor) -> dict[str, float]:
    x, y = (tensor.double() for tensor in dataset.tensors)
    per_example = 2 * (x @ w.double() - y.squeeze(1)).unsqueeze(1) * x
    mean = per_example.mean(0)
    grad_sq = float(mean @ mean)
    trace = float(((per_example - mean) ** 2).sum(1).mean())
    return {"grad_sq_true": grad_sq, "trace_sigma_true": trace, "b_simple_true": trace / grad_sq}


@runtime.main
def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    ctx = runtime.init(seed=args.seed, noise_scale=True, noise_beta=args.noise_beta)
    dataset, w = make_problem(args)
    linear = nn.Linear(args.dim, 1, bias=False)
    with torch.no_grad():
        linear.weight.copy_(w)
    model = ctx.wrap(linear, grad_scale=args.loss_scale)
    loader = ctx.dataloader(dataset, batch_size=args.batch_size)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0) if args.sgd else None
    for _step, micro_batches in loader.steps(args.steps, args.grad_accum):
        for index, (x, y) in enumerate(micro_batches):
            with ctx.accumulate(model, index, len(micro_batches)):
                loss = F.mse_loss(model(x), y) / len(micro_batches)
                (loss * args.loss_scale).backward()
        if optimizer is not None:
            optimizer.step()  # lr 0: what the observer counts as a step, the parameters unmoved
        model.zero_grad(set_to_none=True)  # the parameters stay where the truth was computed
    ctx.log(args.steps, loss=loss.detach(), **true_statistics(dataset, w))
    ctx.finish()


if __name__ == "__main__":
    main()
