# -*- coding: utf-8 -*-
"""Reproduces the pattern of pytorch/tutorials beginner_source/blitz/cifar10_tutorial.py ("Training a Classifier";
not a copy): a coding line and a long module docstring, then module-level code throughout with its imports spread
through the file (torch first; numpy after the loaders are built; torch.nn before the model class; torch.optim
before the optimizer), a peek at one training batch, a loop printing the running loss every N mini-batches,
torch.save(net.state_dict(), PATH), then a fresh Net() loading PATH for the test accuracy and per-class accuracy.
Patched for synthetic data and CPU: a seeded TensorDataset of 3x32x32 images instead of CIFAR10 (no torchvision
download), num_workers=0, the loss printed every 2 mini-batches instead of 2000, the test peek's
`range(4)` as range(batch_size) (the tutorial's hard-coded 4 fails at any other batch)."""
import torch
import torch.utils.data

########################################################################
# 1. The data: a seeded stand-in for CIFAR10 (32 training and 16 test images).

generator = torch.Generator().manual_seed(3)
trainset = torch.utils.data.TensorDataset(torch.randn(32, 3, 32, 32, generator=generator),
                                          torch.randint(0, 10, (32,), generator=generator))
batch_size = 4
trainloader = torch.utils.data.DataLoader(trainset, batch_size=batch_size,
                                          shuffle=True, num_workers=0)

testset = torch.utils.data.TensorDataset(torch.randn(16, 3, 32, 32, generator=generator),
                                         torch.randint(0, 10, (16,), generator=generator))
testloader = torch.utils.data.DataLoader(testset, batch_size=batch_size,
                                         shuffle=False, num_workers=0)

classes = ('plane', 'car', 'bird', 'cat',
           'deer', 'dog', 'frog', 'horse', 'ship', 'truck')

########################################################################
# A look at some training images (the tutorial shows them with matplotlib).

import numpy as np

dataiter = iter(trainloader)
images, labels = next(dataiter)
print(' '.join(f'{classes[labels[j]]:5s}' for j in range(batch_size)), np.shape(images.numpy()))

########################################################################
# 2. A convolutional network for 3-channel images.

import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


torch.manual_seed(0)
net = Net()

########################################################################
# 3. A loss and an optimizer.

import torch.optim as optim

criterion = nn.CrossEntropyLoss()
optimizer = optim.SGD(net.parameters(), lr=0.001, momentum=0.9)

########################################################################
# 4. Training.

for epoch in range(2):
    running_loss = 0.0
    for i, data in enumerate(trainloader, 0):
        inputs, labels = data
        optimizer.zero_grad()
        outputs = net(inputs)
        loss = criterion(outputs, labels)
        loss.backward()
        optimizer.step()
        running_loss += loss.item()
        if i % 2 == 1:
            print(f'[{epoch + 1}, {i + 1:5d}] loss: {running_loss / 2:.3f}')
            running_loss = 0.0

print('Finished Training')

PATH = './cifar_net.pth'
torch.save(net.state_dict(), PATH)

########################################################################
# 5. Testing: a fresh network with the saved weights.

dataiter = iter(testloader)
images, labels = next(dataiter)
print('GroundTruth: ', ' '.join(f'{classes[labels[j]]:5s}' for j in range(batch_size)))

net = Net()
net.load_state_dict(torch.load(PATH, weights_only=True))

outputs = net(images)
_, predicted = torch.max(outputs, 1)
print('Predicted: ', ' '.join(f'{classes[predicted[j]]:5s}' for j in range(batch_size)))

correct = 0
total = 0
with torch.no_grad():
    for data in testloader:
        images, labels = data
        outputs = net(images)
        _, predicted = torch.max(outputs, 1)
        total += labels.size(0)
        correct += (predicted == labels).sum().item()

print(f'Accuracy of the network on the {total} test images: {100 * correct // total} %')

correct_pred = {classname: 0 for classname in classes}
total_pred = {classname: 0 for classname in classes}
with torch.no_grad():
    for data in testloader:
        images, labels = data
        outputs = net(images)
        _, predictions = torch.max(outputs, 1)
        for label, prediction in zip(labels, predictions):
            if label == prediction:
                correct_pred[classes[label]] += 1
            total_pred[classes[label]] += 1

for classname, correct_count in correct_pred.items():
    if total_pred[classname]:
        accuracy = 100 * float(correct_count) / total_pred[classname]
        print(f'Accuracy for class: {classname:5s} is {accuracy:.1f} %')
