"""A greedy generate loop over a Hugging Face causal LM, shaped like an LLM server's: one prefill over the prompt,
then one decode iteration per new token, reading and writing a static KV cache.

Each iteration runs inside a ``record_function`` named ``prefill`` or ``decode`` (what ``dnnprof``'s serving
analysis reads). The cache is static (fixed shapes, written in place at ``cache_position``), so on a CUDA device
the decode iteration is captured once as a CUDA graph and replayed for every token, as servers do; on CPU it runs
eagerly.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn
from torch.profiler import record_function

#: ``record_function`` names of the two kinds of iteration.
PREFILL, DECODE = "prefill", "decode"


class GreedyGenerator:
    """Prefill + ``new_tokens - 1`` decode iterations per call (the prefill yields the first new token).

    Args:
        model: a causal LM taking ``input_ids``, a cache, ``cache_position`` and ``use_cache``.
        config: the model's config (sizes the cache).
        batch: sequences per call.
        prompt_len: prompt tokens per sequence.
        new_tokens: tokens generated per sequence (>= 1).
        device: where the model runs; ``cuda`` captures the decode iteration as a CUDA graph.
        dtype: the cache's dtype.
    """

    def __init__(self, model: nn.Module, config: Any, *, batch: int, prompt_len: int, new_tokens: int,
                 device: torch.device, dtype: torch.dtype) -> None:
        import transformers

        self.model, self.batch, self.prompt_len, self.new_tokens = model, batch, prompt_len, new_tokens
        self.device = device
        cache_args = inspect.signature(transformers.StaticCache.__init__).parameters
        extra = {k: v for k, v in (("max_batch_size", batch), ("device", device), ("dtype", dtype))
                 if k in cache_args}
        self.cache = transformers.StaticCache(config=config, max_cache_len=prompt_len + new_tokens, **extra)
        forward = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in forward else "past_key_values"
        # transformers 4.x takes the write position as ``cache_position``; 5.x caches keep their own (a device
        # tensor advanced in place, so a captured decode step advances it on every replay).
        self._takes_position = "cache_position" in forward
        self._graph: torch.cuda.CUDAGraph | None = None
        self._token = torch.zeros(batch, 1, dtype=torch.long, device=device)  # the decode step's static input
        self._pos = torch.zeros(1, dtype=torch.long, device=device)  # and its position (transformers 4.x)
        self._next: torch.Tensor | None = None  # the decode step's static output

    def _forward(self, ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        kw: dict[str, Any] = {self._cache_kw: self.cache}
        if self._takes_position:
            kw["cache_position"] = pos
        out = self.model(input_ids=ids, use_cache=True, **kw)
        return out.logits[:, -1].argmax(-1, keepdim=True)

    def _prefill(self, prompt: torch.Tensor) -> torch.Tensor:
        self.cache.reset()  # in place: the captured decode step keeps reading the same buffers
        return self._forward(prompt, torch.arange(self.prompt_len, device=self.device))

    def _decode_eager(self) -> torch.Tensor:
        return self._forward(self._token, self._pos)

    def _capture(self, prompt: torch.Tensor) -> None:
        """Capture the decode step as a CUDA graph after an unrecorded prefill and two warm-up steps on a side
        stream (CUDA only); the next sequence resets the cache."""
        self._token.copy_(self._prefill(prompt))
        self._pos.fill_(self.prompt_len)
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(2):
                self._decode_eager()
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._next = self._decode_eager()
        self._graph = graph

    def __call__(self, prompt: torch.Tensor) -> torch.Tensor:
        """Generated token ids, ``(batch, new_tokens)``, for ``prompt`` ``(batch, prompt_len)`` on the device."""
        if tuple(prompt.shape) != (self.batch, self.prompt_len):
            raise ValueError(f"prompt of shape {tuple(prompt.shape)}; the generator was built for "
                             f"({self.batch}, {self.prompt_len})")
        if self.device.type == "cuda" and self._graph is None and self.new_tokens > 1:
            self._capture(prompt)
        with record_function(PREFILL):
            token = self._prefill(prompt)
        out = [token]
        for i in range(1, self.new_tokens):
            with record_function(DECODE):
                self._token.copy_(token)
                self._pos.fill_(self.prompt_len + i - 1)
                if self._graph is not None:
                    self._graph.replay()
                    token = self._next.clone()  # type: ignore[union-attr]
                else:
                    token = self._decode_eager()
            out.append(token)
        return torch.cat(out, dim=1)
