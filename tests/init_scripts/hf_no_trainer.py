"""The pattern of transformers' run_glue_no_trainer.py (not its code): argparse with a required
--model_name_or_path, --per_device_train_batch_size, --learning_rate, --num_warmup_steps, --max_train_steps
(None by default: epochs decide), --lr_scheduler_type, --output_dir and --seed None; accelerate without a --cpu
flag; AdamW built in the source with no optimizer flag."""

import argparse


def parse_args():
    parser = argparse.ArgumentParser(description="Finetune a transformers model on a text classification task")
    parser.add_argument("--model_name_or_path", type=str, required=True, help="Path to pretrained model")
    parser.add_argument("--per_device_train_batch_size", type=int, default=8, help="Batch size per device")
    parser.add_argument("--learning_rate", type=float, default=5e-5, help="Initial learning rate")
    parser.add_argument("--num_train_epochs", type=int, default=3, help="Total number of training epochs")
    parser.add_argument("--max_train_steps", type=int, default=None, help="Overrides num_train_epochs if set")
    parser.add_argument("--gradient_accumulation_steps", type=int, default=1)
    parser.add_argument("--lr_scheduler_type", default="linear", help="The scheduler type to use.")
    parser.add_argument("--num_warmup_steps", type=int, default=0, help="Number of steps for the warmup")
    parser.add_argument("--output_dir", type=str, default=None, help="Where to store the final model.")
    parser.add_argument("--seed", type=int, default=None, help="A seed for reproducible training.")
    return parser.parse_args()


def main():
    args = parse_args()
    import torch
    from accelerate import Accelerator

    accelerator = Accelerator(gradient_accumulation_steps=args.gradient_accumulation_steps)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
    accelerator.prepare(model, optimizer)


if __name__ == "__main__":
    main()
