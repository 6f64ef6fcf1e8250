"""Reproduces the pattern of transformers' examples/pytorch/language-modeling/run_clm.py (not a copy):
HfArgumentParser over ModelArguments, DataTrainingArguments and TrainingArguments; a config built from scratch and
AutoModelForCausalLM.from_config; texts tokenized and then concatenated and cut into block_size chunks
(`group_texts`, labels = input_ids), each under `training_args.main_process_first`; a validation split by
percentage; Trainer(..., processing_class=tokenizer, data_collator=default_data_collator) with --do_train and
--do_eval; train, save_model, log_metrics, save_metrics, save_state, then evaluate.

Ours: a tiny GPT-2 config, a word-level tokenizer built in memory (nothing is downloaded) and synthetic texts, kept
as plain lists where the original holds a `datasets` Dataset (its .map calls become the same functions applied once).
On a machine without CUDA the Trainer under torchrun is data-parallel only with --use_cpu."""

from dataclasses import dataclass, field
from itertools import chain

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from torch.utils.data import Dataset
from transformers import (
    AutoModelForCausalLM,
    GPT2Config,
    HfArgumentParser,
    PreTrainedTokenizerFast,
    Trainer,
    TrainingArguments,
    default_data_collator,
    set_seed,
)

WORDS = [f"w{index}" for index in range(60)]


@dataclass
class ModelArguments:
    n_embd: int = field(default=32, metadata={"help": "width of the tiny model"})


@dataclass
class DataTrainingArguments:
    block_size: int = field(default=12, metadata={"help": "tokens per training sequence"})
    max_train_samples: int | None = field(default=None, metadata={"help": "truncate the training set"})
    validation_split_percentage: int = field(default=5, metadata={"help": "the share held out for evaluation"})


class Chunks(Dataset):
    def __init__(self, columns: dict[str, list[list[int]]]) -> None:
        self.columns = columns

    def __len__(self) -> int:
        return len(self.columns["input_ids"])

    def __getitem__(self, index: int) -> dict[str, list[int]]:
        return {name: values[index] for name, values in self.columns.items()}


def synthetic_texts(count: int, seed: int) -> list[str]:
    generator = torch.Generator().manual_seed(seed)
    return [" ".join(WORDS[i] for i in torch.randint(0, len(WORDS), (20,), generator=generator).tolist())
            for _ in range(count)]  # fmt: skip


def main() -> None:
    parser = HfArgumentParser((ModelArguments, DataTrainingArguments, TrainingArguments))
    model_args, data_args, training_args = parser.parse_args_into_dataclasses()
    set_seed(training_args.seed)

    vocab = {word: index for index, word in enumerate(["[UNK]", *WORDS])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]")
    config = GPT2Config(vocab_size=len(vocab), n_positions=data_args.block_size, n_embd=model_args.n_embd,
                        n_layer=1, n_head=2)  # fmt: skip
    model = AutoModelForCausalLM.from_config(config)

    texts = synthetic_texts(200, seed=3)
    with training_args.main_process_first(desc="dataset map tokenization"):
        tokenized = tokenizer(texts)
    block_size = data_args.block_size

    def group_texts(examples: dict[str, list[list[int]]]) -> dict[str, list[list[int]]]:
        concatenated = {name: list(chain(*examples[name])) for name in examples}
        total_length = (len(concatenated["input_ids"]) // block_size) * block_size
        result = {name: [tokens[i : i + block_size] for i in range(0, total_length, block_size)]
                  for name, tokens in concatenated.items()}  # fmt: skip
        result["labels"] = result["input_ids"].copy()
        return result

    with training_args.main_process_first(desc="grouping texts together"):
        lm_columns = group_texts({name: tokenized[name] for name in ("input_ids", "attention_mask")})
    held_out = len(lm_columns["input_ids"]) * data_args.validation_split_percentage // 100
    train_dataset = Chunks({name: values[held_out:] for name, values in lm_columns.items()})
    if data_args.max_train_samples is not None:
        train_dataset = Chunks({name: values[: data_args.max_train_samples]
                                for name, values in train_dataset.columns.items()})  # fmt: skip
    eval_dataset = Chunks({name: values[:held_out] for name, values in lm_columns.items()})

    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset if training_args.do_train else None,
        eval_dataset=eval_dataset if training_args.do_eval else None,
        processing_class=tokenizer,
        data_collator=default_data_collator,
    )
    if training_args.do_train:
        train_result = trainer.train()
        trainer.save_model()
        trainer.log_metrics("train", train_result.metrics)
        trainer.save_metrics("train", train_result.metrics)
        trainer.save_state()
    if training_args.do_eval:
        metrics = trainer.evaluate()
        trainer.log_metrics("eval", metrics)
        trainer.save_metrics("eval", metrics)


if __name__ == "__main__":
    main()
