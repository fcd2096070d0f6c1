"""A PyTorch Lightning training script with no dnnprof markers (Lightning drives optimizer.step via closures)."""

from __future__ import annotations

import sys

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Regressor(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 512), nn.GELU(), nn.Linear(512, 512), nn.GELU(), nn.Linear(512, 1))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def main() -> int:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    data = TensorDataset(torch.randn(steps * 32, 64), torch.randn(steps * 32, 1))
    trainer = L.Trainer(max_steps=steps, accelerator="gpu", devices=1, precision="bf16-mixed", logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Regressor(), DataLoader(data, batch_size=32, num_workers=2))
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
