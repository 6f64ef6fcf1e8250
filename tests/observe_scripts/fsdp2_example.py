"""Reproduces the pattern of pytorch/examples distributed/FSDP2/example.py (not a copy): LOCAL_RANK's device, the
backend torch picks for it, a toy Transformer built on the meta device, fully_shard on every block and then on the
root, to_empty + reset_parameters, Adam at lr 1e-2, `torch.manual_seed(0)` on every rank and a fresh
`torch.randint` batch each step (so every rank draws the same tokens), `model(x).sum()` as the loss,
clip_grad_norm_, 10 steps, a distributed checkpoint saved under ./checkpoints, destroy_process_group.

Ours: a smaller model, and two things the CPU run needs. The published script exits without 2 GPUs and passes
`device_id` (an accelerator) to init_process_group; here the CPU takes gloo without it. It hard-codes batch_size 32;
here BATCH overrides it, so a 1-process run can take the 2-process run's global batch. Its root reset_parameters
leaves the blocks' parameters as to_empty left them (uninitialised memory: a NaN or garbage loss that depends on the
machine); ours resets every block too, so two runs start from the same seeded parameters."""

import os

import torch
import torch.distributed.checkpoint as dcp
import torch.nn.functional as F
from torch import nn
from torch.distributed.checkpoint.state_dict import get_model_state_dict
from torch.distributed.fsdp import fully_shard


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.down(F.gelu(self.up(self.norm(h))))

    def reset_parameters(self) -> None:
        self.norm.reset_parameters()
        self.up.reset_parameters()
        self.down.reset_parameters()


class Transformer(nn.Module):
    def __init__(self, vocab_size: int, dim: int, n_layers: int, max_seq_len: int) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab_size, dim)
        self.pos_embeddings = nn.Embedding(max_seq_len, dim)
        self.layers = nn.ModuleList(Block(dim) for _ in range(n_layers))
        self.norm = nn.LayerNorm(dim)
        self.output = nn.Linear(dim, vocab_size, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(tokens) + self.pos_embeddings(torch.arange(tokens.shape[1]))
        for layer in self.layers:
            h = layer(h)
        return self.output(self.norm(h)).float()

    def reset_parameters(self) -> None:
        self.tok_embeddings.reset_parameters()
        self.pos_embeddings.reset_parameters()
        for layer in self.layers:
            layer.reset_parameters()
        self.norm.reset_parameters()
        self.output.reset_parameters()


def main() -> None:
    rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cpu")
    print(f"Running on rank {rank} on device {device}")
    torch.distributed.init_process_group(backend=torch.distributed.get_default_backend_for_device(device))

    torch.manual_seed(0)
    vocab_size, batch_size, seq_len = 64, int(os.environ.get("BATCH", "32")), 8
    with torch.device("meta"):
        model = Transformer(vocab_size, dim=16, n_layers=2, max_seq_len=seq_len)
    for layer in model.layers:
        fully_shard(layer)
    fully_shard(model)
    model.to_empty(device=device)
    model.reset_parameters()

    optim = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(10):
        x = torch.randint(0, vocab_size, (batch_size, seq_len), device=device)
        loss = model(x).sum()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optim.step()
        optim.zero_grad()

    dcp.save({"model": get_model_state_dict(model)}, checkpoint_id="checkpoints")
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
