"""Image data: an ImageFolder-like dataset decoded with Pillow, and synthetic images.

Each item is decoded, resized (shorter side), centre-cropped and normalised in ``__getitem__``, as a
torchvision ImageNet pipeline would, without needing torchvision. The label is the index of the image's
folder among the sorted folder names (0 when all images sit in one folder), modulo ``num_classes``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from dnnprof.workloads.deps import require
from dnnprof.workloads.errors import DataError

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".ppm", ".pgm", ".tif", ".tiff", ".webp")
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32)


def synthetic_image(gen: torch.Generator, size: int, num_classes: int) -> dict[str, torch.Tensor]:
    """A normalised-looking random image ``[3, size, size]`` and a label."""
    return {
        "image": torch.randn(3, size, size, generator=gen),
        "label": torch.randint(0, num_classes, (), generator=gen),
    }


class ImageFilesDataset(Dataset):
    """Images from files, resized and centre-cropped to ``size``.

    Args:
        files: image paths.
        size: output height and width.
        num_classes: labels are folder indices modulo this.
        normalize: ``imagenet`` (mean/std) or ``tanh`` (to [-1, 1], for GANs).
    """

    def __init__(self, files: list[Path], size: int, num_classes: int, normalize: str = "imagenet") -> None:
        require("PIL.Image", purpose="image data_dir")
        folders = sorted({f.parent for f in files})
        index = {d: i for i, d in enumerate(folders)}
        self.items = [(f, index[f.parent] % num_classes) for f in files]
        self.size = size
        self.normalize = normalize

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        from PIL import Image, UnidentifiedImageError

        path, label = self.items[i]
        try:
            with Image.open(path) as img:
                img = img.convert("RGB")
                w, h = img.size
                scale = self.size / min(w, h)
                img = img.resize(
                    (max(self.size, round(w * scale)), max(self.size, round(h * scale))),
                    Image.Resampling.BILINEAR,
                )
                w, h = img.size
                left, top = (w - self.size) // 2, (h - self.size) // 2
                img = img.crop((left, top, left + self.size, top + self.size))
                pixels = np.asarray(img, dtype=np.float32) / 255.0
        except (UnidentifiedImageError, OSError) as exc:
            raise DataError(f"{path}: cannot decode image ({exc})") from exc
        if self.normalize == "tanh":
            pixels = pixels * 2.0 - 1.0
        else:
            pixels = (pixels - IMAGENET_MEAN) / IMAGENET_STD
        return {"image": torch.from_numpy(pixels.transpose(2, 0, 1).copy()), "label": torch.tensor(label)}
