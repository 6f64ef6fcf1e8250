"""argparse with subcommands (`train.py train --lr 0.1`, `train.py eval`): a required subcommand, whose own
parser holds the flags init wires."""

import argparse

parser = argparse.ArgumentParser()
parser.add_argument("--verbose", action="store_true")
commands = parser.add_subparsers(dest="command", required=True)
train = commands.add_parser("train", help="train a model")
train.add_argument("--batch-size", type=int, default=16)
train.add_argument("--lr", type=float, default=0.05)
train.add_argument("--steps", type=int, default=20)
evaluate = commands.add_parser("eval", help="evaluate a checkpoint")
evaluate.add_argument("--checkpoint", default="model.pt")

if __name__ == "__main__":
    parser.parse_args()
    raise SystemExit("training must not run under ddpcli init")
