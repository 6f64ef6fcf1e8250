"""argparse with underscore flags, a short alias and ArgumentDefaultsHelpFormatter; trains by epochs."""

import argparse


def main() -> None:
    parser = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--bs", "--batch_size", dest="batch_size", type=int, default=24, help="batch per device")
    parser.add_argument("--gradient_accumulation_steps", type=int, default=2, help="accumulation")
    parser.add_argument("--learning_rate", type=float, default=3e-4, help="peak learning rate")
    parser.add_argument("--num_epochs", type=float, default=2.0, help="epochs over the data")
    parser.add_argument("--num_samples", type=int, default=960, help="training samples")
    parser.add_argument("--data_path", default="data.bin", help="training data")
    parser.parse_args()
    raise SystemExit("training must not run under ddpcli init")


def make_optimizer(parameters, lr):
    """What the training would build (never reached under --help): init reads the SGD class from the source."""
    import torch

    return torch.optim.SGD(parameters, lr=lr)


if __name__ == "__main__":
    main()
