"""accelerate as its examples write it (by_feature/*.py, run_glue_no_trainer.py): no ddpcli import. A tiny MLP on
seeded synthetic regression data, a linear decay schedule over the optimizer steps, everything through prepare().

    python tests/observe_scripts/accelerate_schedule.py --batch-size 8 --steps 8
    torchrun --standalone --nproc-per-node 2 tests/observe_scripts/accelerate_schedule.py --batch-size 8 --steps 8

The trap this reproduces: a prepared scheduler is stepped once per process at each optimizer step (accelerate's
AcceleratedScheduler, step_scheduler_with_optimizer=True, its default), so at 2 processes a schedule built over
the run's optimizer steps ends halfway and the rest of the run trains at lr 0. `--no-step-with-optimizer` passes
step_scheduler_with_optimizer=False: then it steps once per optimizer step, at any number of processes. The
training loader, prepared, draws through BatchSamplerShard(BatchSampler(SeedableRandomSampler)).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--dataset-size", type=int, default=512)
    parser.add_argument("--no-step-with-optimizer", action="store_true")
    args = parser.parse_args()
    accelerator = Accelerator(cpu=True, step_scheduler_with_optimizer=not args.no_step_with_optimizer)
    set_seed(0)
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(args.dataset_size, 8, generator=generator)
    y = torch.tanh(x @ torch.randn(8, 1, generator=generator))
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda done: max(0.0, 1 - done / args.steps))
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    step = 0
    while step < args.steps:
        for inputs, targets in loader:
            loss = F.mse_loss(model(inputs), targets)
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            step += 1
            if step == args.steps:
                break
    accelerator.print(f"done: {step} steps, last lr {scheduler.get_last_lr()[0]:.4g}")
    accelerator.end_training()


if __name__ == "__main__":
    main()
