"""Hugging Face Trainer, as its docs write it: no ddpcli import. A tiny randomly initialised GPT-2 (built from a config:
no download) learning a synthetic token language.

    python tests/observe_scripts/hf_train.py --batch-size 8
    torchrun --standalone --nproc-per-node 2 tests/observe_scripts/hf_train.py --batch-size 4 --grad-accum 2

Under torchrun the Trainer (through accelerate) joins the process group, wraps the model in DDP and shards the data.
With --no-use-cpu (run_clm.py on CPU without its --use_cpu) it never wraps the model: every rank trains its own copy
on the same batches from the same seed.
"""

from __future__ import annotations

import argparse
import tempfile

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments, set_seed

VOCAB, LENGTH = 64, 12


class Tokens(Dataset):
    """Sequences that count up from a random start modulo the vocabulary: a language a tiny model learns quickly."""

    def __init__(self, size: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        starts = torch.randint(0, VOCAB, (size, 1), generator=generator)
        self.ids = (starts + torch.arange(LENGTH)) % VOCAB

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[index], "labels": self.ids[index]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--grad-accum", type=int, default=1)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--dataset-size", type=int, default=512)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-use-cpu", action="store_true", help="TrainingArguments(use_cpu=False)")
    parser.add_argument("--output-dir", default=None, help="the Trainer's output_dir (default: a temporary one)")
    args = parser.parse_args()
    set_seed(args.seed)
    config = GPT2Config(vocab_size=VOCAB, n_positions=LENGTH, n_embd=32, n_layer=2, n_head=2)
    model = GPT2LMHeadModel(config)
    with tempfile.TemporaryDirectory() as scratch:
        training = TrainingArguments(
            output_dir=args.output_dir or scratch,
            per_device_train_batch_size=args.batch_size,
            gradient_accumulation_steps=args.grad_accum,
            learning_rate=args.lr,
            max_steps=args.steps,
            use_cpu=not args.no_use_cpu,
            report_to=[],
            save_strategy="no",
            logging_steps=1,
            seed=args.seed,
            disable_tqdm=True,
        )
        Trainer(model=model, args=training, train_dataset=Tokens(args.dataset_size, args.seed)).train()


if __name__ == "__main__":
    main()
