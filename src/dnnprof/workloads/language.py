"""Language models from transformers configs (random init, nothing downloaded): GPT-2 and BERT masked LM.

Text is tokenised byte-level (ids 0-3 special, byte b -> b + 4), which fits any vocabulary of 260 or more,
so ``data_dir`` needs no tokenizer files.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

from dnnprof.workloads.base import Workload
from dnnprof.workloads.data import (
    BOS,
    BYTE_OFFSET,
    EOS,
    MASK,
    PAD,
    SYNTHETIC_BATCHES_PER_EPOCH,
    SyntheticDataset,
    TextBlockDataset,
    find_files,
)
from dnnprof.workloads.deps import require

#: Labels that cross entropy ignores (transformers' convention).
IGNORE = -100


def _transformers(workload: str) -> Any:
    return require("transformers", purpose=f"workload {workload!r}")


def _token_block(gen: torch.Generator, seq_len: int, vocab: int) -> dict[str, torch.Tensor]:
    return {"input_ids": torch.randint(BYTE_OFFSET, vocab, (seq_len,), generator=gen)}


class _TextWorkload(Workload):
    """Shared data handling: fixed-length token blocks, synthetic or from ``.txt`` files."""

    def build_synthetic_dataset(self) -> Dataset:
        seq_len, vocab = self.params["seq_len"], self.params["vocab_size"]
        return SyntheticDataset(
            lambda gen: _token_block(gen, seq_len, vocab),
            length=self.batch_size * SYNTHETIC_BATCHES_PER_EPOCH,
            seed=self.config.seed,
        )

    def build_real_dataset(self, data_dir: str) -> Dataset:
        return TextBlockDataset(find_files(data_dir, (".txt",), "text"), self.params["seq_len"])

    def nominal_items_per_step(self) -> float:
        return float(self.batch_size * self.params["seq_len"])

    @property
    def input_desc(self) -> str:
        return f"{self.batch_size} x {self.params['seq_len']} tokens"


class GPT2Workload(_TextWorkload):
    """GPT-2 causal language modelling; throughput in tokens per second (in ``generate`` mode: generated tokens;
    one step is one generated sequence per batch item: a prefill over the first ``prompt_len`` tokens of the
    batch's blocks, then ``new_tokens - 1`` greedy decode iterations, see ``workloads.generate``)."""

    implementation = "transformers.GPT2LMHeadModel"
    _generator: Any = None

    @property
    def _generating(self) -> bool:
        return self.config.mode == "generate"

    def nominal_items_per_step(self) -> float:
        if self._generating:
            return float(self.batch_size * self.params["new_tokens"])
        return super().nominal_items_per_step()

    @property
    def input_desc(self) -> str:
        if self._generating:
            return (f"{self.batch_size} x {self.params['prompt_len']} prompt tokens, "
                    f"{self.params['new_tokens']} generated")
        return super().input_desc

    def build_model(self) -> nn.Module:
        tf = _transformers(self.spec.name)
        p = self.params
        config = tf.GPT2Config(
            vocab_size=p["vocab_size"],
            n_positions=p["n_positions"],
            n_embd=p["n_embd"],
            n_layer=p["n_layer"],
            n_head=p["n_head"],
            bos_token_id=BOS,
            eos_token_id=EOS,
            use_cache=self._generating,
        )
        model = tf.GPT2LMHeadModel(config)
        model.loss_type = "ForCausalLM"  # the class name maps to no loss; say which, instead of a warning
        return model

    def build_optimizers(self) -> list[torch.optim.Optimizer]:
        return [torch.optim.AdamW(self.model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1)]

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        ids = batch["input_ids"]
        return self.model(input_ids=ids, labels=ids).loss

    def infer(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.model(input_ids=batch["input_ids"]).logits

    def generate(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        from dnnprof.workloads.generate import GreedyGenerator

        p = self.params
        prompt = batch["input_ids"][:, : p["prompt_len"]]
        if self._generator is None or self._generator.batch != prompt.shape[0]:
            # The cache is sized once (a smaller last batch from a real-text folder gets its own).
            self._generator = GreedyGenerator(
                self.model, self.model.config, batch=prompt.shape[0], prompt_len=p["prompt_len"],
                new_tokens=p["new_tokens"], device=self.device, dtype=self.plan.param_dtype)
        return self._generator(prompt)


class MaskedLM(Dataset):
    """BERT masking of ``base``'s token blocks: of ``mask_prob`` of positions, 80% -> [MASK], 10% random, 10% kept.

    Masking is done per item on the data-loading side, as BERT's pretraining pipelines do, with a generator
    seeded by the item index so it does not depend on worker count.
    """

    def __init__(self, base: Dataset, mask_prob: float, vocab: int, seed: int) -> None:
        self.base = base
        self.mask_prob = mask_prob
        self.vocab = vocab
        self.seed = seed

    def __len__(self) -> int:
        return len(self.base)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        ids = self.base[index]["input_ids"].clone()
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        chosen = torch.rand(ids.shape, generator=gen) < self.mask_prob
        chosen[0] = True  # at least one prediction per block, so the loss is never empty
        labels = torch.where(chosen, ids, torch.full_like(ids, IGNORE))
        roll = torch.rand(ids.shape, generator=gen)
        ids[chosen & (roll < 0.8)] = MASK
        randomise = chosen & (roll >= 0.8) & (roll < 0.9)
        ids[randomise] = torch.randint(BYTE_OFFSET, self.vocab, ids.shape, generator=gen)[randomise]
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}


class BertWorkload(_TextWorkload):
    """BERT masked language modelling; throughput in tokens (all positions) per second."""

    implementation = "transformers.BertForMaskedLM"

    def build_synthetic_dataset(self) -> Dataset:
        return MaskedLM(
            super().build_synthetic_dataset(),
            self.params["mask_prob"],
            self.params["vocab_size"],
            self.config.seed,
        )

    def build_real_dataset(self, data_dir: str) -> Dataset:
        return MaskedLM(
            super().build_real_dataset(data_dir),
            self.params["mask_prob"],
            self.params["vocab_size"],
            self.config.seed,
        )

    def build_model(self) -> nn.Module:
        tf = _transformers(self.spec.name)
        p = self.params
        config = tf.BertConfig(
            vocab_size=p["vocab_size"],
            hidden_size=p["hidden"],
            num_hidden_layers=p["layers"],
            num_attention_heads=p["heads"],
            intermediate_size=p["intermediate"],
            max_position_embeddings=max(512, p["seq_len"]),
            pad_token_id=PAD,
        )
        return tf.BertForMaskedLM(config)

    def build_optimizers(self) -> list[torch.optim.Optimizer]:
        return [torch.optim.AdamW(self.model.parameters(), lr=1e-4, weight_decay=0.01)]

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"]
        ).loss

    def infer(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
