"""Reproduces the pattern of pytorch/examples/regression/main.py (not a copy): no parser; batches drawn by hand
(get_batch: torch.randn, no DataLoader) from a hidden polynomial; a single nn.Linear whose parameters are updated by
hand (param.data.add_) with no optimizer; an open-ended loop (itertools.count) until the loss is small. Our own
code; `ddpcli port` must refuse it: no optimizer step."""

from itertools import count

import torch
import torch.nn.functional as F

DEGREE = 3
torch.manual_seed(4)
true_w = torch.randn(DEGREE, 1) * 2
true_b = torch.randn(1)


def features(x):
    x = x.unsqueeze(1)
    return torch.cat([x**k for k in range(1, DEGREE + 1)], 1)


def target(x):
    return x.mm(true_w) + true_b.item()


def get_batch(batch_size=32):
    x = features(torch.randn(batch_size))
    return x, target(x)


fc = torch.nn.Linear(DEGREE, 1)
for step in count(1):
    x, y = get_batch()
    fc.zero_grad()
    loss = F.smooth_l1_loss(fc(x), y)
    loss.backward()
    for param in fc.parameters():
        param.data.add_(-0.1 * param.grad)
    if loss.item() < 1e-3 or step > 5000:
        break

print(f"loss {loss.item():.6f} after {step} batches")
print("learned", fc.weight.view(-1).tolist(), fc.bias.item())
print("actual ", true_w.view(-1).tolist(), true_b.item())
