"""What a kernel's name says: a short display name, its family, whether it runs on tensor cores, its precision.

Everything here is name-based (CUPTI gives no more without counters), so it is a documented heuristic:
* tensor cores — cuBLAS/CUTLASS/cuDNN spell the instruction in the name: ``gmma``/``wgmma`` (Hopper), ``hmma``,
  ``imma``, ``dmma``, ``tensorop``, MMA shapes ``16816``/``1688``/``884`` (``s1688gemm``, ``h884gemm``), ``xmma``
  kernels whose types are tf32/bf16/f16/fp8/int8, cuBLAS's Hopper ``nvjet`` kernels, flash/fused attention. FFMA
  (``_ffma_``), ``simt`` and plain ``sgemm``/``dgemm`` kernels do not use tensor cores.
* precision — the operand type in the name or its template arguments (``<float``, ``c10::BFloat16``, ``f32f32``,
  ``tf32``, ``bf16``, ``double`` …); "" when the name does not say.
"""

from __future__ import annotations

import re
from functools import lru_cache

#: Kernel families, in the order they are tested (first match wins).
FAMILIES = (
    "nccl", "optimizer", "attention", "rnn", "conv", "gemm", "loss", "norm", "softmax", "reduction", "sort",
    "embedding", "memory", "elementwise", "other",
)

_FAMILY_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (fam, re.compile(rx, re.IGNORECASE)) for fam, rx in (
        ("nccl", r"nccl|ncclDevKernel|all_?reduce|allgather|reduce_?scatter"),
        ("optimizer", r"multi_tensor_apply|fused_?adam|adamw?_|_adam|sgd_|fused_sgd|\blamb_|lion_|FusedOptimizer"),
        ("attention", r"flash|fmha|sdpa|attention|_attn|mha_|softmax_?.*attn"),
        ("rnn", r"RNN_|rnn_|elemWiseRNNcell|LSTM|_lstm|GRU_|_gru|cudnnRNN|persist.*rnn|bidirectional_accum"),
        ("norm", r"bn_fw|bn_bw|batch_?norm"),  # cuDNN's batch norm kernels name their NCHW layout: not a conv
        ("conv", r"conv(?!ert)|implicit_gemm|fprop|dgrad|wgrad|winograd|cudnn::.*fft|nchw|nhwc|im2col|col2im|"
                 r"depthwise|precomputed_convolve|implicit_convolve"),
        ("gemm", r"gemm|gmma|nvjet|cutlass|matmul|gemv|cublas|xmma|splitK|_mm_|dot_kernel|triton_tem|magma"),
        ("loss", r"loss|nll_|ctc_|cross_entropy|mse_|bce"),
        # Vector norms (gradient clipping's _foreach_norm, torch.linalg.vector_norm) are reductions, not layers.
        ("reduction", r"lpnorm|LpNorm|Norm\w*Ops|vector_norm"),
        ("norm", r"norm|bn_fw|bn_bw|batchnorm|layer_?norm|rms|GammaBeta|welford"),
        ("softmax", r"softmax|SoftMax|log_?softmax"),
        ("reduction", r"reduce|reduction|sum_kernel|argmax|argmin|triton_red|triton_per|_max_|mean_|cub::.*Reduce"),
        ("sort", r"sort|topk|scan|unique|radix|cub::|partial_segment|histogram"),
        ("embedding", r"embedding|gather|scatter|index_|indexing|take_|put_|EmbeddingBag"),
        ("memory", r"memcpy|memset|copy_kernel|CatArray|transpose|permute|fill_kernel|FillFunctor|contiguous|"
                   r"_copy\b|clone|\bflip|\broll_|constant_pad|reflection_pad|replication_pad|repeat_interleave|"
                   r"\bstack_|\bcat_"),
        ("elementwise", r"elementwise|pointwise|triton_poi|vectorized|unrolled|relu|gelu|silu|tanh|sigmoid|"
                        r"dropout|masked|clamp|threshold|hardtanh|add|mul|div|exp|log|pow|sqrt|abs|where|arange|"
                        r"philox|rand"),
    )
)

_TC_NO = re.compile(r"_ffma_|ffma|simt|f32f32_f32f32|f64f64|gemv|(?<![A-Za-z])sgemm(?!.*tensorop)|"
                    r"(?<![A-Za-z])dgemm(?!.*dmma)|implicit_convolve_sgemm", re.IGNORECASE)
_TC_YES = re.compile(r"wgmma|gmma|hmma|imma|dmma|tensorop|tensor_op|16816|1688|h884|s884|i884|i8816|"
                     r"xmma_.*(?:tf32|bf16|f16|e4m3|e5m2|i8|int8|fp8)|nvjet|flash|fmha|mma_|_mma\b|"
                     r"sdpa.*(?:f16|bf16)", re.IGNORECASE)

_PRECISION_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("fp64", re.compile(r"\bdouble\b|dgemm|f64|dmma|zgemm|d884gemm", re.IGNORECASE)),
    ("fp8", re.compile(r"e4m3|e5m2|fp8|float8", re.IGNORECASE)),
    ("tf32", re.compile(r"tf32|tensorop_s1688gemm(?!_bf16|_f16)|_s1688gemm_\d", re.IGNORECASE)),
    ("bf16", re.compile(r"bf16|bfloat16|BFloat16|__nv_bfloat16", re.IGNORECASE)),
    ("fp16", re.compile(r"f16|\bhalf\b|__half|c10::Half|hgemm|h884|h1688|h16816|fp16", re.IGNORECASE)),
    ("int8", re.compile(r"int8|i8816|imma|s8s8", re.IGNORECASE)),
    ("fp32", re.compile(r"\bfloat\b|(?<![A-Za-z])sgemm|f32|ffma|simt", re.IGNORECASE)),
)

# Words that carry no meaning in a short name (namespaces, wrappers, plain types).
_NOISE = frozenset(["void", "at", "native", "anonymous", "namespace", "anonymous_namespace", "std", "array", "char", "float", "int", "long", "double", "bool", "unsigned", "short", "signed", "c10", "BFloat16", "Half", "TensorIteratorBase", "TensorIterator", "lambda", "operator", "const", "gpu_kernel_impl_nocast", "gpu_kernel_impl", "detail", "memory", "TrivialOffsetCalculator", "OffsetCalculator", "LoadWithoutCast", "StoreWithoutCast", "func_wrapper_t", "ReduceOp", "TensorListMetadata", "TensorListScalarListMetadata", "BinaryFunctor", "AUnaryFunctor", "BUnaryFunctor", "binary_internal", "cuda", "at_cuda_detail", "cub", "Params", "Kernel2", "cutlass", "size_t", "uint32_t", "uint64_t", "int64_t", "AccumulateType", "true", "false", "ul", "Scalar", "Tensor", "TensorInfo", "opmath_t", "policy_hub", "launch_vectorized_kernel", "vectorized_elementwise_kernel", "unrolled_elementwise_kernel", "elementwise_kernel", "multi_tensor_apply_kernel", "reduce_kernel"])
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_GENERIC = frozenset({"vectorized_elementwise_kernel", "unrolled_elementwise_kernel", "elementwise_kernel",
                      "multi_tensor_apply_kernel", "reduce_kernel", "Kernel2", "launch_vectorized_kernel"})


def _split_name(full: str) -> tuple[str, str]:
    """(qualified function name, template argument text) of a demangled kernel signature."""
    s = full.strip().replace("(anonymous namespace)", "anonymous_namespace").replace("<unnamed>", "anonymous_namespace")
    if s.startswith("void "):
        s = s[5:]
    depth, cut = 0, len(s)
    for i, ch in enumerate(s):  # the parameter list starts at the first '(' outside template brackets
        if ch in "<{":
            depth += 1
        elif ch in ">}":
            depth -= 1
        elif ch == "(" and depth == 0:
            cut = i
            break
    head = s[:cut]
    lt = head.find("<")
    if lt < 0:
        return head, ""
    return head[:lt], head[lt + 1: head.rfind(">")]


@lru_cache(maxsize=65536)
def short_name(full: str, width: int = 90) -> str:
    """nvprof-style display name: no return type, namespaces or parameters; generic launchers keep their functor.

    ``void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, …>(…)`` →
    ``vectorized_elementwise_kernel<CUDAFunctor_add>``; ``cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_…>`` →
    ``cutlass_80_tensorop_s1688gemm_…``.
    """
    qual, targs = _split_name(full)
    base = qual.rsplit("::", 1)[-1].strip() or full.strip()
    if base in _GENERIC and targs:
        words = [w for w in _IDENT.findall(targs) if w not in _NOISE and not w.isdigit()]
        if base == "Kernel2" and words:
            out = words[0]
        elif words:
            out = f"{base}<{words[0]}>"
        else:
            out = base
    else:
        out = base
    return out if len(out) <= width else out[: width - 1] + "…"


@lru_cache(maxsize=65536)
def family(full: str) -> str:
    """Kernel family (one of FAMILIES) from the name."""
    qual, targs = _split_name(full)
    text = f"{qual} {targs}"
    for fam, rx in _FAMILY_PATTERNS:
        if rx.search(text):
            return fam
    return "other"


@lru_cache(maxsize=65536)
def uses_tensor_cores(full: str) -> bool:
    """True when the kernel name shows tensor-core (MMA) instructions; False for FFMA/SIMT and everything else."""
    if _TC_NO.search(full):
        return False
    return bool(_TC_YES.search(full))


#: C++ element types in template arguments, and the precision each stands for.
_CPP_TYPES = re.compile(r"\b(?:c10::|at::)?(double|float|Half|BFloat16|__half|__nv_bfloat16|Float8_e4m3fn|"
                        r"Float8_e5m2|__nv_fp8_e4m3|__nv_fp8_e5m2)\b")
_CPP_PRECISION = {"double": "fp64", "float": "fp32", "Half": "fp16", "__half": "fp16", "BFloat16": "bf16",
                  "__nv_bfloat16": "bf16", "Float8_e4m3fn": "fp8", "Float8_e5m2": "fp8", "__nv_fp8_e4m3": "fp8",
                  "__nv_fp8_e5m2": "fp8"}


@lru_cache(maxsize=65536)
def precision(full: str) -> str:
    """Operand precision the name shows (fp64, fp8, tf32, bf16, fp16, int8, fp32) or "" when it does not say.

    For templated C++ kernels the first element type in the template arguments is the compute type (fused
    optimizers also take ``double`` scalars such as the learning rate, which must not make them fp64); library
    kernels spell their types in the name (``f32f32_tf32f32``, ``bf16_s1688gemm``) and are matched by priority.
    """
    _, targs = _split_name(full)
    if targs and not targs.startswith(("cutlass", "cute")):
        m = _CPP_TYPES.search(targs)
        if m:
            return _CPP_PRECISION[m.group(1)]
    for label, rx in _PRECISION_PATTERNS:
        if rx.search(full):
            return label
    return ""
