"""A tiny script in nanoGPT's style (module-level config globals overridden by configurator.py, the total
gradient accumulation divided by the world size, `iter_num > max_iters` ending the loop after max_iters + 1
steps, random batches instead of a DataLoader). It prints what it received on every rank."""

import json
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

# -----------------------------------------------------------------------------
# default config values: the option to override each is --name=value
out_dir = "out"
batch_size = 4
block_size = 8
gradient_accumulation_steps = 2 * 2  # used to simulate larger batch sizes
learning_rate = 6e-4  # max learning rate
max_iters = 5  # total number of training iterations
warmup_iters = 2  # how many steps to warm up for
lr_decay_iters = 5  # should be ~= max_iters per Chinchilla
min_lr = 6e-5  # minimum learning rate, should be ~= learning_rate/10 per Chinchilla
backend = "nccl"  # 'nccl', 'gloo', etc.
device = "cuda"  # examples: 'cpu', 'cuda', 'cuda:0'
compile = True  # use PyTorch 2.0 to compile the model to be faster
# -----------------------------------------------------------------------------
config_keys = [k for k, v in globals().items() if not k.startswith("_") and isinstance(v, int | float | bool | str)]
exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "configurator.py")).read())  # noqa: SIM115
config = {k: globals()[k] for k in config_keys}
# -----------------------------------------------------------------------------

ddp = int(os.environ.get("RANK", -1)) != -1
if ddp:
    dist.init_process_group(backend=backend)
    ddp_rank, ddp_world_size = dist.get_rank(), dist.get_world_size()
    assert gradient_accumulation_steps % ddp_world_size == 0
    gradient_accumulation_steps //= ddp_world_size
else:
    ddp_rank, ddp_world_size = 0, 1
seed_offset = ddp_rank  # each process gets a different seed, so different random batches
torch.manual_seed(1337 + seed_offset)
print("received " + json.dumps({"rank": ddp_rank, "world_size": ddp_world_size, "batch_size": batch_size,
                                "gradient_accumulation_steps": gradient_accumulation_steps,
                                "learning_rate": learning_rate, "max_iters": max_iters, "min_lr": min_lr,
                                "device": device, "backend": backend, "compile": compile}), flush=True)  # fmt: skip

model = nn.Sequential(nn.Embedding(16, 8), nn.Flatten(), nn.Linear(8 * block_size, 16)).to(device)
model = DDP(model) if ddp else model
optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)


def get_lr(it):
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    return min_lr + (learning_rate - min_lr) * max(0.0, 1 - (it - warmup_iters) / max(1, lr_decay_iters))


def get_batch():
    x = torch.randint(16, (batch_size, block_size))
    return x, x[:, 0]


iter_num = 0
while True:
    for param_group in optimizer.param_groups:
        param_group["lr"] = get_lr(iter_num)
    for _micro_step in range(gradient_accumulation_steps):
        x, y = get_batch()
        loss = nn.functional.cross_entropy(model(x), y) / gradient_accumulation_steps
        loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    iter_num += 1
    if iter_num > max_iters:
        break
if ddp:
    dist.destroy_process_group()
