"""Kernel-name heuristics on names taken from real traces."""

from __future__ import annotations

import pytest

from dnnprof.analysis.kernel_names import family, precision, short_name, uses_tensor_cores

CASES = [
    # name, tensor cores, family, precision
    ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_32x6_nn_align4>(cutlass_80_tensorop_s1688gemm_64x64_32x6_nn_align4::Params)", True, "gemm", "tf32"),
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x256_8x4_nt_align1>(cutlass_80_simt_sgemm_128x256_8x4_nt_align1::Params)", False, "gemm", "fp32"),
    ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize64x128x8_stage3_warpsize1x4x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas", False, "gemm", "fp32"),
    ("sm90_xmma_gemm_f32f32_tf32f32_f32_nt_n_tilesize256x128x32_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas", True, "gemm", "tf32"),
    ("void cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_tn_align1>(cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_tn_align1::Params)", True, "gemm", "bf16"),
    ("nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_TNT", True, "gemm", ""),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0", True, "attention", "fp16"),
    ("volta_h884gemm_64x64_ldg8_nn", True, "gemm", "fp16"),
    ("ampere_sgemm_128x64_nn", False, "gemm", "fp32"),
    ("void RNN_elementWise_bp1<float, float, float>(int, int, int, int, float*, float*, float*, float*, int, cudnnRNNMode_t)", False, "rnn", "fp32"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)", False, "elementwise", "fp32"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float>(at::native::(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float)", False, "optimizer", "fp32"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float, false>(int, float, float const*, float const*, float const*, float*, float*, float*)", False, "norm", "fp32"),
    ("void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(float*, float*, float const*, long const*, float const*, bool, long, long, long, long)", False, "loss", "fp32"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<double, at::native::MeanOps<double, double, double, double>, unsigned int, double, 4, 4> >(at::native::ReduceOp<double, at::native::MeanOps<double, double, double, double>, unsigned int, double, 4, 4>)", False, "reduction", "fp64"),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", False, "nccl", "fp32"),
    ("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_warpsize2x2x1_g1_tensor16x8x8_kernel", True, "conv", "tf32"),
    # Gradient clipping (H100, clip_grad_norm_): vector norms are reductions, not normalisation layers.
    ("void at::native::lpnorm_cleanup<float, (at::native::NormType)1, float, true, float>(float const*, at::native::TensorListAddresses, int)", False, "reduction", "fp32"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::NormTwoOps<float, float, float, true>, unsigned int, float, 4, 4> >(at::native::ReduceOp<float, at::native::NormTwoOps<float, float, float, true>, unsigned int, float, 4, 4>)", False, "reduction", "fp32"),
    # cuDNN batch norm (the recorded H100 resnet18 trace) names its NCHW layout: still a norm, not a conv.
    ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1, true>(cudnnTensorStruct, float const*, cudnnTensorStruct, float*, float const*, float const*, float, float, float*, float*, float*, float*, float, float)", False, "norm", "fp32"),
]


@pytest.mark.parametrize(("name", "tc", "fam", "prec"), CASES)
def test_kernel_name_heuristics(name: str, tc: bool, fam: str, prec: str) -> None:
    assert uses_tensor_cores(name) is tc
    assert family(name) == fam
    assert precision(name) == prec


def test_short_names() -> None:
    assert short_name(CASES[0][0]) == "cutlass_80_tensorop_s1688gemm_64x64_32x6_nn_align4"
    assert short_name(CASES[10][0]) == "vectorized_elementwise_kernel<CUDAFunctor_add>"
    assert short_name(CASES[11][0]) == "multi_tensor_apply_kernel<BinaryOpListAlphaFunctor>"
    assert short_name(CASES[12][0]) == "vectorized_layer_norm_kernel"
    assert short_name("nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_TNT") == "nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_TNT"
    assert len(short_name("x" * 500)) <= 90


def test_half_kernels_named_by_cublas_are_not_fp32() -> None:
    name = "void gemv2T_kernel_val<int, int, __half, __half, float, 128, 16, 4, 4, false, false, cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<__half const>, cublasGemmSmallNParams, float> >(cublasGemvParamsEx, float, float)"
    assert precision(name) == "fp16"
    assert precision("void gemmSN_NN_kernel<__nv_bfloat16, 256, 4, 2, 8, 4, 4, false, cublasGemvTensorStridedBatched<__nv_bfloat16 const> >(cublasGemmSmallNParams)") == "bf16"
    assert precision("volta_d884gemm_64x32_nn") == "fp64"


def test_fused_optimizer_with_double_scalars_is_fp32() -> None:
    # Real H100 kernel (fused AdamW): lr/betas/eps are double *scalars*; the math is fp32.
    name = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
            "FusedOptimizerTensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, "
            "(at::native::ADAM_MODE)1, false>, float const*, double, double, double, double, double, bool, float const*, "
            "float const*>(at::native::(anonymous namespace)::FusedOptimizerTensorListMetadata<4>, at::native::"
            "(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, float const*, "
            "double, double, double, double, double, bool, float const*, float const*)")
    assert precision(name) == "fp32"
