// scalemm grouped (MoE) quantizers for one input dtype ({{IN_T}}): thin extern "C" launchers over
// scalemm/quant_grouped.cuh. Each returns 0 or a cudaError_t; none allocates, reads the offsets
// on the host or synchronises (CUDA-graph capturable). `table` is int32 scratch of
// G + 3 * (G + 1) entries (written by the launch: clamped ends and position tables).
#include "scalemm/quant_grouped.cuh"

using InT = {{IN_T}};
namespace qg = scalemm::quant::grouped;

// FP8 e4m3: rowwise [T, K] (q_row, scale_inv [G] or [T]) and/or the wgrad-layout columnwise copy
// [K, W] (q_col, scale_inv [G] or [G, K]). Amax scratch: g_amax [G] (token = 0), row_amax [T] and
// gcol_amax [G, K] (token = 1).
extern "C" int scalemm_quantize_fp8_grouped(const void* x, int64_t T, int64_t K, const int* offsets, int G,
                                            int* table, int token, float* g_amax, float* row_amax,
                                            float* gcol_amax, uint8_t* q_row, float* sinv_row, uint8_t* q_col,
                                            int64_t W, float* sinv_col, cudaStream_t stream) {
  return qg::launch_fp8_grouped<InT>(x, T, K, offsets, G, table, token, g_amax, row_amax, gcol_amax, q_row,
                                     sinv_row, q_col, W, sinv_col, stream);
}

// NVFP4: rowwise [T, K/2] with swizzled scales of scale_rows x Cp bytes grouped along M, alpha
// [G] or [T]; and/or the wgrad-layout columnwise copy [K, W/2] with scales grouped along K
// (Rp x cb_total bytes), alpha [G] or [G, K], RHT-transformed if rht. Amax scratch: g_amax [G]
// (token = 0), row_amax [T] (token, rowwise), col_amax ([G, K] for token, [G] for tensor with rht).
// sr: stochastic rounding of both copies from Philox (seed, offset).
extern "C" int scalemm_quantize_nvfp4_grouped(const void* x, int64_t T, int64_t K, const int* offsets, int G,
                                              int* table, int token, float* g_amax, float* row_amax,
                                              float* col_amax, uint8_t* q_row, uint8_t* s_row, int64_t scale_rows,
                                              float* alpha_row, uint8_t* q_col, int64_t W, uint8_t* s_col,
                                              int64_t cb_total, float* alpha_col, int rht, int sr, uint64_t seed,
                                              uint64_t offset, cudaStream_t stream) {
  return qg::launch_nvfp4_grouped<InT>(x, T, K, offsets, G, table, token, g_amax, row_amax, col_amax, q_row,
                                       s_row, scale_rows, alpha_row, q_col, W, s_col, cb_total, alpha_col, rht, sr,
                                       seed, offset, stream);
}

// MXFP8 rowwise [T, K] with e8m0 scales (scale_rows x Cp bytes) grouped along M.
extern "C" int scalemm_quantize_mxfp8_grouped(const void* x, int64_t T, int64_t K, const int* offsets, int G,
                                              int* table, uint8_t* q_row, uint8_t* s_row, int64_t scale_rows,
                                              cudaStream_t stream) {
  return qg::launch_mxfp8_grouped<InT>(x, T, K, offsets, G, table, q_row, s_row, scale_rows, stream);
}
