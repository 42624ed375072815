// FP8 delayed scaling's amax history step (scalemm.quantize.advance_amax_history; reference:
// scalemm/reference/quantize.py advance_amax_history), one kernel in place of the four torch ops
// it replaces (a max over the history, a cat and a copy for the roll, a clone; ~11 us inside a
// CUDA graph on a [1024, 128] history, perf/results/h100/amax_history_kernel/).
//
// history fp32 [H, G] (row 0 newest) is rolled one row down with amax [G] on top, in place;
// next_amax [G] becomes the max over the new history's rows (NaN if any is NaN, as torch.amax),
// after its old value went to used [G] when used is non-null.
#pragma once

#include <cstdint>
#include <cuda_runtime.h>

#include "scalemm/quant_numerics.cuh"

namespace scalemm::delayed {

using quant::max_nan;  // max.NaN: a NaN wins (torch.amax's rule)

constexpr int kCols = 8;                 // history columns (groups) per block: one 32-byte segment per row
constexpr int kThreads = 1024;
constexpr int kLanes = kThreads / kCols;  // rows one pass step covers
constexpr int kPerThread = 8;
constexpr int kPassRows = kLanes * kPerThread;  // rows per pass: a history of up to 1024 rows takes one
constexpr int kWarps = kThreads / 32;
constexpr int kWarpRows = 32 / kCols;  // row lanes per warp

// One block per kCols columns. Passes from the bottom up, each moving rows [lo - 1, hi - 1) to
// [lo, hi): every thread loads its rows, the block syncs, then stores. A pass's stores touch no row a
// later (higher) pass loads, and the rows it loads are stored only by that later pass after its
// sync, so one barrier per pass orders the roll. Row 0 takes amax last.
__global__ void __launch_bounds__(kThreads) advance_kernel(float* __restrict__ history, int64_t rows, int64_t cols,
                                                           const float* __restrict__ amax,
                                                           float* __restrict__ next_amax, float* __restrict__ used) {
  __shared__ float partial[kWarps * kCols];
  const int c = threadIdx.x % kCols, lane = threadIdx.x / kCols;
  const int64_t col = int64_t(blockIdx.x) * kCols + c;
  const bool in = col < cols;
  const float top = in ? amax[col] : 0.f;
  float m = top;
  for (int64_t hi = rows; hi > 1; hi -= kPassRows) {
    const int64_t lo = hi - kPassRows > 1 ? hi - kPassRows : 1;
    float v[kPerThread];
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int64_t r = lo + lane + int64_t(i) * kLanes;
      v[i] = in && r < hi ? history[(r - 1) * cols + col] : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int64_t r = lo + lane + int64_t(i) * kLanes;
      if (in && r < hi) {
        history[r * cols + col] = v[i];
        m = max_nan(m, v[i]);
      }
    }
  }
  // the column's maximum: over the warp's kWarpRows row lanes by shuffles, then over the warps by one warp
#pragma unroll
  for (int d = kCols; d < 32; d *= 2) m = max_nan(m, __shfl_xor_sync(0xffffffffu, m, d));
  const int warp = threadIdx.x / 32, lane32 = threadIdx.x % 32;
  if (lane32 < kCols) partial[warp * kCols + lane32] = m;
  __syncthreads();  // also: every pass's loads of row 0 are done
  if (warp == 0) {
    // lane = (w0, c): warps w0, w0 + 4, ... of column c, then the four w0 lanes of c by shuffles
    const int w0 = lane32 / kCols;
    float r = partial[w0 * kCols + c];
    for (int w = w0 + kWarpRows; w < kWarps; w += kWarpRows) r = max_nan(r, partial[w * kCols + c]);
#pragma unroll
    for (int d = kCols; d < 32; d *= 2) r = max_nan(r, __shfl_xor_sync(0xffffffffu, r, d));
    if (lane32 < kCols && in) {
      history[col] = top;
      if (used) used[col] = next_amax[col];
      next_amax[col] = r;
    }
  }
}

inline int launch_advance(float* history, int64_t rows, int64_t cols, const float* amax, float* next_amax,
                          float* used, cudaStream_t stream) {
  if (rows < 1 || cols < 1) return 0;
  advance_kernel<<<static_cast<unsigned>((cols + kCols - 1) / kCols), kThreads, 0, stream>>>(history, rows, cols,
                                                                                           amax, next_amax, used);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace scalemm::delayed
