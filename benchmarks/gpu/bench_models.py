"""The models of ``bench_table.py``, handed to ``dnnprof bench -- python bench_models.py MODEL`` through the hook.

``gpt2``: GPT-2 124M (transformers, random init, no KV cache) on 1024-token sequences; ``resnet50``: torchvision's
ResNet-50 on 224x224 images. Both are also built by ``bench_table.py``'s plain CUDA-event loop.
"""

from __future__ import annotations

import sys
from typing import Any

SEQ_LEN = 1024


def build(name: str, batch_size: int) -> tuple[Any, Any, float | None]:
    import torch

    torch.manual_seed(0)
    if name == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel

        model = GPT2LMHeadModel(GPT2Config(n_positions=SEQ_LEN, use_cache=False))
        # use_cache=False: the output holds the logits only (no KV cache), the same for every backend
        ids = torch.randint(0, 50257, (batch_size, SEQ_LEN))
        return model, ids, float(SEQ_LEN)
    if name == "resnet50":
        import torchvision

        return torchvision.models.resnet50(weights=None), torch.randn(batch_size, 3, 224, 224), None
    raise SystemExit(f"unknown model {name!r}: gpt2 or resnet50")


_BUILT: dict[str, Any] = {}


def dnnprof_bench(batch_size: int) -> tuple[Any, Any, float | None]:
    """The model is built once per process (GPT-2's random init takes seconds of CPU); each batch size gets its
    inputs (dnnprof bench calls this once to load the model, then once per batch size for the inputs)."""
    import torch

    name = sys.argv[1] if len(sys.argv) > 1 else "gpt2"
    if name not in _BUILT:
        _BUILT[name] = build(name, 1)[0]
    torch.manual_seed(batch_size)
    if name == "gpt2":
        return _BUILT[name], torch.randint(0, 50257, (batch_size, SEQ_LEN)), float(SEQ_LEN)
    return _BUILT[name], torch.randn(batch_size, 3, 224, 224), None
