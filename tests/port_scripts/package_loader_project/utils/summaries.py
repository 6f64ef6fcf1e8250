"""Stand-in (ours): the TensorBoard summary of package_loader_project (see train.py)."""

import os

from torch.utils.tensorboard import SummaryWriter


class TensorboardSummary:
    def __init__(self, directory):
        self.directory = directory

    def create_summary(self):
        writer = SummaryWriter(log_dir=os.path.join(self.directory))
        return writer
