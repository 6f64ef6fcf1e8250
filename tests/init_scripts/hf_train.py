"""transformers' HfArgumentParser with TrainingArguments (hundreds of flags; the usual names are among them)."""

from dataclasses import dataclass, field

from transformers import HfArgumentParser, TrainingArguments


@dataclass
class ModelArguments:
    model_name_or_path: str = field(default="tiny", metadata={"help": "model to fine-tune"})


if __name__ == "__main__":
    HfArgumentParser((ModelArguments, TrainingArguments)).parse_args_into_dataclasses()
    raise SystemExit("training must not run under ddpcli init")
