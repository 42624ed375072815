// NVFP4 -> bf16 operand rows (scalemm/nvfp4_dequant.cuh) for the W4A4 GEMM; the SM90 kernels' byte order of the
// codes; the NVFP4 grouped wgrad's bf16 decode and global scales.
#include "scalemm/abi.h"
#include "scalemm/nvfp4_dequant.cuh"

extern "C" int scalemm_nvfp4_dequant(scalemm::Nvfp4DequantArgs const* a) {
  return scalemm::dequant::launch_rows_to_bf16(
      static_cast<const uint8_t*>(a->qdata), static_cast<const uint8_t*>(a->scales),
      static_cast<__nv_bfloat16*>(a->out), a->rows, a->k, a->scale_cols, static_cast<const int*>(a->offsets),
      int(a->groups), static_cast<int*>(a->table), static_cast<cudaStream_t>(a->stream));
}

extern "C" int scalemm_nvfp4_prepare_sm90(scalemm::Nvfp4PrepareArgs const* a) {
  return scalemm::dequant::launch_prepare_sm90(static_cast<const uint8_t*>(a->qdata), static_cast<uint8_t*>(a->out),
                                               a->rows, a->half, static_cast<cudaStream_t>(a->stream));
}

extern "C" int scalemm_nvfp4_wgrad_to_bf16(scalemm::Nvfp4WgradDecodeArgs const* a) {
  if (a->w % 16 != 0) return scalemm::kBadArgument;
  return scalemm::dequant::launch_wgrad_to_bf16(
      static_cast<const uint8_t*>(a->qdata), static_cast<const uint8_t*>(a->scales),
      static_cast<const int64_t*>(a->base), static_cast<const int32_t*>(a->local), static_cast<const int32_t*>(a->cp),
      static_cast<__nv_bfloat16*>(a->out), a->k, a->w, static_cast<cudaStream_t>(a->stream));
}

extern "C" int scalemm_nvfp4_wgrad_scale(scalemm::Nvfp4WgradScaleArgs const* a) {
  using namespace scalemm::dequant;
  auto run = [&](auto* out) {
    return launch_wgrad_scale_as(static_cast<const __nv_bfloat16*>(a->acc), out, static_cast<const float*>(a->alpha_dy),
                                 int(a->dy_vec), static_cast<const float*>(a->alpha_x), int(a->x_vec),
                                 static_cast<const uint8_t*>(a->has_rows), a->groups, a->n, a->k,
                                 static_cast<cudaStream_t>(a->stream));
  };
  switch (a->out_kind) {
    case scalemm::kOutBf16: return run(static_cast<__nv_bfloat16*>(a->out));
    case scalemm::kOutF16: return run(static_cast<__half*>(a->out));
    case scalemm::kOutF32: return run(static_cast<float*>(a->out));
    default: return scalemm::kBadArgument;
  }
}
