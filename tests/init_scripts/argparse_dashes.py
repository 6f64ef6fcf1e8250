"""argparse with dashed flags and the default formatter (its --help shows no defaults by itself)."""

import argparse

parser = argparse.ArgumentParser(description="A training script that only parses its flags.")
parser.add_argument("--batch-size", type=int, default=32, help="samples per process")
parser.add_argument("--grad-accum-steps", type=int, default=1, help="micro-batches per optimizer step")
parser.add_argument("--lr", type=float, default=0.1, help="learning rate")
parser.add_argument("--warmup-steps", type=int, default=10)
parser.add_argument("--max-steps", type=int, default=200, help="optimizer steps")
parser.add_argument("--seed", type=int, default=7, help="random seed")
parser.add_argument("--output-dir", default="out", help="where checkpoints go")
parser.add_argument("--optimizer", default="adamw", choices=["sgd", "adamw"])
parser.add_argument("--global-batch-size", type=int, default=None, help="not a per-device batch: never wired")
parser.add_argument("--verbose", action="store_true", help="chatty")

if __name__ == "__main__":
    parser.parse_args()
    raise SystemExit("training must not run under ddpcli init")
