// scalemm quantizers for one input dtype ({{IN_T}}): thin extern "C" launchers over
// scalemm/quant.cuh. Each returns 0 or a cudaError_t; none allocates or synchronises.
#include "scalemm/quant.cuh"

using InT = {{IN_T}};
namespace q = scalemm::quant;

// Every entry point with an amax first zeroes the non-null amax outputs and fills them from one
// read of x (launch_amax_stats: tensor amax, tensor amax of the RHT'd columnwise data when rht,
// per-row amax [M], per-column amax [K], RHT'd if rht), then quantizes: one call from Python, the
// launches in stream order. Pass all four null when the amaxes are given.

// NVFP4 rowwise copy (q_row non-null) and/or columnwise copy of x.T (q_col non-null). amax_*:
// 0-d (token = 0) or per row of that copy (token = 1). alpha_*: S_dec, same shape.
extern "C" int scalemm_quantize_nvfp4(const void* x, int64_t M, int64_t K, float* st_amax, float* st_amax_rht,
                                      float* st_row_amax, float* st_col_amax, uint8_t* q_row, uint8_t* s_row,
                                      float* alpha_row, const float* amax_row, int row_token, uint8_t* q_col,
                                      uint8_t* s_col, float* alpha_col, const float* amax_col, int col_token,
                                      int rht, int sr, uint64_t seed, uint64_t offset, cudaStream_t stream) {
  if (st_amax || st_amax_rht || st_row_amax || st_col_amax) {
    const int err = q::launch_amax_stats<InT>(x, M, K, st_amax, st_amax_rht, st_row_amax, st_col_amax, rht, stream);
    if (err) return err;
  }
  return q::launch_nvfp4<InT>(x, M, K, q_row, s_row, alpha_row, amax_row, row_token, q_col, s_col, alpha_col,
                              amax_col, col_token, rht, sr, seed, offset, stream);
}

// FP8 e4m3: amax pass into row_amax / col_amax (per row / per column for token, else 0-d; the
// two may be the same buffer), then the rowwise and/or columnwise copies.
extern "C" int scalemm_quantize_fp8(const void* x, int64_t M, int64_t K, uint8_t* q_row, float* scale_inv_row,
                                    float* amax_row, int row_token, uint8_t* q_col, float* scale_inv_col,
                                    float* amax_col, int col_token, cudaStream_t stream) {
  const int err = row_token ? q::launch_amax_stats<InT>(x, M, K, nullptr, nullptr, q_row ? amax_row : nullptr,
                                                        q_col ? amax_col : nullptr, 0, stream)
                            : q::launch_amax_stats<InT>(x, M, K, amax_row, nullptr, nullptr, nullptr, 0, stream);
  if (err) return err;
  return q::launch_fp8<InT>(x, M, K, q_row, scale_inv_row, amax_row, row_token, q_col, scale_inv_col, amax_col,
                            col_token, stream);
}

extern "C" int scalemm_quantize_mxfp8(const void* x, int64_t M, int64_t K, uint8_t* q_row, uint8_t* s_row,
                                      uint8_t* q_col, uint8_t* s_col, cudaStream_t stream) {
  return q::launch_mxfp8<InT>(x, M, K, q_row, s_row, q_col, s_col, stream);
}
