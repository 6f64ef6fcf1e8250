"""The pattern of timm's train.py (not its code): -b/--batch-size, --lr None by design with the lr derived from
--lr-base per --lr-base-size of global batch (linear for SGD, sqrt for Ada* and Lamb, unless --lr-base-scale), a
warmup in epochs, --device cuda. It prints the lr it derived and what it received on every rank."""

import argparse
import json
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

parser = argparse.ArgumentParser(description="PyTorch ImageNet Training")
parser.add_argument("-b", "--batch-size", type=int, default=16, metavar="N", help="Input batch size for training")
parser.add_argument("--opt", default="sgd", type=str, metavar="OPTIMIZER", help="Optimizer")
parser.add_argument("--lr", type=float, default=None, metavar="LR", help="learning rate, overrides lr-base if set")
parser.add_argument("--lr-base", type=float, default=0.1, metavar="LR", help="base lr: lr_base * global / base_size")
parser.add_argument("--lr-base-size", type=int, default=256, metavar="DIV", help="base learning rate batch size")
parser.add_argument("--lr-base-scale", type=str, default="", metavar="SCALE", help='"linear", "sqrt" or by opt')
parser.add_argument("--warmup-epochs", type=int, default=5, metavar="N", help="epochs to warmup LR")
parser.add_argument("--epochs", type=int, default=300, metavar="N", help="number of epochs to train")
parser.add_argument("--grad-accum-steps", type=int, default=1, metavar="N")
parser.add_argument("--seed", type=int, default=42, metavar="S")
parser.add_argument("--device", default="cuda", type=str, help="Device (accelerator) to use.")
parser.add_argument("--output", default="", type=str, metavar="PATH")
parser.add_argument("--max-steps", type=int, default=3, help="(this fixture only) stop after so many steps")


def main():
    args = parser.parse_args()
    dist.init_process_group("gloo")
    world = dist.get_world_size()
    if args.lr is None:
        global_batch_size = args.batch_size * world * args.grad_accum_steps
        batch_ratio = global_batch_size / args.lr_base_size
        if not args.lr_base_scale:
            args.lr_base_scale = "sqrt" if any(o in args.opt.lower() for o in ("ada", "lamb")) else "linear"
        if args.lr_base_scale == "sqrt":
            batch_ratio = batch_ratio**0.5
        args.lr = args.lr_base * batch_ratio
    device = torch.device(args.device)
    torch.manual_seed(args.seed)
    data = TensorDataset(torch.randn(256, 4), torch.randn(256, 1))
    loader = DataLoader(data, batch_size=args.batch_size, sampler=DistributedSampler(data, seed=args.seed))
    model = DistributedDataParallel(nn.Linear(4, 1).to(device))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    print("received " + json.dumps({"rank": dist.get_rank(), "lr": args.lr, "device": str(device),
                                    "batch_size": args.batch_size, "pid": os.getpid()}), flush=True)  # fmt: skip
    for step, (x, y) in enumerate(loader):
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x.to(device)), y.to(device)).backward()
        optimizer.step()
        if step + 1 == args.max_steps:
            break
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
