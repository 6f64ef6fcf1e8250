"""Stand-in (ours) for a published pattern (Bjarten/early-stopping-pytorch's EarlyStopping, kept in a module of the
project): called with the epoch's loss and the model, it saves a checkpoint when the loss improves and sets
`early_stop` after `patience` epochs without improvement."""

import torch


class EarlyStopping:
    def __init__(self, patience=1, path="checkpoint.pt"):
        self.patience, self.path = patience, path
        self.counter, self.best, self.early_stop = 0, None, False

    def __call__(self, loss, model):
        if self.best is None or loss < self.best - 1e-4:
            self.best, self.counter = loss, 0
            torch.save(model.state_dict(), self.path)
        else:
            self.counter += 1
            if self.counter >= self.patience:
                self.early_stop = True
