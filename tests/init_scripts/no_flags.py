"""argparse, but no flag ddpcli knows: the file must still be valid, with a warning per missing flag."""

import argparse

parser = argparse.ArgumentParser()
parser.add_argument("--model-name", default="tiny", help="which model")
parser.add_argument("--global-batch-size", type=int, default=128, help="total batch (not per device)")

if __name__ == "__main__":
    parser.parse_args()
    raise SystemExit("training must not run under ddpcli init")
