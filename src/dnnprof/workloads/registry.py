"""The declarative workload registry: names, knobs and defaults, readable without importing torch.

Everything here is plain data, so listing workloads (``dnnprof workloads``) is instant. Building one
(``dnnprof.workloads.build``) imports torch and the workload's module lazily.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from dnnprof.workloads.errors import UnknownWorkload

#: Precisions every workload accepts (the device may still refuse some; see ``UnsupportedConfig``).
PRECISIONS: tuple[str, ...] = ("fp64", "fp32", "tf32", "fp16", "bf16", "amp-fp16", "amp-bf16")
MODES: tuple[str, ...] = ("train", "infer")
#: What a causal language model runs in addition: prefill + greedy decode iterations with a KV cache.
GENERATE_MODES: tuple[str, ...] = (*MODES, "generate")
DEVICES: tuple[str, ...] = ("cuda", "cpu")
#: Throughput units: samples, seconds of audio, or tokens processed per second of wall time.
UNITS: tuple[str, ...] = ("samples/s", "audio_s/s", "tokens/s")
#: The pip extra that brings every optional package a workload needs.
INSTALL_HINT = "pip install 'dnnprof[workloads]'"
#: Import name -> distribution name, where they differ.
DISTRIBUTIONS: Mapping[str, str] = MappingProxyType({"PIL": "pillow"})


@dataclass(frozen=True)
class WorkloadSpec:
    """One registered workload: what it is and how to build it.

    Attributes:
        name: registry name (``gpt2``, ``gpt2-tiny``).
        description: one line for tables.
        domain: ``speech``, ``language``, ``translation``, ``vision`` or ``generative``.
        default_batch_size: batch size when the config gives none.
        unit: throughput unit, one of ``UNITS``.
        data_kind: what ``data_dir`` must hold: ``audio`` (.wav), ``image`` or ``text`` (.txt).
        builder: ``module:Class`` under ``dnnprof.workloads`` that builds it.
        params: model and input dimensions passed to the builder.
        requires: import names of optional packages the model needs.
        data_requires: import names of optional packages ``data_dir`` needs.
        source: where the architecture and training recipe come from.
        optimizer: the optimizer and its settings, as text.
        modes: supported modes.
        precisions: supported precisions.
    """

    name: str
    description: str
    domain: str
    default_batch_size: int
    unit: str
    data_kind: str
    builder: str
    params: Mapping[str, Any]
    requires: tuple[str, ...] = ()
    data_requires: tuple[str, ...] = ()
    source: str = ""
    optimizer: str = ""
    modes: tuple[str, ...] = MODES
    precisions: tuple[str, ...] = PRECISIONS
    tiny: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tiny", self.name.endswith("-tiny"))
        object.__setattr__(self, "params", MappingProxyType(dict(self.params)))


def _pair(
    name: str,
    *,
    full: dict[str, Any],
    tiny: dict[str, Any],
    batch: tuple[int, int],
    description: str,
    **common: Any,
) -> list[WorkloadSpec]:
    """A full-size spec and its ``-tiny`` twin (small dims that train on CPU in about a second)."""
    tiny_requires = common.pop("tiny_requires", common.get("requires", ()))
    tiny_builder = common.pop("tiny_builder", common["builder"])
    tiny_common = {**common, "requires": tiny_requires, "builder": tiny_builder}
    return [
        WorkloadSpec(name=name, description=description, default_batch_size=batch[0], params=full, **common),
        WorkloadSpec(
            name=f"{name}-tiny",
            description=f"{description} (tiny, for CPU tests)",
            default_batch_size=batch[1],
            params=tiny,
            **tiny_common,
        ),
    ]


# fmt: off
_SPECS: list[WorkloadSpec] = [
    *_pair(
        "deepspeech2",
        description="Deep Speech 2: 2 conv + 5 bidirectional LSTM + CTC on 161-bin spectrograms",
        domain="speech", unit="audio_s/s", data_kind="audio", batch=(32, 4),
        builder="speech:DeepSpeech2Workload",
        full={"audio_s": 4.0, "conv_channels": 32, "rnn_type": "lstm", "rnn_hidden": 1024, "rnn_layers": 5},
        tiny={"audio_s": 1.0, "conv_channels": 4, "rnn_type": "lstm", "rnn_hidden": 32, "rnn_layers": 2},
        source="Amodei et al. 2016; layout of SeanNaren/deepspeech.pytorch (TBD's PyTorch DS2)",
        optimizer="SGD(lr=3e-4, momentum=0.9, nesterov=True, weight_decay=1e-5)",
    ),
    *_pair(
        "gpt2",
        description="GPT-2 124M causal LM (transformers GPT2LMHeadModel, random init)",
        domain="language", unit="tokens/s", data_kind="text", batch=(8, 4),
        builder="language:GPT2Workload", requires=("transformers",),
        full={"seq_len": 512, "n_layer": 12, "n_head": 12, "n_embd": 768, "vocab_size": 50257, "n_positions": 1024,
              "prompt_len": 128, "new_tokens": 128},
        tiny={"seq_len": 64, "n_layer": 2, "n_head": 2, "n_embd": 64, "vocab_size": 260, "n_positions": 64,
              "prompt_len": 16, "new_tokens": 16},
        modes=GENERATE_MODES,
        source="Radford et al. 2019; transformers GPT2Config defaults",
        optimizer="AdamW(lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1)",
    ),
    *_pair(
        "bert",
        description="BERT-base masked LM (transformers BertForMaskedLM, random init, 15% masking)",
        domain="language", unit="tokens/s", data_kind="text", batch=(32, 4),
        builder="language:BertWorkload", requires=("transformers",),
        full={"seq_len": 128, "hidden": 768, "layers": 12, "heads": 12, "intermediate": 3072,
              "vocab_size": 30522, "mask_prob": 0.15},
        tiny={"seq_len": 64, "hidden": 64, "layers": 2, "heads": 2, "intermediate": 128,
              "vocab_size": 260, "mask_prob": 0.15},
        source="Devlin et al. 2019 (phase-1 sequence length 128); TBD LanguageModeling-BERT",
        optimizer="AdamW(lr=1e-4, weight_decay=0.01)",
    ),
    *_pair(
        "resnet50",
        description="ResNet-50 image classification, 224x224 (torchvision)",
        domain="vision", unit="samples/s", data_kind="image", batch=(64, 4),
        builder="vision:ResNetWorkload", requires=("torchvision",), tiny_requires=(), data_requires=("PIL",),
        full={"image_size": 224, "num_classes": 1000},
        tiny={"image_size": 32, "num_classes": 10, "width": 16, "blocks": (1, 1, 1, 1)},
        source="He et al. 2016; torchvision.models.resnet50 (tiny: same bottleneck design, built in)",
        optimizer="SGD(lr=0.1, momentum=0.9, weight_decay=1e-4)",
    ),
    *_pair(
        "inception_v3",
        description="Inception-v3 image classification with aux head, 299x299 (torchvision)",
        domain="vision", unit="samples/s", data_kind="image", batch=(32, 4),
        builder="vision:InceptionWorkload", requires=("torchvision",), tiny_requires=(), data_requires=("PIL",),
        full={"image_size": 299, "num_classes": 1000},
        tiny={"image_size": 32, "num_classes": 10, "width": 8},
        source="Szegedy et al. 2016; torchvision.models.inception_v3 (tiny: two Inception-A blocks, built in)",
        optimizer="RMSprop(lr=0.045, alpha=0.9, eps=1.0, momentum=0.9, weight_decay=4e-5)",
    ),
    *_pair(
        "transformer",
        description="Transformer-base NMT encoder-decoder (nn.Transformer, 6+6 layers, d=512)",
        domain="translation", unit="samples/s", data_kind="text", batch=(64, 4),
        builder="translation:TransformerWorkload",
        full={"src_len": 64, "tgt_len": 64, "d_model": 512, "heads": 8, "enc_layers": 6, "dec_layers": 6,
              "ffn": 2048, "vocab_size": 32000, "dropout": 0.1},
        tiny={"src_len": 16, "tgt_len": 16, "d_model": 32, "heads": 2, "enc_layers": 1, "dec_layers": 1,
              "ffn": 64, "vocab_size": 260, "dropout": 0.1},
        source="Vaswani et al. 2017 (base); TBD MachineTranslation-Transformer",
        optimizer="Adam(lr=5e-4, betas=(0.9, 0.98), eps=1e-9), label smoothing 0.1",
    ),
    *_pair(
        "seq2seq",
        description="LSTM encoder-decoder NMT with Luong attention and input feeding",
        domain="translation", unit="samples/s", data_kind="text", batch=(128, 4),
        builder="translation:Seq2SeqWorkload",
        full={"src_len": 32, "tgt_len": 32, "embed": 512, "hidden": 512, "layers": 2, "vocab_size": 32000,
              "dropout": 0.2},
        tiny={"src_len": 12, "tgt_len": 12, "embed": 32, "hidden": 32, "layers": 1, "vocab_size": 260,
              "dropout": 0.2},
        source="Luong et al. 2015; TBD MachineTranslation-Seq2Seq (NMT/Sockeye)",
        optimizer="Adam(lr=1e-3)",
    ),
    *_pair(
        "dcgan",
        description="DCGAN 64x64; one step = discriminator step + generator step",
        domain="generative", unit="samples/s", data_kind="image", batch=(128, 4),
        builder="gan:DCGANWorkload", data_requires=("PIL",),
        full={"image_size": 64, "nz": 100, "ngf": 64, "ndf": 64},
        tiny={"image_size": 16, "nz": 16, "ngf": 8, "ndf": 8},
        source="Radford et al. 2016; pytorch/examples dcgan (TBD uses WGAN, same conv stacks)",
        optimizer="Adam(lr=2e-4, betas=(0.5, 0.999)) for G and D",
    ),
]
# fmt: on

WORKLOADS: Mapping[str, WorkloadSpec] = MappingProxyType({s.name: s for s in _SPECS})


def workload_names(*, include_tiny: bool = True) -> list[str]:
    """Registered workload names in registry order."""
    return [n for n, s in WORKLOADS.items() if include_tiny or not s.tiny]


def list_workloads(*, include_tiny: bool = True) -> list[WorkloadSpec]:
    """Registered workload specs in registry order."""
    return [WORKLOADS[n] for n in workload_names(include_tiny=include_tiny)]


def get_spec(name: str) -> WorkloadSpec:
    """The spec of ``name``.

    Raises:
        UnknownWorkload: the name is not registered; the message lists every valid name.
    """
    try:
        return WORKLOADS[name]
    except KeyError:
        raise UnknownWorkload(name, workload_names()) from None


def missing_packages(spec: WorkloadSpec, *, with_data: bool = False) -> list[str]:
    """Distribution names of the optional packages ``spec`` needs that are not installed.

    Looks for the packages without importing them, so a package that is installed but broken
    counts as present here and fails with ``MissingDependency`` at build time.
    """
    needed = ("torch", *spec.requires, *(spec.data_requires if with_data else ()))
    return [DISTRIBUTIONS.get(m, m) for m in needed if importlib.util.find_spec(m) is None]


def registry_rows(*, include_tiny: bool = True) -> list[dict[str, str]]:
    """The registry as table rows (all values strings), for ``dnnprof workloads``.

    Keys: ``name``, ``domain``, ``description``, ``batch_size``, ``unit``, ``modes``, ``precisions``,
    ``requires``, ``missing`` (optional packages not installed, or ``""``).
    """
    rows = []
    for spec in list_workloads(include_tiny=include_tiny):
        requires = [DISTRIBUTIONS.get(m, m) for m in spec.requires]
        rows.append(
            {
                "name": spec.name,
                "domain": spec.domain,
                "description": spec.description,
                "batch_size": str(spec.default_batch_size),
                "unit": spec.unit,
                "modes": ",".join(spec.modes),
                "precisions": ",".join(spec.precisions),
                "requires": ",".join(requires),
                "missing": ",".join(missing_packages(spec)),
            }
        )
    return rows
