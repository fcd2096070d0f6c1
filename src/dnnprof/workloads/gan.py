"""DCGAN (Radford et al. 2016, as in pytorch/examples): one step = a discriminator step + a generator step.

The discriminator ends in a logit and the loss is ``BCEWithLogits`` (autocast-safe, unlike sigmoid + BCE).
Inference generates a batch of images from noise and reads no images.
"""

from __future__ import annotations

import math
from typing import cast

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import Dataset

from dnnprof.workloads import images
from dnnprof.workloads.base import Workload, phase
from dnnprof.workloads.data import SYNTHETIC_BATCHES_PER_EPOCH, SyntheticDataset, find_files


def _levels(image_size: int) -> int:
    levels = int(math.log2(image_size)) - 2
    if image_size != 4 * 2**levels or levels < 1:
        raise ValueError(f"DCGAN image_size must be a power of two >= 8, got {image_size}")
    return levels


def _init_weights(m: nn.Module) -> None:
    if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
        nn.init.normal_(m.weight, 0.0, 0.02)
    elif isinstance(m, nn.BatchNorm2d):
        nn.init.normal_(m.weight, 1.0, 0.02)
        nn.init.zeros_(m.bias)


class Generator(nn.Module):
    """Noise ``[B, nz, 1, 1]`` -> image ``[B, 3, S, S]`` in [-1, 1] through transposed convolutions."""

    def __init__(self, image_size: int, nz: int, ngf: int) -> None:
        super().__init__()
        n = _levels(image_size)
        ch = ngf * 2 ** (n - 1)
        layers: list[nn.Module] = [
            nn.ConvTranspose2d(nz, ch, 4, 1, 0, bias=False),
            nn.BatchNorm2d(ch),
            nn.ReLU(True),
        ]
        for _ in range(n - 1):
            layers += [
                nn.ConvTranspose2d(ch, ch // 2, 4, 2, 1, bias=False),
                nn.BatchNorm2d(ch // 2),
                nn.ReLU(True),
            ]
            ch //= 2
        layers += [nn.ConvTranspose2d(ch, 3, 4, 2, 1, bias=False), nn.Tanh()]
        self.net = nn.Sequential(*layers)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.net(z)


class Discriminator(nn.Module):
    """Image ``[B, 3, S, S]`` -> real/fake logit ``[B]`` through strided convolutions."""

    def __init__(self, image_size: int, ndf: int) -> None:
        super().__init__()
        n = _levels(image_size)
        layers: list[nn.Module] = [nn.Conv2d(3, ndf, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True)]
        ch = ndf
        for _ in range(n - 1):
            layers += [
                nn.Conv2d(ch, ch * 2, 4, 2, 1, bias=False),
                nn.BatchNorm2d(ch * 2),
                nn.LeakyReLU(0.2, inplace=True),
            ]
            ch *= 2
        layers.append(nn.Conv2d(ch, 1, 4, 1, 0, bias=False))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).flatten()


def _synthetic_real_image(gen: torch.Generator, size: int) -> dict[str, torch.Tensor]:
    return {"image": torch.rand(3, size, size, generator=gen) * 2 - 1}


def _no_images(gen: torch.Generator) -> dict[str, torch.Tensor]:
    """Inference input: generation reads no images, so batches carry only an index."""
    return {"index": torch.zeros((), dtype=torch.int64)}


class DCGANWorkload(Workload):
    """DCGAN; ``model`` is a ModuleDict of ``generator`` and ``discriminator``; throughput in images per second."""

    def build_model(self) -> nn.Module:
        p = self.params
        model = nn.ModuleDict(
            {
                "generator": Generator(p["image_size"], p["nz"], p["ngf"]),
                "discriminator": Discriminator(p["image_size"], p["ndf"]),
            }
        )
        model.apply(_init_weights)
        return model

    @property
    def generator(self) -> nn.Module:
        """The generator network."""
        return cast(nn.ModuleDict, self.model)["generator"]

    @property
    def discriminator(self) -> nn.Module:
        """The discriminator network."""
        return cast(nn.ModuleDict, self.model)["discriminator"]

    def build_optimizers(self) -> list[torch.optim.Optimizer]:
        return [
            torch.optim.Adam(self.discriminator.parameters(), lr=2e-4, betas=(0.5, 0.999)),
            torch.optim.Adam(self.generator.parameters(), lr=2e-4, betas=(0.5, 0.999)),
        ]

    def build_synthetic_dataset(self) -> Dataset:
        size = self.params["image_size"]
        make = (lambda gen: _synthetic_real_image(gen, size)) if self.training else _no_images
        return SyntheticDataset(
            make, length=self.batch_size * SYNTHETIC_BATCHES_PER_EPOCH, seed=self.config.seed
        )

    def build_real_dataset(self, data_dir: str) -> Dataset:
        files = find_files(data_dir, images.IMAGE_SUFFIXES, "image")
        if not self.training:  # generating images reads none
            return self.build_synthetic_dataset()
        return images.ImageFilesDataset(files, self.params["image_size"], num_classes=1, normalize="tanh")

    def _noise(self) -> torch.Tensor:
        return torch.randn(
            self.batch_size, self.params["nz"], 1, 1, device=self.device, dtype=self.plan.param_dtype
        )

    def train_step(self, batch: dict[str, torch.Tensor]) -> None:
        """Discriminator step on real + detached fake images, then generator step through the discriminator."""
        opt_d, opt_g = self.optimizers
        real = batch["image"]
        opt_d.zero_grad(set_to_none=True)
        with self.autocast(), phase("forward"):
            fake = self.generator(self._noise())
            d_real, d_fake = self.discriminator(real), self.discriminator(fake.detach())
            loss_d = F.binary_cross_entropy_with_logits(
                d_real, torch.ones_like(d_real)
            ) + F.binary_cross_entropy_with_logits(d_fake, torch.zeros_like(d_fake))
        self.backward_and_step(loss_d, opt_d, update=False)
        opt_g.zero_grad(set_to_none=True)
        with self.autocast(), phase("forward"):
            d_fake = self.discriminator(fake)
            loss_g = F.binary_cross_entropy_with_logits(d_fake, torch.ones_like(d_fake))
        self.backward_and_step(loss_g, opt_g, update=True)
        self.last_loss = (loss_d + loss_g).detach()

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        raise NotImplementedError("DCGAN trains through train_step (two losses, two optimizers)")

    def infer(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.generator(self._noise())

    @property
    def input_desc(self) -> str:
        s = self.params["image_size"]
        return (
            f"{self.batch_size} x 3 x {s} x {s} real images + {self.batch_size} x {self.params['nz']} noise"
        )
