"""Stand-in (ours) for a published pattern (akamaster/pytorch_resnet_cifar10, bearpaw's models package): the project's
model module builds the network and returns it in nn.DataParallel, so every checkpoint the project writes holds
`module.` keys; the script trains and saves what it is given. And a save helper that unwraps DataParallel when it
sees one (aaron-xichen/pytorch-playground's utee.misc.model_snapshot: `if isinstance(model, nn.DataParallel): model =
model.module`), so its file holds the network's own names."""

from torch import nn


def build() -> nn.Module:
    net = nn.Sequential(nn.Linear(6, 4), nn.Tanh(), nn.Linear(4, 1))
    return nn.DataParallel(net)


def snapshot(model: nn.Module, path: str) -> None:
    import torch

    if isinstance(model, (nn.DataParallel,)):
        model = model.module
    torch.save(model.state_dict(), path)
