"""Stand-in (ours): the checkpoint and config helpers of writer_handed_project (see train.py)."""

import json
import os

import torch


def save_checkpoint(state, filename):
    torch.save(state, filename)


def save_config(folder, config):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as outfile:
        json.dump(config, outfile)
