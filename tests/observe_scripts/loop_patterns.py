"""Unusual but legitimate training loops that fooled the observer (issue 15, items 6-13); no ddpcli import.

    python tests/observe_scripts/loop_patterns.py --pattern PATTERN [--save final.pt]

One process, a tiny MLP, batch 8 from a DataLoader (a RandomSampler), 4 optimizer steps of one micro-batch each,
unless the pattern says otherwise:
  plain             the reference loop
  fresh-optimizer   2 steps training the head alone, then a fresh optimizer over every parameter for 2 more
  instance-step     `opt.step` replaced on the instance by the script's own update (torch's step hooks never run)
  double-backward   a main and an auxiliary loss, two backward calls on one batch (retain_graph)
  loss-list         `torch.autograd.backward([main, aux])`
  bound-step        `opt.step` replaced on the instance by a bound method that clips, then calls the class's step;
                    an lr scheduler created after the first step (it unwraps `opt.step.__func__`)
  grad-validation   after each step a validation batch of 32 through the model in train mode with grad enabled and
                    no backward (from a second DataLoader, a SequentialSampler)
  eval-wrapper      the model is in eval mode while it trains (Lightning's sanity check leaves its wrapper so)
  checkpointed      activation checkpointing: the first block is recomputed inside the backward
  list-batch        the model takes a list of Python lists: no tensor, so the batch size cannot be read
  numpy-lr          the param group's lr is a numpy float32
  os-exit           the script ends with os._exit(0) (the last rows were lost)
  exit-code         the script ends with sys.exit(3)
  spawn             the script trains in a child process it starts with torch.multiprocessing.spawn
  gan               a GAN's step (pytorch/examples dcgan's order): the model (the discriminator) back-propagates
                    a data batch and, separately, a generator's detached output; its optimizer steps; then the
                    generator's loss through the model, and the generator's own optimizer steps
  conditional-gan   pix2pix's step: the discriminator (`model`) on `cat(a, generator(x)).detach()` and on `cat(a, b)`,
                    two concatenations of one batch, in one backward; then the generator through it
  sharpness-aware   SAM's step (davda54/sam): forward and backward, a climb of the weights along the gradient, a
                    second forward and backward on the same batch, the climb undone, then the step
  sliced-accumulation   no DataLoader: two micro-batches of 4 sliced from one tensor, then the step
  drawn-accumulation    no DataLoader: two micro-batches of 4 drawn with torch.randn into one staging tensor
--save writes the final parameters (torch.save of the state_dict) for a bit-identical comparison.
"""

from __future__ import annotations

import argparse
import os
import sys
import types

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint
from torch.utils.data import DataLoader, TensorDataset

PATTERNS = (
    "plain", "fresh-optimizer", "instance-step", "bound-step", "double-backward", "loss-list", "grad-validation",
    "eval-wrapper", "checkpointed", "list-batch", "numpy-lr", "os-exit", "exit-code", "spawn", "gan",
    "gan-one-backward", "conditional-gan", "sharpness-aware", "sliced-accumulation", "drawn-accumulation",
)  # fmt: skip


class ListModel(nn.Module):
    """Takes its batch as a list of Python lists (tokenised text before collation, say)."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, rows: list[list[float]]) -> torch.Tensor:
        return self.net(torch.tensor(rows))


class Checkpointed(nn.Module):
    """Recomputes its first block in the backward instead of keeping its activations."""

    def __init__(self, net: nn.Sequential) -> None:
        super().__init__()
        self.block, self.head = net[:2], net[2:]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(checkpoint(self.block, x, use_reentrant=False))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pattern", choices=PATTERNS, default="plain")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--save", default=None)
    args = parser.parse_args()
    if args.pattern == "spawn":
        torch.multiprocessing.spawn(spawned, args=(args,), nprocs=1)
        return
    train(args)


def spawned(index: int, args: argparse.Namespace) -> None:
    train(args)


def train(args: argparse.Namespace) -> None:
    torch.manual_seed(0)
    data = torch.Generator().manual_seed(1)
    x, x_val = torch.randn(64, 4, generator=data), torch.randn(64, 4, generator=data)
    train = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=8, shuffle=True, generator=data)
    validation = DataLoader(TensorDataset(x_val, x_val.sum(dim=1, keepdim=True)), batch_size=32)
    net = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))
    model: nn.Module = ListModel(net) if args.pattern == "list-batch" else net
    if args.pattern == "checkpointed":
        model = Checkpointed(net)
    head = net[2].parameters() if args.pattern == "fresh-optimizer" else model.parameters()
    optimizer = torch.optim.SGD(head, lr=0.1, momentum=0.9)
    if args.pattern == "numpy-lr":
        optimizer.param_groups[0]["lr"] = np.float32(0.1)
    if args.pattern == "instance-step":

        def own_step(closure=None):  # plain SGD, written by hand: the class's step (and its hooks) never run
            with torch.no_grad():
                for param in model.parameters():
                    param.add_(param.grad, alpha=-0.1)

        optimizer.step = own_step  # type: ignore[method-assign]
    if args.pattern == "bound-step":

        def clipped_step(self: torch.optim.Optimizer, closure=None):
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            return type(self).step(self, closure)

        optimizer.step = types.MethodType(clipped_step, optimizer)  # type: ignore[method-assign]
    if args.pattern == "eval-wrapper":
        model.eval()
    generator = nn.Linear(4, 4)
    generator_optimizer = torch.optim.SGD(generator.parameters(), lr=0.1)
    noise = torch.Generator().manual_seed(2)
    if args.pattern in ("sliced-accumulation", "drawn-accumulation"):
        accumulate_by_hand(model, optimizer, x, args)
        train = DataLoader([])  # trained already
    step = 0
    while step < args.steps and len(train):
        for inputs, targets in train:
            if step == args.steps:
                break
            if args.pattern in ("gan", "gan-one-backward", "conditional-gan"):
                step_of = {"gan": gan_step, "gan-one-backward": gan_step_one_backward,
                           "conditional-gan": conditional_gan_step}[args.pattern]  # fmt: skip
                step_of(model, optimizer, generator, generator_optimizer, inputs, targets, noise)
                step += 1
                continue
            if args.pattern == "fresh-optimizer" and step == args.steps // 2:
                optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
            batch = inputs.tolist() if args.pattern == "list-batch" else inputs
            outputs = model(batch)
            loss = F.mse_loss(outputs, targets)
            aux = 0.1 * outputs.square().mean()
            if args.pattern == "sharpness-aware":
                sharpness_aware_step(model, optimizer, inputs, targets)
                step += 1
                continue
            if args.pattern == "double-backward":
                loss.backward(retain_graph=True)
                aux.backward()
            elif args.pattern == "loss-list":
                torch.autograd.backward([loss, aux])
            else:
                (loss + aux).backward()
            optimizer.step()
            optimizer.zero_grad()
            step += 1
            if args.pattern == "bound-step" and step == 1:
                torch.optim.lr_scheduler.LambdaLR(optimizer, lambda done: 0.5)  # halves the lr from here on
            if args.pattern == "grad-validation":
                val_inputs, val_targets = next(iter(validation))
                F.mse_loss(model(val_inputs), val_targets)  # grad enabled, train mode, never back-propagated
    if args.save:
        torch.save(net.state_dict(), args.save)
    print(f"done: {step} steps")
    sys.stdout.flush()
    if args.pattern == "os-exit":
        os._exit(0)
    if args.pattern == "exit-code":
        sys.exit(3)


def sharpness_aware_step(model: nn.Module, optimizer: torch.optim.Optimizer, inputs: torch.Tensor,
                         targets: torch.Tensor) -> None:  # fmt: skip
    """Two forward and backward passes on one batch, one optimizer step: the second gradient is taken at the weights
    moved up along the first (rho 0.05), and the step applies it from where the weights were."""
    F.mse_loss(model(inputs), targets).backward()
    params = [param for param in model.parameters() if param.grad is not None]
    norm = torch.norm(torch.stack([param.grad.norm() for param in params]))
    with torch.no_grad():
        climbs = [param.grad * (0.05 / (norm + 1e-12)) for param in params]
        for param, climb in zip(params, climbs, strict=True):
            param.add_(climb)
    optimizer.zero_grad()
    F.mse_loss(model(inputs), targets).backward()
    with torch.no_grad():
        for param, climb in zip(params, climbs, strict=True):
            param.sub_(climb)
    optimizer.step()
    optimizer.zero_grad()


def accumulate_by_hand(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor,
                       args: argparse.Namespace) -> None:  # fmt: skip
    """Steps of two micro-batches of 4, no DataLoader: slices of one tensor (views of one storage), or fresh draws
    copied into one staging tensor (a pinned buffer's pattern: the same tensor, new data)."""
    draws = torch.Generator().manual_seed(3)
    staging = torch.empty(4, 4)
    for step in range(args.steps):
        for micro in range(2):
            if args.pattern == "sliced-accumulation":
                inputs = x[8 * step + 4 * micro : 8 * step + 4 * micro + 4]
            else:
                inputs = staging.copy_(torch.randn(4, 4, generator=draws))
            F.mse_loss(model(inputs), inputs.sum(dim=1, keepdim=True)).div(2).backward()
        optimizer.step()
        optimizer.zero_grad()


def gan_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, generator: nn.Module,
    generator_optimizer: torch.optim.Optimizer, inputs: torch.Tensor, targets: torch.Tensor, noise: torch.Generator,
) -> None:  # fmt: skip
    """The discriminator (`model`) on the data batch and on generated samples, then the generator through it."""
    optimizer.zero_grad()
    F.mse_loss(model(inputs), targets).backward()
    fake = generator(torch.randn(len(inputs), 4, generator=noise))
    model(fake.detach()).square().mean().backward()
    optimizer.step()
    generator_optimizer.zero_grad()
    model(fake).mean().neg().backward()
    generator_optimizer.step()


def gan_step_one_backward(
    model: nn.Module, optimizer: torch.optim.Optimizer, generator: nn.Module,
    generator_optimizer: torch.optim.Optimizer, inputs: torch.Tensor, targets: torch.Tensor, noise: torch.Generator,
) -> None:  # fmt: skip
    """As pytorch-tutorial's GAN writes it: the discriminator on the data batch, then on samples the generator makes
    (not detached), both losses in one backward; then the generator's step on new samples."""
    optimizer.zero_grad()
    real = F.mse_loss(model(inputs), targets)
    fake = generator(torch.randn(len(inputs), 4, generator=noise))
    (real + model(fake).square().mean()).backward()
    optimizer.step()
    optimizer.zero_grad()  # then as PyTorch-GAN's wgan: the samples detached at once (the output tensor dropped)
    fake = generator(torch.randn(len(inputs), 4, generator=noise)).view(len(inputs), 4).detach()
    (model(fake).mean() - model(inputs).mean()).backward()
    optimizer.step()
    generator_optimizer.zero_grad()
    model(generator(torch.randn(len(inputs), 4, generator=noise))).mean().neg().backward()
    generator_optimizer.step()


def conditional_gan_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, generator: nn.Module,
    generator_optimizer: torch.optim.Optimizer, inputs: torch.Tensor, targets: torch.Tensor, noise: torch.Generator,
) -> None:  # fmt: skip
    """As mrzhu-cool/pix2pix-pytorch writes it: the discriminator sees the condition beside the generated half,
    detached, and beside the real half, both concatenations (new storage, neither a generator's output) in one
    backward; then the generator's loss through it."""
    condition, real = inputs[:, :2], inputs[:, 2:]
    fake = generator(inputs)[:, 2:]
    optimizer.zero_grad()
    on_fake = model(torch.cat((condition, fake), 1).detach()).square().mean()
    on_real = F.mse_loss(model(torch.cat((condition, real), 1)), targets)
    ((on_fake + on_real) * 0.5).backward()
    optimizer.step()
    generator_optimizer.zero_grad()
    model(torch.cat((condition, fake), 1)).mean().neg().backward()
    generator_optimizer.step()


if __name__ == "__main__":
    main()
