"""Reproduces the pattern of pytorch/examples/dcgan/main.py (not a copy): argparse at module level with the flags
--dataset (required), --workers, --batchSize, --nz, --ngf, --ndf, --niter, --lr, --beta1, --manualSeed, --outf,
--accel, --dry-run; os.makedirs(outf); random.seed and torch.manual_seed from --manualSeed; two models (a generator
and a discriminator, both with BatchNorm, initialised through model.apply) and two Adam optimizers; per batch the
discriminator back-propagates a real and a fake loss before its step, then the generator steps through the
discriminator; noise drawn per batch with torch.randn; both state_dicts saved every epoch under --outf with %-format
paths.
Our own small models and synthetic data."""

import argparse
import os
import random

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--dataset", required=True, help="only 'fake' (synthetic images) here")
parser.add_argument("--workers", type=int, default=2)
parser.add_argument("--batchSize", type=int, default=64)
parser.add_argument("--nz", type=int, default=32)
parser.add_argument("--ngf", type=int, default=16)
parser.add_argument("--ndf", type=int, default=16)
parser.add_argument("--niter", type=int, default=10)
parser.add_argument("--lr", type=float, default=0.0002)
parser.add_argument("--beta1", type=float, default=0.5)
parser.add_argument("--manualSeed", type=int, default=None)
parser.add_argument("--outf", default=".")
parser.add_argument("--accel", action="store_true")
parser.add_argument("--dry-run", action="store_true")
opt = parser.parse_args()

os.makedirs(opt.outf, exist_ok=True)
if opt.manualSeed is None:
    opt.manualSeed = random.randint(1, 10000)
random.seed(opt.manualSeed)
torch.manual_seed(opt.manualSeed)

if opt.dataset != "fake":
    raise SystemExit("this example only has synthetic data: --dataset fake")
rng = torch.Generator().manual_seed(3)
images = torch.rand(32, 1, 8, 8, generator=rng) * 2 - 1
dataset = TensorDataset(images, torch.zeros(32, dtype=torch.long))
loader = DataLoader(dataset, batch_size=opt.batchSize, shuffle=True, num_workers=opt.workers)

device = torch.accelerator.current_accelerator() if opt.accel else torch.device("cpu")
nz, ngf, ndf = opt.nz, opt.ngf, opt.ndf


def init_weights(module):
    if isinstance(module, (nn.Conv2d, nn.ConvTranspose2d)):
        nn.init.normal_(module.weight, 0.0, 0.02)
    elif isinstance(module, nn.BatchNorm2d):
        nn.init.normal_(module.weight, 1.0, 0.02)
        nn.init.zeros_(module.bias)


class Maker(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf, 4, 1, 0, bias=False),
            nn.BatchNorm2d(ngf),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf, 1, 4, 2, 1, bias=False),
            nn.Tanh(),
        )

    def forward(self, z):
        return self.layers(z)


class Judge(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Conv2d(1, ndf, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf, 1, 4, 1, 0, bias=False),
            nn.Sigmoid(),
        )

    def forward(self, x):
        return self.layers(x).view(-1)


maker = Maker().to(device)
maker.apply(init_weights)
judge = Judge().to(device)
judge.apply(init_weights)

bce = nn.BCELoss()
opt_judge = torch.optim.Adam(judge.parameters(), lr=opt.lr, betas=(opt.beta1, 0.999))
opt_maker = torch.optim.Adam(maker.parameters(), lr=opt.lr, betas=(opt.beta1, 0.999))

for epoch in range(opt.niter):
    for i, (real, _) in enumerate(loader):
        real = real.to(device)
        n = real.size(0)
        # the judge: real images towards 1, made ones towards 0, one step for both
        judge.zero_grad()
        target = torch.ones(n, device=device)
        loss_real = bce(judge(real), target)
        loss_real.backward()
        z = torch.randn(n, nz, 1, 1, device=device)
        made = maker(z)
        loss_made = bce(judge(made.detach()), torch.zeros(n, device=device))
        loss_made.backward()
        opt_judge.step()
        # the maker: fool the judge
        maker.zero_grad()
        loss_maker = bce(judge(made), target)
        loss_maker.backward()
        opt_maker.step()
        print(f"[{epoch}/{opt.niter}][{i}] judge {(loss_real + loss_made).item():.4f} maker {loss_maker.item():.4f}")
        if opt.dry_run:
            break
    torch.save(maker.state_dict(), "%s/netG_epoch_%d.pth" % (opt.outf, epoch))  # noqa: UP031 (the pattern)
    torch.save(judge.state_dict(), "%s/netD_epoch_%d.pth" % (opt.outf, epoch))  # noqa: UP031 (the pattern)
