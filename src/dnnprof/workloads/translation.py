"""Machine translation: Transformer (nn.Transformer) and an LSTM encoder-decoder with Luong attention.

Batches hold ``src`` ``[B, src_len]`` and ``tgt`` ``[B, tgt_len + 1]`` (BOS ... EOS, PAD-padded); the decoder
reads ``tgt[:, :-1]`` and predicts ``tgt[:, 1:]`` (teacher forcing, in training and inference alike).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import Dataset

from dnnprof.workloads.base import Workload
from dnnprof.workloads.data import (
    BOS,
    BYTE_OFFSET,
    PAD,
    SYNTHETIC_BATCHES_PER_EPOCH,
    SyntheticDataset,
    TextPairDataset,
    find_files,
)


def _pair(gen: torch.Generator, src_len: int, tgt_len: int, vocab: int) -> dict[str, torch.Tensor]:
    src = torch.randint(BYTE_OFFSET, vocab, (src_len,), generator=gen)
    tgt = torch.randint(BYTE_OFFSET, vocab, (tgt_len + 1,), generator=gen)
    tgt[0] = BOS
    return {"src": src, "tgt": tgt}


class _TranslationWorkload(Workload):
    """Shared data handling and loss for the translation models; throughput in sentence pairs per second."""

    label_smoothing = 0.0

    def build_synthetic_dataset(self) -> Dataset:
        p = self.params
        return SyntheticDataset(
            lambda gen: _pair(gen, p["src_len"], p["tgt_len"], p["vocab_size"]),
            length=self.batch_size * SYNTHETIC_BATCHES_PER_EPOCH,
            seed=self.config.seed,
        )

    def build_real_dataset(self, data_dir: str) -> Dataset:
        files = find_files(data_dir, (".txt",), "text")
        return TextPairDataset(files, self.params["src_len"], self.params["tgt_len"])

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        tgt = batch["tgt"]
        logits = self.model(batch["src"], tgt[:, :-1])
        return F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]),
            tgt[:, 1:].reshape(-1),
            ignore_index=PAD,
            label_smoothing=self.label_smoothing,
        )

    def infer(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.scores(batch).argmax(dim=-1)

    def scores(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.model(batch["src"], batch["tgt"][:, :-1])

    @property
    def input_desc(self) -> str:
        return f"{self.batch_size} pairs x {self.params['src_len']} source / {self.params['tgt_len']} target tokens"


class PositionalEncoding(nn.Module):
    """Sinusoidal positions added to scaled embeddings, then dropout."""

    def __init__(self, d_model: int, max_len: int, dropout: float) -> None:
        super().__init__()
        pos = torch.arange(max_len).unsqueeze(1)
        div = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2] = torch.sin(pos * div)
        pe[:, 1::2] = torch.cos(pos * div)
        self.pe: torch.Tensor
        self.register_buffer("pe", pe, persistent=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(x + self.pe[: x.shape[1]])


class TransformerNMT(nn.Module):
    """Encoder-decoder Transformer with the generator tied to the target embedding."""

    def __init__(
        self,
        vocab: int,
        d_model: int,
        heads: int,
        enc_layers: int,
        dec_layers: int,
        ffn: int,
        dropout: float,
        max_len: int,
    ) -> None:
        super().__init__()
        self.scale = math.sqrt(d_model)
        self.src_embed = nn.Embedding(vocab, d_model, padding_idx=PAD)
        self.tgt_embed = nn.Embedding(vocab, d_model, padding_idx=PAD)
        self.pos = PositionalEncoding(d_model, max_len, dropout)
        self.transformer = nn.Transformer(
            d_model, heads, enc_layers, dec_layers, ffn, dropout, batch_first=True
        )
        self.generator = nn.Linear(d_model, vocab)
        for embed in (self.src_embed, self.tgt_embed):  # fairseq's init: unit-variance logits when tied
            nn.init.normal_(embed.weight, mean=0.0, std=d_model**-0.5)
            nn.init.zeros_(embed.weight[PAD])
        self.generator.weight = self.tgt_embed.weight

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        t = tgt.shape[1]
        causal = torch.triu(torch.ones(t, t, dtype=torch.bool, device=tgt.device), diagonal=1)
        src_pad, tgt_pad = src == PAD, tgt == PAD
        hidden = self.transformer(
            self.pos(self.src_embed(src) * self.scale),
            self.pos(self.tgt_embed(tgt) * self.scale),
            tgt_mask=causal,
            src_key_padding_mask=src_pad,
            tgt_key_padding_mask=tgt_pad,
            memory_key_padding_mask=src_pad,
        )
        return self.generator(hidden)


class TransformerWorkload(_TranslationWorkload):
    """Transformer NMT trained with label-smoothed cross entropy and Adam."""

    label_smoothing = 0.1

    def build_model(self) -> nn.Module:
        p = self.params
        return TransformerNMT(
            p["vocab_size"],
            p["d_model"],
            p["heads"],
            p["enc_layers"],
            p["dec_layers"],
            p["ffn"],
            p["dropout"],
            max_len=max(p["src_len"], p["tgt_len"]) + 1,
        )

    def build_optimizers(self) -> list[torch.optim.Optimizer]:
        return [torch.optim.Adam(self.model.parameters(), lr=5e-4, betas=(0.9, 0.98), eps=1e-9)]

    def infer(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        mha = getattr(torch.backends, "mha", None)
        if self.device.type != "cpu" or self.plan.autocast_dtype is None or mha is None:
            return super().infer(batch)
        # PyTorch takes its fused inference fast path under CPU autocast and then fails on mixed dtypes;
        # CUDA autocast correctly skips it, so only CPU autocast turns it off (and back on).
        before = mha.get_fastpath_enabled()
        mha.set_fastpath_enabled(False)
        try:
            return super().infer(batch)
        finally:
            mha.set_fastpath_enabled(before)


def _cpu_autocast_input(x: torch.Tensor) -> torch.Tensor:
    """Cast an RNN input to the CPU autocast dtype: CPU autocast casts LSTM weights but not the input,
    and oneDNN then refuses the mixed-dtype LSTM (PyTorch 2.13). CUDA autocast needs no help."""
    if x.device.type != "cpu":
        return x
    if hasattr(torch, "get_autocast_dtype"):  # torch >= 2.4
        enabled, dtype = torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")
    else:
        enabled, dtype = torch.is_autocast_cpu_enabled(), torch.get_autocast_cpu_dtype()
    return x.to(dtype) if enabled else x


class Seq2SeqAttention(nn.Module):
    """Bidirectional LSTM encoder; LSTM-cell decoder with Luong general attention and input feeding.

    The decoder runs one time step at a time, as attention-based RNN decoders do, so its many small kernels
    show up in the profile; the output projection runs once over all steps.
    """

    def __init__(self, vocab: int, embed: int, hidden: int, layers: int, dropout: float) -> None:
        super().__init__()
        self.layers, self.hidden = layers, hidden
        self.src_embed = nn.Embedding(vocab, embed, padding_idx=PAD)
        self.tgt_embed = nn.Embedding(vocab, embed, padding_idx=PAD)
        self.encoder = nn.LSTM(
            embed,
            hidden // 2,
            layers,
            batch_first=True,
            bidirectional=True,
            dropout=dropout if layers > 1 else 0.0,
        )
        self.cells = nn.ModuleList(
            nn.LSTMCell(embed + hidden if i == 0 else hidden, hidden) for i in range(layers)
        )
        self.attn_in = nn.Linear(hidden, hidden, bias=False)
        self.attn_out = nn.Linear(2 * hidden, hidden, bias=False)
        self.dropout = nn.Dropout(dropout)
        self.generator = nn.Linear(hidden, vocab)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        b = src.shape[0]
        memory, (h_n, c_n) = self.encoder(_cpu_autocast_input(self.src_embed(src)))  # memory [B, S, H]
        # Decoder state from the encoder's last states, both directions concatenated: [layers, B, H].
        h = list(h_n.view(self.layers, 2, b, -1).transpose(1, 2).reshape(self.layers, b, self.hidden))
        c = list(c_n.view(self.layers, 2, b, -1).transpose(1, 2).reshape(self.layers, b, self.hidden))
        keys = self.attn_in(memory)  # [B, S, H]
        pad = (src == PAD).unsqueeze(1)  # [B, 1, S]
        feed = memory.new_zeros(b, self.hidden)
        embedded = self.dropout(self.tgt_embed(tgt))
        outputs = []
        for t in range(tgt.shape[1]):
            x = torch.cat([embedded[:, t], feed], dim=1)
            for i, cell in enumerate(self.cells):
                h[i], c[i] = cell(x, (h[i], c[i]))
                x = self.dropout(h[i]) if i + 1 < self.layers else h[i]
            scores = torch.bmm(x.unsqueeze(1), keys.transpose(1, 2)).masked_fill(pad, float("-inf"))
            context = torch.bmm(torch.softmax(scores, dim=-1), memory).squeeze(1)
            feed = torch.tanh(self.attn_out(torch.cat([context, x], dim=1)))
            outputs.append(feed)
        return self.generator(self.dropout(torch.stack(outputs, dim=1)))


class Seq2SeqWorkload(_TranslationWorkload):
    """LSTM seq2seq with attention, cross entropy and Adam."""

    def build_model(self) -> nn.Module:
        p = self.params
        return Seq2SeqAttention(p["vocab_size"], p["embed"], p["hidden"], p["layers"], p["dropout"])

    def build_optimizers(self) -> list[torch.optim.Optimizer]:
        return [torch.optim.Adam(self.model.parameters(), lr=1e-3)]
