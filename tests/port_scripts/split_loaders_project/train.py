"""Stand-in (ours) for a published pattern (kevinzakka/recurrent-visual-attention: main.py, data_loader.py and
trainer.py): data.py splits one data set into training and validation indices with two SubsetRandomSamplers and
returns both loaders as a tuple; the script hands the tuple to trainer.py's Trainer, which takes `data_loader[0]`
and `data_loader[1]` and counts its samples as `len(loader.sampler.indices)`, trains, validates each epoch and
saves a checkpoint through a method of its own."""

import argparse

import torch
from data import get_train_valid_loader
from trainer import Trainer

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=8)
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()

torch.manual_seed(0)
loaders = get_train_valid_loader(args.batch_size, valid_size=0.25)
trainer = Trainer(loaders, args.epochs)
trainer.train()
