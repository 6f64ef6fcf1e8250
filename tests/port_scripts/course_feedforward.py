"""Reproduces the pattern of patrickloeber/pytorchTutorial/13_feedforward.py (not a copy): no parser at all,
module-level hyper-parameters (`input_size`, `hidden_size`, `num_classes`, `num_epochs = 2`, `batch_size = 100`,
`learning_rate = 0.001`), everything at module level; a peek at one batch with next(iter(train_loader)) before
training; a two-layer network; Adam; a reshape of each batch inside the loop; an accuracy test loop; no file saved.
Our own small model and synthetic data (seeded so that the script is deterministic)."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

input_size = 25
hidden_size = 20
num_classes = 4
num_epochs = 2
batch_size = 100
learning_rate = 0.001

torch.manual_seed(0)
g = torch.Generator().manual_seed(13)
features = torch.randn(500, 1, 5, 5, generator=g)
targets = torch.randint(0, num_classes, (500,), generator=g)
train_dataset = TensorDataset(features[:400], targets[:400])
test_dataset = TensorDataset(features[400:], targets[400:])
train_loader = DataLoader(dataset=train_dataset, batch_size=batch_size, shuffle=True)
test_loader = DataLoader(dataset=test_dataset, batch_size=batch_size, shuffle=False)

first_inputs, first_targets = next(iter(test_loader))
print("one batch:", tuple(first_inputs.shape), tuple(first_targets.shape))


class TwoLayer(nn.Module):
    def __init__(self, n_in: int, n_hidden: int, n_out: int) -> None:
        super().__init__()
        self.first = nn.Linear(n_in, n_hidden)
        self.act = nn.Tanh()
        self.second = nn.Linear(n_hidden, n_out)

    def forward(self, x):
        return self.second(self.act(self.first(x)))


model = TwoLayer(input_size, hidden_size, num_classes).to(device)
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)

for epoch in range(num_epochs):
    for i, (inputs, labels) in enumerate(train_loader):
        inputs = inputs.reshape(-1, input_size).to(device)
        labels = labels.to(device)
        loss = criterion(model(inputs), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"Epoch [{epoch + 1}/{num_epochs}], Step [{i + 1}], Loss: {loss.item():.4f}")

with torch.no_grad():
    hits = 0
    for inputs, labels in test_loader:
        guess = model(inputs.reshape(-1, input_size).to(device)).argmax(1)
        hits += (guess == labels.to(device)).sum().item()
    print(f"Accuracy on the test set: {100.0 * hits / len(test_dataset)} %")
