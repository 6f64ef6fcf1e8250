"""Which dimension of a batch is the batch: the model's own convention where its input is sequence-first.

pytorch/examples' word_language_model feeds its LSTM `(bptt, batch)` token ids (batch_first=False, torch's default
for RNN, LSTM, GRU and attention layers): dim 0 is the sequence, 8 at every world size, so ddpcli counted 8 "samples"
a micro-batch and compare paired nothing. A model whose first sequence layer (in registration order) is
sequence-first has its batch in dim 1, unless its DataLoader says otherwise (a loader whose batch_size is dim 0).
"""

from typing import Any

import torch
from torch import nn

SEQUENCE_LAYERS = (nn.RNNBase, nn.MultiheadAttention)  # the Transformer layers hold MultiheadAttention


class BatchLayout:
    def __init__(self, loaders: dict[int, dict[str, Any]]) -> None:
        self.loaders = loaders  # the observer's, by id(loader)
        self.first: dict[int, bool] = {}  # id(module) -> sequence-first

    def _sequence_first(self, module: Any) -> bool:
        key = id(module)
        if key not in self.first:
            layer = next((m for m in module.modules() if isinstance(m, SEQUENCE_LAYERS)), None) if isinstance(
                module, nn.Module
            ) else None  # fmt: skip
            self.first[key] = layer is not None and getattr(layer, "batch_first", True) is False
        return self.first[key]

    def batch_dim(self, module: Any, batch: torch.Tensor, loader: int | None) -> int:
        if batch.dim() < 2 or not self._sequence_first(module):
            return 0
        size = self.loaders.get(loader, {}).get("batch_size") if loader is not None else None
        if isinstance(size, int) and size == batch.shape[0] and size != batch.shape[1]:
            return 0  # the loader's batches are batch-first
        return 1
