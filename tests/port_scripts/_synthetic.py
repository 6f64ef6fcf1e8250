"""Synthetic data files for published scripts that read files of their own, not a torchvision set (the corpus of
benchmarks/port_corpus.py): written once per fixture into a folder the probe copies into each run's working
directory (PORT_PROBE_DATA, tests/port_scripts/_probe/sitecustomize.py), as a user puts data beside a script.

A manifest entry's `synthetic` is a list of files or sets of files, each one of:
- { kind = "images", path = "data/imgs", count = 24, size = [16, 16], mode = "RGB", name = "img{:02d}.png",
  values = [0, 255] }: PNG images drawn from a fixed seed (`values`: only those pixel values, a mask's classes);
- { kind = "sine_waves", path = "traindata.pt", shape = [10, 50] }: sine waves of random phase, float64, saved
  with torch.save as a numpy array (pytorch/examples' time_sequence_prediction generates its data so);
- { kind = "celeba", path = "data/celeba", count = 2031, size = [16, 16] }: CelebA's layout, `count` RGB JPEGs
  images/000001.jpg ... and list_attr_celeba.txt (the count, a line of CelebA's 40 attribute names, then a line per
  image: its file name and 40 values of 1 or -1), drawn from a fixed seed (yunjey/stargan reads them so).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any


def folder_for(name: str, files: list[dict[str, Any]]) -> Path:
    """The fixture's data folder, written the first time it is asked for."""
    folder = Path(tempfile.gettempdir()) / "ddpcli-port-synthetic" / name
    done = folder / ".done"
    if not done.exists():
        folder.mkdir(parents=True, exist_ok=True)
        for spec in files:
            WRITERS[spec["kind"]](folder / spec["path"], spec)
        done.touch()
    return folder


def _images(path: Path, spec: dict[str, Any]) -> None:
    import numpy
    from PIL import Image

    path.mkdir(parents=True, exist_ok=True)
    draw = numpy.random.default_rng(7)
    width, height = spec["size"]
    channels = {"RGB": (height, width, 3), "L": (height, width)}[spec["mode"]]
    for index in range(spec["count"]):
        if "values" in spec:
            pixels = draw.choice(numpy.array(spec["values"], dtype=numpy.uint8), size=channels)
        else:
            pixels = draw.integers(0, 256, size=channels, dtype=numpy.uint8)
        Image.fromarray(pixels, mode=spec["mode"]).save(path / spec["name"].format(index))


def _sine_waves(path: Path, spec: dict[str, Any]) -> None:
    import numpy
    import torch

    rows, length = spec["shape"]
    draw = numpy.random.default_rng(2)
    steps = numpy.arange(length) + draw.integers(-80, 80, size=(rows, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(numpy.sin(steps / 20.0).astype("float64"), path)


CELEBA_ATTRIBUTES = (
    "5_o_Clock_Shadow Arched_Eyebrows Attractive Bags_Under_Eyes Bald Bangs Big_Lips Big_Nose Black_Hair Blond_Hair "
    "Blurry Brown_Hair Bushy_Eyebrows Chubby Double_Chin Eyeglasses Goatee Gray_Hair Heavy_Makeup High_Cheekbones "
    "Male Mouth_Slightly_Open Mustache Narrow_Eyes No_Beard Oval_Face Pale_Skin Pointy_Nose Receding_Hairline "
    "Rosy_Cheeks Sideburns Smiling Straight_Hair Wavy_Hair Wearing_Earrings Wearing_Hat Wearing_Lipstick "
    "Wearing_Necklace Wearing_Necktie Young"
)  # the header line of list_attr_celeba.txt


def _celeba(path: Path, spec: dict[str, Any]) -> None:
    import numpy
    from PIL import Image

    (path / "images").mkdir(parents=True, exist_ok=True)
    draw = numpy.random.default_rng(5)
    width, height = spec["size"]
    attributes = CELEBA_ATTRIBUTES.split()
    lines = [str(spec["count"]), " ".join(attributes)]
    for index in range(1, spec["count"] + 1):
        name = f"{index:06d}.jpg"
        pixels = draw.integers(0, 256, size=(height, width, 3), dtype=numpy.uint8)
        Image.fromarray(pixels, mode="RGB").save(path / "images" / name)
        values = draw.choice(numpy.array([-1, 1]), size=len(attributes))
        lines.append(name + " " + " ".join(f"{value:2d}" for value in values))
    (path / "list_attr_celeba.txt").write_text("\n".join(lines) + "\n")


WRITERS = {"images": _images, "sine_waves": _sine_waves, "celeba": _celeba}
