"""Stand-in (ours) for a published pattern (karpathy/minGPT's GPT.configure_optimizers, nanoGPT's alike): the
model's class builds its own optimizer, AdamW over two parameter groups (decay for weights, none for biases)
chosen by name from `self.named_parameters()`; the script calls `model.configure_optimizers(config)`."""

import torch
from torch import nn


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.body, self.head = nn.Linear(4, 8), nn.Linear(8, 1)

    def forward(self, x):
        return self.head(torch.relu(self.body(x)))

    def configure_optimizers(self, config):
        decay = [p for n, p in self.named_parameters() if n.endswith("weight")]
        no_decay = [p for n, p in self.named_parameters() if n.endswith("bias")]
        groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=config["lr"])
