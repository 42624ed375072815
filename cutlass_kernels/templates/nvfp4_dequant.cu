// NVFP4 -> bf16 operand rows (scalemm/nvfp4_dequant.cuh) for the W4A4 GEMM.
#include "scalemm/abi.h"
#include "scalemm/nvfp4_dequant.cuh"

extern "C" int scalemm_nvfp4_dequant(scalemm::Nvfp4DequantArgs const* a) {
  return scalemm::dequant::launch_rows_to_bf16(
      static_cast<const uint8_t*>(a->qdata), static_cast<const uint8_t*>(a->scales),
      static_cast<__nv_bfloat16*>(a->out), a->rows, a->k, a->scale_cols, static_cast<const int*>(a->offsets),
      int(a->groups), static_cast<int*>(a->table), static_cast<cudaStream_t>(a->stream));
}
