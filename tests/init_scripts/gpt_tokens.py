"""build-nanogpt's batch arithmetic (karpathy/build-nanogpt train_gpt2.py), tiny: no parser, a token budget
`total_batch_size` split into micro-batches of B sequences of T tokens, the accumulation derived from the world
size. The published script has total_batch_size = 524288 with B = 64, T = 1024; here 2048 tokens with B = 4,
T = 32 (16 micro-batches at 1 process, 8 at 2), so that an end-to-end test stays short."""

import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

ddp = int(os.environ.get("RANK", -1)) != -1
if ddp:
    dist.init_process_group(backend="gloo")
    ddp_rank = int(os.environ["RANK"])
    ddp_world_size = int(os.environ["WORLD_SIZE"])
else:
    ddp_rank = 0
    ddp_world_size = 1

VOCAB = 64


class DataLoaderLite:
    def __init__(self, B, T, process_rank, num_processes):
        self.B, self.T, self.process_rank, self.num_processes = B, T, process_rank, num_processes
        self.tokens = torch.randint(0, VOCAB, (20000,), generator=torch.Generator().manual_seed(0))
        self.position = B * T * process_rank

    def next_batch(self):
        B, T = self.B, self.T
        buf = self.tokens[self.position : self.position + B * T + 1]
        x, y = buf[:-1].view(B, T), buf[1:].view(B, T)
        self.position += B * T * self.num_processes
        if self.position + B * T * self.num_processes + 1 > len(self.tokens):
            self.position = B * T * self.process_rank
        return x, y


total_batch_size = 2048  # in number of tokens
B = 4  # micro batch size
T = 32  # sequence length
assert total_batch_size % (B * T * ddp_world_size) == 0, "make sure total_batch_size is divisible by B * T * world"
grad_accum_steps = total_batch_size // (B * T * ddp_world_size)
train_loader = DataLoaderLite(B=B, T=T, process_rank=ddp_rank, num_processes=ddp_world_size)

torch.manual_seed(1337)
model = nn.Sequential(nn.Embedding(VOCAB, 16), nn.Linear(16, VOCAB))
if ddp:
    model = DDP(model)
max_lr = 6e-4
max_steps = 3
optimizer = torch.optim.AdamW(model.parameters(), lr=max_lr)
for step in range(max_steps):
    optimizer.zero_grad()
    for micro_step in range(grad_accum_steps):
        x, y = train_loader.next_batch()
        if ddp:
            model.require_backward_grad_sync = micro_step == grad_accum_steps - 1
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, VOCAB), y.view(-1)) / grad_accum_steps
        loss.backward()
    optimizer.step()
    if ddp_rank == 0:
        print(f"step {step} loss {loss.item() * grad_accum_steps:.4f}", flush=True)
if ddp:
    dist.barrier()
    dist.destroy_process_group()
