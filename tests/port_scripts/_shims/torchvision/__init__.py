"""A stand-in for torchvision in the runs of tests/test_port_published.py: torchvision's wheel does not load beside
torch's CPU build, and a published training script imports it for its data. What scripts call, of the real shapes:
synthetic datasets drawn from a fixed seed (no download), the transforms (random ones draw nothing), save_image and
make_grid (a small file, never torch.save), and resnet18 as a tiny model with the same `fc` head. Sizes come from
PORT_SHIM_TRAIN and PORT_SHIM_TEST (samples of a training and of a test set; defaults 32 and 16)."""

from torchvision import datasets, models, transforms, utils

__all__ = ["datasets", "models", "transforms", "utils"]
__version__ = "0.0-shim"
