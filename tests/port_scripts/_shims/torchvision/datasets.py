"""Synthetic datasets of torchvision's shapes: uint8 images (H x W for grey, H x W x C for colour) and int labels."""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.utils.data import Dataset


def _size(train: bool) -> int:
    return int(os.environ.get("PORT_SHIM_TRAIN", "32") if train else os.environ.get("PORT_SHIM_TEST", "16"))


class _Synthetic(Dataset):
    shape: tuple[int, ...] = (28, 28)
    classes: tuple[str, ...] = tuple(str(digit) for digit in range(10))

    def __init__(self, root: Any = None, train: bool = True, transform: Any = None, target_transform: Any = None,
                 download: bool = False, **_: Any) -> None:  # fmt: skip
        self.root, self.train, self.transform, self.target_transform = root, train, transform, target_transform
        generator = torch.Generator().manual_seed(11 if train else 12)
        count = _size(train)
        self.data = torch.randint(0, 256, (count, *self.shape), dtype=torch.uint8, generator=generator)
        self.targets = torch.randint(0, len(self.classes), (count,), generator=generator).tolist()

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        image, target = self.data[index], self.targets[index]
        if self.transform is not None:
            image = self.transform(image)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return image, target


class MNIST(_Synthetic):
    pass


class FashionMNIST(_Synthetic):
    classes = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot")


class CIFAR10(_Synthetic):
    shape = (32, 32, 3)
    classes = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


class FakeData(_Synthetic):
    def __init__(self, size: int = 1000, image_size: tuple[int, int, int] = (3, 224, 224), num_classes: int = 10,
                 transform: Any = None, target_transform: Any = None, random_offset: int = 0) -> None:  # fmt: skip
        self.shape = (image_size[1], image_size[2], image_size[0])
        self.classes = tuple(str(label) for label in range(num_classes))
        super().__init__(None, True, transform, target_transform)  # PORT_SHIM_TRAIN samples, not `size`


class ImageFolder(_Synthetic):
    """root/<split>: two classes of 32 x 32 colour images; a split named val or test is a test set."""

    shape = (32, 32, 3)
    classes = ("ants", "bees")

    def __init__(self, root: Any, transform: Any = None, target_transform: Any = None, **_: Any) -> None:
        split = os.path.basename(os.path.normpath(os.fspath(root)))
        super().__init__(root, split not in ("val", "test"), transform, target_transform)
        self.class_to_idx = {name: index for index, name in enumerate(self.classes)}


# torchvision's deprecated MNIST-family aliases (train_data / train_labels / test_data / test_labels), which older
# tutorials still read: the images as the uint8 tensor, the labels as a tensor, as torchvision returned them.
_Synthetic.train_data = property(lambda self: self.data)
_Synthetic.test_data = property(lambda self: self.data)
_Synthetic.train_labels = property(lambda self: torch.as_tensor(self.targets))
_Synthetic.test_labels = property(lambda self: torch.as_tensor(self.targets))
