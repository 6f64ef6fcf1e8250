"""A Trainer script in the shape of transformers' examples/pytorch/language-modeling/run_clm.py: HfArgumentParser
over its own dataclasses and TrainingArguments, `parse_args_into_dataclasses()`, Trainer(...).train(). Tiny: a
randomly initialised GPT-2 built from a config (no download) on synthetic counting sequences. On a machine without
CUDA the Trainer under torchrun wraps DDP only with `--use_cpu` (and a gloo `--ddp_backend`)."""

from dataclasses import dataclass, field

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, HfArgumentParser, Trainer, TrainingArguments, set_seed

VOCAB = 64


@dataclass
class ModelArguments:
    n_embd: int = field(default=32, metadata={"help": "width of the tiny model"})


@dataclass
class DataTrainingArguments:
    block_size: int = field(default=12, metadata={"help": "tokens per training sequence"})
    max_train_samples: int = field(default=256, metadata={"help": "training sequences"})


class Counting(Dataset):
    def __init__(self, size: int, length: int, seed: int) -> None:
        starts = torch.randint(0, VOCAB, (size, 1), generator=torch.Generator().manual_seed(seed))
        self.ids = (starts + torch.arange(length)) % VOCAB

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[index], "labels": self.ids[index]}


def main() -> None:
    parser = HfArgumentParser((ModelArguments, DataTrainingArguments, TrainingArguments))
    model_args, data_args, training_args = parser.parse_args_into_dataclasses()
    set_seed(training_args.seed)
    config = GPT2Config(vocab_size=VOCAB, n_positions=data_args.block_size, n_embd=model_args.n_embd, n_layer=1,
                        n_head=2)  # fmt: skip
    model = GPT2LMHeadModel(config)
    train_dataset = Counting(data_args.max_train_samples, data_args.block_size, training_args.seed)
    trainer = Trainer(model=model, args=training_args, train_dataset=train_dataset)
    trainer.train()
    print(f"distributed: {training_args.parallel_mode} world {training_args.world_size}", flush=True)


if __name__ == "__main__":
    main()
