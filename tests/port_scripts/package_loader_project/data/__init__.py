"""Stand-in (ours): the data package of package_loader_project (see train.py)."""

from torch.utils.data import DataLoader

from data.synthetic import Shapes


def make_data_loader(args):
    train_set, val_set = Shapes(32, seed=1), Shapes(16, seed=2)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, drop_last=True)
    val_loader = DataLoader(val_set, batch_size=args.batch_size, shuffle=False)
    return train_loader, val_loader, Shapes.NUM_CLASSES
