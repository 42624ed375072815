// scalemm: which rows each group of a grouped op holds, read from its offsets on the device (one owner for
// every kernel that reads offsets: the grouped quantizers, the grouped GEMMs' setup launches, the skinny
// kernel's grouped form, and the kernel that zeroes the rows past the groups), and the block scans they run
// over the groups (running maxima of the ends, sums of padded sizes).
//
// offsets int32 [G] are cumulative row ends over T rows (torch._grouped_mm's `offs`). Every offset is clamped
// into [0, T] and the clamped ends are made non-decreasing by a running maximum, so group g holds rows
// [end_{g-1}, end_g) (end_{-1} = 0) and rows [end_{G-1}, T) belong to no group; end_{G-1} is the largest
// clamped offset (docs/numerics.md 12.5; the reference is scalemm.layout.group_bounds). With decreasing offsets
// the grouped GEMMs only guarantee in-bounds accesses (numerics.md says so): the FP8 grouped fprop's setup gives
// group g the rows [clamp(offsets[g-1]), max(that, clamp(offsets[g]))), reading two offsets, not a running maximum.
#pragma once

#include <cstdint>
#include <cuda_runtime.h>

namespace scalemm::group_offsets {

// One offset clamped into [0, T] (I: the caller's row index type).
template <class I>
__device__ __forceinline__ I clamp_offset(int v, I T) {
  return v < 0 ? I(0) : (I(v) > T ? T : I(v));
}

// The two operations the groups' scans use, over values >= 0 (identity 0): a running maximum, a sum.
struct MaxOp {
  template <class T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a > b ? a : b; }
};
struct SumOp {
  template <class T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};

template <class T>
struct Scan {
  T inclusive, exclusive;  // over this thread and the threads before it / over the threads before it (0 for thread 0)
};

// A scan of v over the kThreads threads of a 1-D block (kThreads a multiple of 32, at most 1024) with MaxOp or SumOp
// over values >= 0. Every thread calls it. scratch: kThreads / 32 entries of shared memory, written and then read
// after the one barrier inside; they may be written again only after another barrier, so a caller that scans again
// before one passes other entries.
template <int kThreads, class T, class Op>
__device__ __forceinline__ Scan<T> block_scan(T v, Op op, T* scratch) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "a block of whole warps");
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  T inc = v;
#pragma unroll
  for (int o = 1; o < 32; o *= 2) {
    const T u = __shfl_up_sync(0xffffffffu, inc, o);
    if (lane >= o) inc = op(inc, u);
  }
  if (lane == 31) scratch[warp] = inc;
  __syncthreads();
  T before = T(0);  // the warps before this one
#pragma unroll
  for (int w = 0; w < kThreads / 32 - 1; ++w)
    if (w < warp) before = op(before, scratch[w]);
  T exc = __shfl_up_sync(0xffffffffu, inc, 1);
  if (lane == 0) exc = T(0);
  return {op(before, inc), op(before, exc)};
}

// The end of the last group, max_g clamp_offset(offsets[g], T), computed by the 32 lanes of a converged warp
// (every lane gets it).
__device__ __forceinline__ int64_t warp_groups_end(const int* offsets, int G, int64_t T) {
  int64_t e = 0;
  for (int g = threadIdx.x & 31; g < G; g += 32) e = max(e, clamp_offset(__ldg(offsets + g), T));
#pragma unroll
  for (int sh = 16; sh > 0; sh >>= 1) e = max(e, static_cast<int64_t>(__shfl_xor_sync(0xffffffffu, e, sh)));
  return e;
}

// The same, computed by the threads of a 1-D block (every thread calls it and gets it).
__device__ __forceinline__ int64_t block_groups_end(const int* offsets, int G, int64_t T) {
  __shared__ int end;
  if (threadIdx.x == 0) end = 0;
  __syncthreads();
  int m = 0;
  for (int g = threadIdx.x; g < G; g += blockDim.x) m = max(m, static_cast<int>(clamp_offset(__ldg(offsets + g), T)));
  atomicMax(&end, m);
  __syncthreads();
  const int64_t e = end;
  __syncthreads();  // `end` may be set again by a later call
  return e;
}

// Bytes [0, bytes) of p set to zero by a grid: 16 bytes per thread and step (p 16-byte aligned), a tail under 16
// bytes byte by byte. thread / threads: this thread's index in the grid and the grid's size.
__device__ __forceinline__ void zero_bytes(char* p, int64_t bytes, int64_t thread, int64_t threads) {
  for (int64_t i = thread * 16; i < bytes; i += threads * 16) {
    if (i + 16 <= bytes) {
      *reinterpret_cast<uint4*>(p + i) = make_uint4(0u, 0u, 0u, 0u);
    } else {
      for (int64_t j = i; j < bytes; ++j) p[j] = 0;
    }
  }
}

// The rows a grouped GEMM leaves unwritten, [end_{G-1}, T) of out [T, row_bytes] (16-byte aligned), set to zero
// by a grid of 1-D blocks (every thread calls it; each block finds the end itself). Nothing to do in the usual
// case (the groups cover every row): then it costs the offsets' read.
__device__ __forceinline__ void zero_rows_past_groups(char* out, int64_t T, int64_t row_bytes, const int* offsets,
                                                      int G, int64_t thread, int64_t threads) {
  const int64_t end = block_groups_end(offsets, G, T);
  zero_bytes(out + end * row_bytes, (T - end) * row_bytes, thread, threads);
}

}  // namespace scalemm::group_offsets
