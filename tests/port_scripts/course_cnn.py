"""Reproduces the pattern of patrickloeber/pytorchTutorial/14_cnn.py (not a copy): no parser at all, module-level
hyper-parameters (`num_epochs = 5`, `batch_size = 4`, `learning_rate = 0.001`), everything at module level; a
device picked from torch.cuda.is_available(); a small CNN; SGD; a training loop printing every N steps;
torch.save(model.state_dict(), PATH) after training; then a test loop under torch.no_grad() with per-class counts.
Our own small model and synthetic data (seeded so that the script is deterministic)."""

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

num_epochs = 5
batch_size = 4
learning_rate = 0.001
classes = ("red", "green", "blue")

torch.manual_seed(0)
generator = torch.Generator().manual_seed(8)
pictures = torch.randn(88, 3, 6, 6, generator=generator)
kinds = torch.randint(0, 3, (88,), generator=generator)
train_dataset = TensorDataset(pictures[:64], kinds[:64])
test_dataset = TensorDataset(pictures[64:], kinds[64:])
train_loader = DataLoader(train_dataset, batch_size=batch_size, shuffle=True)
test_loader = DataLoader(test_dataset, batch_size=batch_size, shuffle=False)


class SmallConv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 5, 3)
        self.fc1 = nn.Linear(5 * 2 * 2, 12)
        self.fc2 = nn.Linear(12, 3)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


model = SmallConv().to(device)
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=learning_rate)

steps = len(train_loader)
for epoch in range(num_epochs):
    for i, (images, labels) in enumerate(train_loader):
        images = images.to(device)
        labels = labels.to(device)
        loss = criterion(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if (i + 1) % 8 == 0:
            print(f"Epoch [{epoch + 1}/{num_epochs}], Step [{i + 1}/{steps}], Loss: {loss.item():.4f}")

print("Finished Training")
PATH = "./cnn.pth"
torch.save(model.state_dict(), PATH)

with torch.no_grad():
    correct = 0
    per_class = [0, 0, 0]
    seen = [0, 0, 0]
    for images, labels in test_loader:
        predicted = model(images.to(device)).argmax(1)
        correct += (predicted == labels.to(device)).sum().item()
        for label, guess in zip(labels.tolist(), predicted.tolist(), strict=True):
            seen[label] += 1
            per_class[label] += int(label == guess)
    print(f"Accuracy of the network: {100.0 * correct / len(test_dataset)} %")
    for k, name in enumerate(classes):
        print(f"Accuracy of {name}: {100.0 * per_class[k] / max(seen[k], 1)} %")
