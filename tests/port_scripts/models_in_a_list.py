"""Stand-in (ours) for a published pattern (MorvanZhou/PyTorch-Tutorial's 504_batch_normalization): two nets kept in
a list, one optimizer each built by a list comprehension over it, both trained on every batch in a `zip` loop; the
class builds an input BatchNorm layer on every instance and calls it only when its flag is set, so the net without
it has parameters no forward reaches; each epoch starts with a forward of held-out data in eval mode, gradients on."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self, batch_normalization: bool = False) -> None:
        super().__init__()
        self.do_bn = batch_normalization
        self.bn_input = nn.BatchNorm1d(1, momentum=0.5)
        self.hidden = nn.Linear(1, 8)
        self.predict = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.do_bn:
            x = self.bn_input(x)
        return self.predict(torch.tanh(self.hidden(x)))


torch.manual_seed(0)
x = torch.linspace(-2, 2, 32).unsqueeze(1)
loader = DataLoader(TensorDataset(x, x.pow(2)), batch_size=8, shuffle=True)
test_x = torch.linspace(-2, 2, 10).unsqueeze(1)

nets = [Net(batch_normalization=False), Net(batch_normalization=True)]
opts = [torch.optim.Adam(net.parameters(), lr=0.03) for net in nets]
loss_func = nn.MSELoss()

if __name__ == "__main__":
    losses: list[list[float]] = [[], []]
    for epoch in range(2):
        for net, history in zip(nets, losses, strict=True):
            net.eval()
            history.append(round(loss_func(net(test_x), test_x.pow(2)).item(), 6))
            net.train()
        seen = 0
        for b_x, b_y in loader:
            seen += len(b_x)
            for net, opt in zip(nets, opts, strict=True):
                loss = loss_func(net(b_x), b_y)
                opt.zero_grad()
                loss.backward()
                opt.step()
        print("epoch", epoch, "samples", seen, "held-out", losses[0][-1], losses[1][-1])
    torch.save([net.state_dict() for net in nets], "nets.pt")
