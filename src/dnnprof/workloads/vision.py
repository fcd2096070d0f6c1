"""Image classification: ResNet-50 and Inception-v3 from torchvision; built-in small versions for ``-tiny``.

The tiny models keep the defining blocks (ResNet bottlenecks with projection shortcuts; Inception-A mixing
blocks plus an auxiliary classifier) at small width on 32x32 inputs, and need no torchvision, so CPU tests
exercise the same training step (the auxiliary loss included) without it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import Dataset

from dnnprof.workloads import images
from dnnprof.workloads.base import Workload
from dnnprof.workloads.data import SYNTHETIC_BATCHES_PER_EPOCH, SyntheticDataset, find_files
from dnnprof.workloads.deps import require

#: Weight of the auxiliary classifier's loss in Inception training (Szegedy et al. 2016).
AUX_LOSS_WEIGHT = 0.4


class Bottleneck(nn.Module):
    """ResNet bottleneck: 1x1 reduce, 3x3 (strided), 1x1 expand x4, with a projection shortcut when shapes change."""

    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int) -> None:
        super().__init__()
        out = planes * self.expansion
        self.body = nn.Sequential(
            nn.Conv2d(inplanes, planes, 1, bias=False),
            nn.BatchNorm2d(planes),
            nn.ReLU(inplace=True),
            nn.Conv2d(planes, planes, 3, stride, 1, bias=False),
            nn.BatchNorm2d(planes),
            nn.ReLU(inplace=True),
            nn.Conv2d(planes, out, 1, bias=False),
            nn.BatchNorm2d(out),
        )
        self.shortcut = (
            nn.Sequential(nn.Conv2d(inplanes, out, 1, stride, bias=False), nn.BatchNorm2d(out))
            if stride != 1 or inplanes != out
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.body(x) + self.shortcut(x))


class SmallResNet(nn.Module):
    """A bottleneck ResNet for small images (3x3 stem, no max-pool), four stages of ``blocks[i]`` blocks."""

    def __init__(self, blocks: tuple[int, ...], width: int, num_classes: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True)
        )
        layers, inplanes = [], width
        for i, n in enumerate(blocks):
            planes = width * 2**i
            for j in range(n):
                layers.append(Bottleneck(inplanes, planes, stride=2 if i > 0 and j == 0 else 1))
                inplanes = planes * Bottleneck.expansion
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(inplanes, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def _conv_bn(cin: int, cout: int, kernel: int, stride: int = 1, padding: int = 0) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, kernel, stride, padding, bias=False),
        nn.BatchNorm2d(cout, eps=0.001),
        nn.ReLU(inplace=True),
    )


class InceptionA(nn.Module):
    """Inception-A mixing block: 1x1, 5x5, double 3x3 and pooled branches, concatenated."""

    def __init__(self, cin: int, width: int, pool_features: int) -> None:
        super().__init__()
        w34, w32 = 3 * width // 4, 3 * width // 2
        self.b1 = _conv_bn(cin, width, 1)
        self.b5 = nn.Sequential(_conv_bn(cin, w34, 1), _conv_bn(w34, width, 5, padding=2))
        self.b3 = nn.Sequential(
            _conv_bn(cin, width, 1), _conv_bn(width, w32, 3, padding=1), _conv_bn(w32, w32, 3, padding=1)
        )
        self.pool = _conv_bn(cin, pool_features, 1)
        self.out_channels = 2 * width + w32 + pool_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = self.pool(F.avg_pool2d(x, 3, stride=1, padding=1))
        return torch.cat([self.b1(x), self.b5(x), self.b3(x), pooled], dim=1)


class SmallInception(nn.Module):
    """Stem, Inception-A, grid reduction, Inception-A, with an auxiliary classifier in training mode.

    Like torchvision's Inception-v3, training mode returns ``(logits, aux_logits)`` and eval mode ``logits``.
    """

    def __init__(self, width: int, num_classes: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            _conv_bn(3, width, 3, padding=1), _conv_bn(width, 2 * width, 3, stride=2, padding=1)
        )
        self.mixed_a = InceptionA(2 * width, width, width // 2)
        c = self.mixed_a.out_channels
        self.aux = nn.Sequential(
            nn.AdaptiveAvgPool2d(4),
            _conv_bn(c, 2 * width, 1),
            nn.Flatten(),
            nn.Linear(2 * width * 16, num_classes),
        )
        self.reduce = _conv_bn(c, c, 3, stride=2, padding=1)
        self.mixed_b = InceptionA(c, width, width)
        self.head = nn.Sequential(
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Dropout(0.5),
            nn.Linear(self.mixed_b.out_channels, num_classes),
        )

    def forward(self, x: torch.Tensor) -> Any:
        x = self.mixed_a(self.stem(x))
        aux = self.aux(x) if self.training else None
        logits = self.head(self.mixed_b(self.reduce(x)))
        return (logits, aux) if self.training else logits


class _ImageWorkload(Workload):
    """Shared data handling for classifiers; throughput in images per second."""

    def build_synthetic_dataset(self) -> Dataset:
        size, classes = self.params["image_size"], self.params["num_classes"]
        return SyntheticDataset(
            lambda gen: images.synthetic_image(gen, size, classes),
            length=self.batch_size * SYNTHETIC_BATCHES_PER_EPOCH,
            seed=self.config.seed,
        )

    def build_real_dataset(self, data_dir: str) -> Dataset:
        files = find_files(data_dir, images.IMAGE_SUFFIXES, "image")
        return images.ImageFilesDataset(files, self.params["image_size"], self.params["num_classes"])

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return F.cross_entropy(self.model(batch["image"]), batch["label"])

    def infer(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.scores(batch).argmax(dim=1)

    def scores(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.model(batch["image"])

    @property
    def input_desc(self) -> str:
        s = self.params["image_size"]
        return f"{self.batch_size} x 3 x {s} x {s} images"


class ResNetWorkload(_ImageWorkload):
    """ResNet-50 (torchvision) or the tiny bottleneck ResNet, SGD with momentum."""

    def build_model(self) -> nn.Module:
        p = self.params
        if self.spec.tiny:
            self.implementation = "built-in SmallResNet"
            return SmallResNet(tuple(p["blocks"]), p["width"], p["num_classes"])
        models = require("torchvision.models", purpose=f"workload {self.spec.name!r}")
        self.implementation = "torchvision.models.resnet50"
        return models.resnet50(weights=None, num_classes=p["num_classes"])

    def build_optimizers(self) -> list[torch.optim.Optimizer]:
        return [torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)]


class InceptionWorkload(_ImageWorkload):
    """Inception-v3 (torchvision) or the tiny Inception; main + 0.4 x auxiliary loss, RMSprop."""

    def build_model(self) -> nn.Module:
        p = self.params
        if self.spec.tiny:
            self.implementation = "built-in SmallInception"
            return SmallInception(p["width"], p["num_classes"])
        models = require("torchvision.models", purpose=f"workload {self.spec.name!r}")
        self.implementation = "torchvision.models.inception_v3"
        return models.inception_v3(
            weights=None, aux_logits=True, init_weights=True, num_classes=p["num_classes"]
        )

    def build_optimizers(self) -> list[torch.optim.Optimizer]:
        return [
            torch.optim.RMSprop(
                self.model.parameters(), lr=0.045, alpha=0.9, eps=1.0, momentum=0.9, weight_decay=4e-5
            )
        ]

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        logits, aux = self.model(batch["image"])
        return F.cross_entropy(logits, batch["label"]) + AUX_LOSS_WEIGHT * F.cross_entropy(
            aux, batch["label"]
        )
