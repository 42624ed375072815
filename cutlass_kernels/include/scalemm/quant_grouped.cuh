// scalemm grouped (MoE) quantization for Hopper: FP8 (per group / per token, rowwise [T, K] and
// the columnwise copy in the wgrad layout), NVFP4 rowwise with scales "grouped along M",
// NVFP4 columnwise in the wgrad layout with scales "grouped along K", MXFP8 rowwise.
// Numerics: quant_numerics.cuh (bit-exact with py_api/reference/); tile helpers: quant.cuh.
//
// The offsets (int32 [G], cumulative row ends) stay on the device. Every launch sequence is the one
// below, except for the rowwise copy alone with per-token scaling: FP8 one quantize_rows_kernel of
// quant.cuh (it clamps the offsets itself), NVFP4 the group table, then quantize_rows_kernel over the rows (the
// scales zeroed by the table's launch: GroupedRows) or over the scale rows after the tile table (GroupedScaleRows):
// 1. group_table_kernel (1 CTA): clamps the offsets into [0, T], makes them non-decreasing
//    (ends[g] = max(ends[g-1], clamp(offsets[g], 0, T))), and writes the position tables
//    pos_A[g] = sum_{j<g} ceil(m_j / A) * A for A = 16 (wgrad columns), 64 (wgrad scale
//    columns * 16) and 128 (scale rows, NUMERICS 5 "grouped along M"), each with G + 1 entries;
//    it also zeroes the launch's [G] amax buffers (the stats' per-group amax, amax_out).
//    Bad offsets therefore give short or empty groups, never out-of-bounds accesses.
// 2. grouped_stats_kernel (when an amax is needed): one read of x giving the per-group amax
//    [G], the per-row amax [T] and/or the per-(group, column) amax [G, K], by atomicMax on
//    float bits (NaN-propagating; the [G] buffers zeroed by step 1's kernel, the others by
//    cudaMemsetAsync in the same sequence).
//    Each warp walks the group segments inside its 16 rows, so a tile may straddle groups. The tiles go from
//    the last one back (what the producer of x wrote last may still be in L2; step 3 then starts where this ended).
//    FP8 delayed scaling (amax_given) skips it: the given per-group amax scales the copies, and the quantize pass
//    records each group's amax into amax_out (per CTA in shared memory first: tile_amax_add / tile_amax_flush).
// 3. grouped_quantize_kernel: ONE launch over all groups. Its grid covers a host-known
//    "position space" of 128-position x 64-column tiles; position c maps to a row of x by a
//    binary search of pos_A (A = 1: the rows themselves; A = 16: wgrad columns, one search
//    per warp and 16-position chunk (ChunkHead); A = 128: scale rows, from the tile table).
//    Every position is written (padding positions as zeros), so every output
//    byte is written by the kernel, padding included.
//    FP8 with per-group scaling (both copies scaled from the group's amax) makes the rowwise
//    e4m3 bytes once and writes the columnwise copy from them transposed (a byte tile, quant.cuh
//    read_byte_columns; two 64-column tiles per CTA past one wave); per-token scaling transposes the input values
//    (raw 16-bit values, or fp32) and scales them per column. Positions past the last group map to
//    the rows of x beyond offsets[G-1] (rows that belong to no group): their rowwise data
//    is written as zero and they have no scale rows.
// 4. nvfp4_wgrad_kernel (NVFP4 columnwise): the same over 64-aligned token positions, optionally
//    RHT-transformed (wgrad_rht_stats_kernel first takes the amax of the transformed groups) and
//    stochastically rounded.
// A final grid-stride loop of the quantize kernels writes the fp32 decode scales (alpha /
// scale_inv) from the amax buffers: one per group, row or (group, column).
#pragma once

#include "scalemm/abi.h"
#include "scalemm/group_offsets.cuh"
#include "scalemm/quant.cuh"

namespace scalemm {
namespace quant {
namespace grouped {

constexpr int kSetupThreads = 1024;
constexpr int kSlots = 4;  // groups per stats tile reduced in shared memory (more go to global atomics)

// int32 table (abi.h: the group table): ends[G] | pos16[G+1] | pos64[G+1] | pos128[G+1], in the
// order group_table_kernel writes them.
static_assert(kGroupTablePositionTables == 3 && kGroupTablePos16 == 0 && kGroupTablePos64 == 1 &&
                  kGroupTablePos128 == 2, "group_table_kernel writes ends | pos16 | pos64 | pos128");
static_assert(kGroupTileInts * sizeof(int) == sizeof(int4), "one tile entry is an int4");
__host__ __device__ inline int64_t table_ints(int64_t G) { return G + kGroupTablePositionTables * (G + 1); }

struct Table {
  const int* ends;
  const int* pos16;
  const int* pos64;
  const int* pos128;
  int G;
};

__host__ __device__ inline Table make_table(const int* t, int G) {
  return Table{t, t + G + kGroupTablePos16 * (G + 1), t + G + kGroupTablePos64 * (G + 1),
               t + G + kGroupTablePos128 * (G + 1), G};
}

// After the table (16-byte aligned): one int4 per 128-row tile of the pos128 space, {first row,
// rows of the tile that are rows of x, group, unused}, so a CTA finds its rows with one load.
inline int4* tile_table(int* t, int G) {
  return reinterpret_cast<int4*>(t + (table_ints(G) + kGroupTileInts - 1) / kGroupTileInts * kGroupTileInts);
}

// ---------------------------------------------------------------------------
// 1. the group table
// ---------------------------------------------------------------------------

__device__ __forceinline__ int round_up(int v, int a) { return (v + a - 1) / a * a; }

// The host guarantees T + 128 * G < 2^31, so every sum here fits in int32.
// Block 0 writes the table. Blocks 1.. (where launched) zero `zero_bytes` bytes at `zero` (16-byte aligned, a
// multiple of 16): the grouped NVFP4 rows path's scale buffer, zeroed in the same launch so that the two overlap
// (a cudaMemsetAsync after this kernel ran one after the other).
template <int kBlock = kSetupThreads>
__global__ void __launch_bounds__(kBlock) group_table_kernel(const int* offsets, int G, int T, int* table,
                                                              uint8_t* zero = nullptr, int64_t zero_bytes = 0,
                                                              float* zero_g0 = nullptr, float* zero_g1 = nullptr) {
  if (blockIdx.x > 0) {
    group_offsets::zero_bytes(reinterpret_cast<char*>(zero), zero_bytes,
                              int64_t(blockIdx.x - 1) * kBlock + threadIdx.x, int64_t(gridDim.x - 1) * kBlock);
    return;
  }
  using group_offsets::block_scan, group_offsets::MaxOp, group_offsets::SumOp;
  __shared__ int scan_scratch[4][kBlock / 32];  // one row per scan of a chunk (no barrier between them)
  __shared__ int ends_s[kBlock];
  __shared__ int carry_s[4];
  int* ends = table;
  int* pos16 = table + G;
  int* pos64 = pos16 + G + 1;
  int* pos128 = pos64 + G + 1;
  const int t = threadIdx.x;
  if (t == 0) pos16[0] = pos64[0] = pos128[0] = 0;
  int c_end = 0, c16 = 0, c64 = 0, c128 = 0;
  for (int base = 0; base < G; base += kBlock) {
    const int g = base + t;
    int e = g < G ? group_offsets::clamp_offset(__ldg(offsets + g), T) : 0;
    e = max(block_scan<kBlock>(e, MaxOp{}, scan_scratch[0]).inclusive, c_end);
    ends_s[t] = e;
    __syncthreads();
    const int m = e - (t > 0 ? ends_s[t - 1] : c_end);  // >= 0; 0 past G
    const int a16 = block_scan<kBlock>(round_up(m, 16), SumOp{}, scan_scratch[1]).inclusive + c16;
    const int a64 = block_scan<kBlock>(round_up(m, 64), SumOp{}, scan_scratch[2]).inclusive + c64;
    const int a128 = block_scan<kBlock>(round_up(m, 128), SumOp{}, scan_scratch[3]).inclusive + c128;
    if (g < G) {
      ends[g] = e;
      pos16[g + 1] = a16;
      pos64[g + 1] = a64;
      pos128[g + 1] = a128;
      if (zero_g0) zero_g0[g] = 0.0f;  // per-group amax buffers the launch sequence fills by atomics
      if (zero_g1) zero_g1[g] = 0.0f;
    }
    if (t == kBlock - 1) carry_s[0] = e, carry_s[1] = a16, carry_s[2] = a64, carry_s[3] = a128;
    __syncthreads();
    c_end = carry_s[0], c16 = carry_s[1], c64 = carry_s[2], c128 = carry_s[3];
    __syncthreads();
  }
}

// The table alone (no bytes to zero): one block of 128 threads for up to 128 groups, where each block scan's serial
// sum over the warps' totals takes 3 steps instead of 31; else kSetupThreads (H200: ragged [1100, 512] per-token
// 22.9 -> 20.0 us, the expert operands 1.00-1.02x; perf/results/h200/gq_warp_search/ab_round9.txt).
inline int launch_group_table(const int* offsets, int G, int T, int* table, cudaStream_t stream,
                              float* zero_g0 = nullptr, float* zero_g1 = nullptr) {
  if (G <= 128)
    group_table_kernel<128><<<1, 128, 0, stream>>>(offsets, G, T, table, nullptr, 0, zero_g0, zero_g1);
  else
    group_table_kernel<><<<1, kSetupThreads, 0, stream>>>(offsets, G, T, table, nullptr, 0, zero_g0, zero_g1);
  return static_cast<int>(cudaGetLastError());
}

// ---------------------------------------------------------------------------
// group lookups
// ---------------------------------------------------------------------------

// Number of entries of the sorted array a[0..n) that are <= v.
__device__ __forceinline__ int count_le(const int* a, int n, int64_t v) {
  int lo = 0, hi = n;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (__ldg(a + mid) <= v) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

__device__ __forceinline__ int group_start(const Table& tb, int g) { return g > 0 ? __ldg(tb.ends + g - 1) : 0; }

// count_le for N warp-uniform values by the whole warp (every lane calls it and gets the counts): each round
// samples 32 entries of a value's remaining range in one coalesced load and narrows the range to one step by a
// ballot (the samples <= v are a prefix of the lanes), so n <= 1024 takes two rounds of dependent loads where the
// binary search takes log2(n) + 1; the N searches' loads of a round are issued together.
template <int N>
__device__ __forceinline__ void warp_count_le(const int* a, int n, const int64_t (&v)[N], int (&count)[N]) {
  const int lane = threadIdx.x & 31;
  int lo[N], hi[N];
#pragma unroll
  for (int j = 0; j < N; ++j) lo[j] = 0, hi[j] = n;
  bool open = n > 0;
  while (open) {
    int at[N], step[N];
    bool le[N];
#pragma unroll
    for (int j = 0; j < N; ++j) {
      step[j] = (hi[j] - lo[j] + 31) >> 5;  // 0 once done: the lane's sample is then past hi
      at[j] = lo[j] + lane * step[j];
      le[j] = lo[j] < hi[j] && at[j] < hi[j] && __ldg(a + at[j]) <= v[j];
    }
    open = false;
#pragma unroll
    for (int j = 0; j < N; ++j) {
      const int k = __popc(__ballot_sync(kFullMask, le[j]));  // a[lo + i * step] <= v for i < k
      if (lo[j] < hi[j]) {
        if (k == 0) hi[j] = lo[j];
        else hi[j] = min(lo[j] + k * step[j], hi[j]), lo[j] += (k - 1) * step[j] + 1;
      }
      open |= lo[j] < hi[j];
    }
  }
#pragma unroll
  for (int j = 0; j < N; ++j) count[j] = lo[j];
}

// The group of row r: the first g with ends[g] > r, or G (no group: r >= ends[G-1]).
__device__ __forceinline__ int group_of_row(const Table& tb, int64_t r) { return count_le(tb.ends, tb.G, r); }

// What position c of a launch's position space holds.
struct Slot {
  int64_t row;    // row of x
  int g;          // group (G: past the last group)
  bool in_group;  // row is a row of group g (else padding, or a row past the last group)
  bool valid;     // row is a row of x whose rowwise data this position writes
};

// pos == nullptr: A = 1 (positions are rows). Else pos = pos_A [G + 1]: group g owns positions
// [pos[g], pos[g+1]); the first m_g are its rows, the rest padding. Positions from pos[G] on
// map to the rows past the last group, in order.
__device__ __forceinline__ Slot map_position(const Table& tb, const int* pos, int64_t T, int64_t c) {
  Slot s;
  if (pos == nullptr) {
    s.g = group_of_row(tb, c);
    s.row = c;
    s.valid = c < T;
    s.in_group = s.g < tb.G;
    return s;
  }
  const int g = count_le(pos, tb.G + 1, c) - 1;  // pos[0] = 0 <= c
  s.g = g;
  if (g < tb.G) {
    const int start = group_start(tb, g);
    const int64_t local = c - __ldg(pos + g);
    s.in_group = local < __ldg(tb.ends + g) - start;
    s.row = start + local;
    s.valid = s.in_group;
  } else {
    s.row = group_start(tb, tb.G) + (c - __ldg(pos + tb.G));
    s.in_group = false;
    s.valid = s.row < T;
  }
  return s;
}

// ---------------------------------------------------------------------------
// 2. amax statistics per group / row / (group, column)
// ---------------------------------------------------------------------------

struct GStatsParams {
  const void* x;
  int64_t T, K;
  int64_t tiles_k, num_tiles;
  Table tb;
  float* g_amax;     // [G] max |x| over each group's rows, or nullptr
  float* row_amax;   // [T] max |x| per row (0 for rows in no group), or nullptr
  float* gcol_amax;  // [G, K] max |x| per column within each group, or nullptr
};

// Rows per thread and the CTAs per SM it is compiled for: 16 rows in at most 128 registers keep two CTAs per SM (bf16:
// 119 with the maxima on the raw bits; with fp32 conversions the compiler took 139 unbounded, one CTA). 8 rows at
// three CTAs per SM ran 0.94-1.0x as fast (H200, perf/results/h200/grouped_stats_bits/).
constexpr int kGroupedStatsRows = 16;
constexpr int kGroupedStatsTileM = kGroupedStatsRows * (kThreads / 32);
constexpr int kGroupedStatsMinBlocks = 2;

template <typename T>
__global__ void __launch_bounds__(kThreads, kGroupedStatsMinBlocks) grouped_stats_kernel(const GStatsParams p) {
  __shared__ unsigned col_red[kSlots][kStatsTileK];
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const T* x = static_cast<const T*>(p.x);
  const int G = p.tb.G;
  const int64_t last = G > 0 ? __ldg(p.tb.ends + G - 1) : 0;  // rows >= last belong to no group
  const bool want_rows = p.row_amax != nullptr, want_cols = p.gcol_amax != nullptr;

  // The tiles from the last one back: the end of x, which its producer wrote last, may still sit in L2, and the
  // quantize pass that follows starts from the front, which this pass then read last (H200, expert block micro-step:
  // FP8Tensorwise 4.072 -> 4.044 ms, FP8Rowwise 4.386 -> 4.326 ms; perf/results/h200/gq_warp_search/ab_round4.txt).
  for (int64_t it = blockIdx.x; it < p.num_tiles; it += gridDim.x) {
    const int64_t tile = p.num_tiles - 1 - it;
    const int64_t tm = tile / p.tiles_k, tk = tile - tm * p.tiles_k;
    const int64_t m0 = tm * kGroupedStatsTileM;
    const int64_t r0 = m0 + kGroupedStatsRows * warp;
    const int64_t col = tk * kStatsTileK + 8 * lane;
    const bool col_ok = col < p.K;
    Raw8<T> raw[kGroupedStatsRows];
#pragma unroll
    for (int i = 0; i < kGroupedStatsRows; ++i) {
      const bool ok = col_ok && r0 + i < last;
      load8(raw[i], x + (ok ? (r0 + i) * p.K + col : 0), ok);
    }
    const int g_lo = want_cols ? group_of_row(p.tb, m0) : 0;  // CTA-uniform
    if (want_cols) {
#pragma unroll
      for (int s = 0; s < kSlots; ++s) col_red[s][t] = 0u;
      __syncthreads();
    }

    // max |x| on the raw bits (quant_numerics.cuh, MagCols): fp32 bits, reduced by integer maxima
    uint32_t rowmax[kGroupedStatsRows];
#pragma unroll
    for (int i = 0; i < kGroupedStatsRows; ++i) rowmax[i] = mag_row_bits(raw[i]);  // rows outside: zeros
    if (want_rows) {  // lane i ends up owning row r0 + i (as in quant.cuh)
      uint32_t mine = 0u;
#pragma unroll
      for (int i = 0; i < kGroupedStatsRows; ++i) {
        const uint32_t m = __reduce_max_sync(kFullMask, rowmax[i]);
        if (lane == i) mine = m;
      }
      if (lane < kGroupedStatsRows && r0 + lane < last) atomic_max_bits(p.row_amax + r0 + lane, mine);
    }

    if (p.g_amax != nullptr || want_cols) {
      // the group segments of rows [r0, r0 + 16): warp-uniform loop, usually one segment
      for (int g = group_of_row(p.tb, r0); g < G; ++g) {
        const int64_t lo = max(r0, static_cast<int64_t>(group_start(p.tb, g)));
        const int64_t e = __ldg(p.tb.ends + g);
        const int64_t hi = min(r0 + kGroupedStatsRows, e);
        if (lo < hi) {
          uint32_t seg = 0u;
          MagCols<T> colmax{};
#pragma unroll
          for (int i = 0; i < kGroupedStatsRows; ++i) {
            if (r0 + i >= lo && r0 + i < hi) {
              seg = max(seg, rowmax[i]);
              if (want_cols) mag_cols_max(colmax, raw[i]);
            }
          }
          if (p.g_amax != nullptr) {
            seg = __reduce_max_sync(kFullMask, seg);
            if (lane == 0) atomic_max_bits(p.g_amax + g, seg);
          }
          if (want_cols && col_ok) {
            if (g - g_lo < kSlots) {
#pragma unroll
              for (int j = 0; j < 8; ++j) atomicMax(&col_red[g - g_lo][8 * lane + j], mag_col_bits(colmax, j));
            } else {  // many small groups in one tile: straight to global
#pragma unroll
              for (int j = 0; j < 8; ++j)
                if (col + j < p.K) atomic_max_bits(p.gcol_amax + g * p.K + col + j, mag_col_bits(colmax, j));
            }
          }
        }
        if (e >= r0 + kGroupedStatsRows) break;
      }
    }

    if (want_cols) {
      __syncthreads();
      const int64_t c = tk * kStatsTileK + t;
#pragma unroll
      for (int s = 0; s < kSlots; ++s) {
        const unsigned v = col_red[s][t];
        if (v != 0u && g_lo + s < G && c < p.K)  // 0 is the memset value already
          atomicMax(reinterpret_cast<unsigned*>(p.gcol_amax + (g_lo + s) * p.K + c), v);
      }
      __syncthreads();
    }
  }
}

// ---------------------------------------------------------------------------
// 3. the grouped quantize tile kernel (FP8 rows + wgrad columns, NVFP4 / MXFP8 rows)
// ---------------------------------------------------------------------------

struct GQuantParams {
  const void* x;
  int64_t T, K;
  int64_t tiles_k;
  Table tb;
  const int* pos;  // position table of this launch (nullptr: positions are rows)
  int64_t space;   // positions covered (the scale rows of the rowwise NVFP4/MXFP8 buffer)
  const int4* tiles;  // non-null when pos is pos128: a tile's 128 positions lie in one group (or all
                      // past the last); tiles[t] = {first row, rows of x in it, group, -}
  // rowwise copy [T, K]
  uint8_t* q_row;
  uint8_t* s_row;  // NVFP4 / MXFP8 swizzled scales, row = position
  void* exact_row;  // NVFP4: bf16 [T, K] exact rows (store_exact_block; rows past the last group zeros), or null
  int64_t cp_row;
  const float* amax_row;  // [G] (row_token = 0) or [T]
  int row_token;
  // FP8 columnwise copy, wgrad layout [K, W]; or, col_group_rows = n > 0 (every group n rows, positions = rows),
  // stacked W^T [G * K, n]: group g's column k at row g * K + k
  uint8_t* q_col;
  int64_t W;
  int64_t col_group_rows;
  const float* amax_col;  // [G] (col_token = 0) or [G, K]
  int col_token;
  // decode scales written from amaxes at the end (NVFP4: S_dec; FP8: scale_inv)
  float* g_row;
  const float* g_row_amax;
  int64_t n_g_row;
  float* g_col;
  const float* g_col_amax;
  int64_t n_g_col;
  uint64_t seed, offset;  // NVFP4 stochastic rounding of the rowwise copy ([T, K] element order)
  const uint64_t* seed_device;  // or null: sr_seed / sr_offset
  float* amax_out;  // FP8 delayed scaling: [G] per-group max|x| (atomic maxima), or null
};

template <Format F>
__device__ __forceinline__ float decode_scale(float amax) {
  if constexpr (F == Format::kNVFP4) return Nvfp4Global(amax).s_dec;
  else return __frcp_rn(fp8_scale(amax));
}

template <Format F>
__device__ __forceinline__ void write_decode_scales(const GQuantParams& p) {
  const int64_t n = max(p.n_g_row, p.n_g_col);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    if (i < p.n_g_row) p.g_row[i] = decode_scale<F>(__ldg(p.g_row_amax + i));
    if (i < p.n_g_col) p.g_col[i] = decode_scale<F>(__ldg(p.g_col_amax + i));
  }
}

// One thread's 16-element block of the rowwise copy at position c (row s.row of x).
// `pre`: the slot's NVFP4 global scale when the caller already has it (tensor scaling, one group
// per tile), else nullptr. SR: NVFP4 stochastic rounding, block n = row * K/16 + col/16.
template <Format F, bool SR = false>
__device__ __forceinline__ void grouped_row_block(const GQuantParams& p, const float (&v)[16], const Slot& s,
                                                  int64_t c, int64_t col, int blk, int64_t k0,
                                                  const Nvfp4Global* pre = nullptr) {
  const bool in = s.in_group && col < p.K;  // a real block of a group
  const bool write = s.valid && col < p.K;  // data written (zeros for rows past the last group)
  float amax = 0.0f;
  if constexpr (F != Format::kMXFP8) {
    if (p.row_token) amax = s.valid ? __ldg(p.amax_row + s.row) : 0.0f;
    else amax = s.in_group ? __ldg(p.amax_row + s.g) : 0.0f;
  }
  if constexpr (F == Format::kFP8) {
    if (write) *reinterpret_cast<uint4*>(p.q_row + s.row * p.K + col) = e4m3x16(v, fp8_scale(amax));
  } else if constexpr (F == Format::kNVFP4) {
    // Rows outside every group encode as zeros (code 0, scale 0): skip the arithmetic there.
    uint32_t sb = 0u;
    uint2 q = make_uint2(0u, 0u);
    if (in) {
      const Nvfp4Global g = pre ? *pre : Nvfp4Global(amax);
      const uint64_t n = static_cast<uint64_t>(s.row) * static_cast<uint64_t>(p.K / 16) + col / 16;
      q = nvfp4_block<SR>(v, g, n, sr_seed(p.seed, p.seed_device), sr_offset(p.offset, p.seed_device), in, sb);
    }
    if (write) *reinterpret_cast<uint2*>(p.q_row + s.row * (p.K / 2) + col / 2) = q;
    if (write && p.exact_row != nullptr) store_exact_block(p.exact_row, s.row, p.K, col, q, sb);
    const uint32_t word = gather4_bytes(sb);
    const int64_t sc = k0 / 16;
    if (blk == 0 && c < p.space && sc < p.cp_row)
      *reinterpret_cast<uint32_t*>(p.s_row + swizzle_offset(c, sc, p.cp_row)) = word;
  } else {  // MXFP8: a 32-block is two adjacent threads
    float bm = absmax_nan<16>(v);
    bm = max_nan(bm, __shfl_xor_sync(kFullMask, bm, 1));
    uint32_t b = mxfp8_scale_byte(bm);
    if (!in) b = 0u;
    if (write) *reinterpret_cast<uint4*>(p.q_row + s.row * p.K + col) = e4m3x16(v, mxfp8_inv_scale(b));
    const uint32_t b1 = __shfl_down_sync(kFullMask, b, 2);
    const int64_t sc = k0 / 32;
    if (blk == 0 && c < p.space && sc < p.cp_row)
      *reinterpret_cast<uint16_t*>(p.s_row + swizzle_offset(c, sc, p.cp_row)) = static_cast<uint16_t>(b | (b1 << 8));
  }
}

// The FP8 columnwise copy's positions are 16-aligned per group, so a warp's rows of the tile (r4 = 8w .. 8w+7, and
// + 64) lie in one 16-position chunk each, and the warp maps each chunk's first position once (chunk_heads) instead
// of two binary searches per thread. ChunkHead: that position's row, group, rows of the group from it on, and (FP8
// per-group scaling) the group's scale (1 past the last group).
struct ChunkHead {
  int64_t row;
  int g;
  int rows_left;
  float scale;
};

// The heads of a warp's two chunks (positions c[0], c[1], warp-uniform), found by every lane: one warp search of the
// position table (warp_count_le), then one round of uniform loads per chunk (its group's bounds and amax).
template <bool SCALE>
__device__ __forceinline__ void chunk_heads(const GQuantParams& p, const int64_t (&c)[2], ChunkHead (&h)[2]) {
  const Table& tb = p.tb;
  int cnt[2];
  warp_count_le<2>(p.pos, tb.G + 1, c, cnt);  // pos[0] = 0 <= c
  int start[2], first[2], end[2];
  float amax[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {  // both chunks' loads first (one round), then the arithmetic
    const int g = cnt[i] - 1;
    const bool in = g < tb.G;
    start[i] = group_start(tb, g);
    first[i] = __ldg(p.pos + g);
    end[i] = in ? __ldg(tb.ends + g) : 0;
    amax[i] = SCALE && in ? __ldg(p.amax_row + g) : 0.0f;
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int g = cnt[i] - 1;
    h[i].g = g;
    h[i].row = start[i] + (c[i] - first[i]);
    h[i].rows_left = g < tb.G ? max(end[i] - static_cast<int>(h[i].row), 0) : 0;
    h[i].scale = SCALE ? fp8_scale(amax[i]) : 1.0f;
  }
}

// Where row k of the FP8 columnwise copy starts at position pos (a position of group g): the wgrad layout [K, W],
// or stacked W^T [G * K, n] (col_group_rows = n: group g's row k is row g * K + k, its positions start at g * n).
// Row k + 1 lies col_row_stride(p) bytes further on.
__device__ __forceinline__ int64_t col_row_offset(const GQuantParams& p, int g, int64_t k, int64_t pos) {
  const int64_t n = p.col_group_rows;
  return n ? (g * p.K + k) * n + (pos - g * n) : k * p.W + pos;
}
__device__ __forceinline__ int64_t col_row_stride(const GQuantParams& p) {
  return p.col_group_rows ? p.col_group_rows : p.W;
}

// The slot of row d (< 16) of chunk head h.
__device__ __forceinline__ Slot head_slot(const ChunkHead& h, int d, int G, int64_t T) {
  Slot s;
  s.g = h.g;
  s.row = h.row + d;
  s.in_group = h.g < G && d < h.rows_left;
  s.valid = h.g < G ? s.in_group : s.row < T;
  return s;
}

// tile_amax_add for a warp whose lanes share one key (a chunk's group; -1: none), rows outside the group holding
// zeros: one reduction over the warp, no key matching.
__device__ __forceinline__ void tile_amax_add_warp(unsigned* slots, int first, float* out, int key, float m) {
  const unsigned bits = __reduce_max_sync(kFullMask, __float_as_uint(m) & 0x7fffffffu);
  if (key < 0 || (threadIdx.x & 31) != 0) return;
  const int slot = key - first;
  if (slot >= 0 && slot < kAmaxSlots) atomicMax(slots + slot, bits);
  else atomic_max_nonneg(out + key, __uint_as_float(bits));
}

// Per-token columnwise copy of 16-bit inputs (half_tile_path): the row phase keeps the tile's raw values (128 rows of
// 128 bytes, the 16-byte chunk ch of row r at chunk ch ^ (r & 7) ^ ((r >> 4) & 7)) and the column phase reads them as
// pairs of columns: half the shared memory and half the loads of an fp32 tile (H200, x [65536, 2048] routed over 128
// experts, both copies: 1.011-1.029x, perf/results/h200/gq_warp_search/ab_round8.txt). The swizzle keeps both phases
// free of bank conflicts: a quarter-warp's row stores cover two rows whose swizzles differ in bit 0; a column read's
// eight rows 16 apart (r = 16c + j) take eight distinct chunks.
template <typename T, bool COL, bool CAST_T>
constexpr bool half_tile_path() { return COL && !CAST_T && sizeof(T) == 2; }

__device__ __forceinline__ int half_tile_offset(int r, int chunk) {
  return r * 2 * kTileK + ((chunk ^ (r & 7) ^ ((r >> 4) & 7)) << 4);
}

template <typename T>
__device__ __forceinline__ void store_half_tile_row(uint8_t* tile, int rl, int blk, const Raw8<T> (&raw)[2]) {
  static_assert(sizeof(T) == 2, "16-bit inputs");
  *reinterpret_cast<uint4*>(tile + half_tile_offset(rl, 2 * blk)) = raw[0].w[0];
  *reinterpret_cast<uint4*>(tile + half_tile_offset(rl, 2 * blk + 1)) = raw[1].w[0];
}

// CAST_T (FP8, COL, per-group scaling: both copies scaled from amax_row[g] = amax_col[g]): the columnwise copy is
// the rowwise bytes transposed through a byte tile (quant.cuh, read_byte_columns); else (per-token) the input values
// transposed through the half tile (16-bit inputs) or an fp32 tile, and scaled per column.
// TILES (CAST_T only): 64-column tiles per CTA, every tile's loads issued before the first is converted, so a CTA
// keeps twice the bytes in flight and maps its chunks once for both, at kColumnwiseBlocks CTAs per SM (64
// registers, no spills), as the one-tile kernel runs: H200, x [65536, 2048] routed over 128 experts, the pass
// alone 166.7 -> 150.0 us; at 79 registers (three CTAs per SM) 155.2 us, four tiles per CTA 207.0 us
// (perf/results/h200/gq_warp_search/). launch_grouped_tiles takes two tiles where one-tile CTAs fill more than one
// wave (fewer, longer CTAs only cost where they all fit at once).
// Every FP8 columnwise kernel is compiled for kColumnwiseBlocks CTAs per SM (at most 64 registers; the half-tile
// kernel unbounded took 72, three CTAs per SM, and ran 0.91-0.94x).
constexpr int kColumnwiseBlocks = 4;

template <Format F, typename T, bool ROW, bool COL, bool SR = false, bool CAST_T = false, int TILES = 1>
__global__ void __launch_bounds__(kThreads, COL ? kColumnwiseBlocks : 1)
    grouped_quantize_kernel(const GQuantParams p) {
  static_assert(!COL || F == Format::kFP8, "the wgrad-layout copy of this kernel is FP8");
  static_assert(!SR || F == Format::kNVFP4, "stochastic rounding is for NVFP4");
  static_assert(!CAST_T || (F == Format::kFP8 && COL), "the byte tile is FP8's columnwise copy");
  static_assert(TILES == 1 || (CAST_T && TILES == 2 && sizeof(T) == 2), "two tiles per CTA: the cast-then-transpose "
                "copy of 16-bit inputs");
  constexpr bool kHalfTile = half_tile_path<T, COL, CAST_T>();
  __shared__ __align__(16) float tile[COL && !CAST_T && !kHalfTile ? kTileM * kTileK : 4];
  __shared__ __align__(16) uint8_t half_tile[kHalfTile ? kTileM * 2 * kTileK : 16];
  constexpr int kSub = TILES;
  __shared__ __align__(16) uint8_t byte_tile[kSub][CAST_T ? kTileM * kTileK : 16];
  __shared__ int chunk_group[kTileM / 16];
  __shared__ unsigned amax_slots[F == Format::kFP8 ? kAmaxSlots : 1];  // FP8 delayed scaling (p.amax_out)
  __shared__ int amax_first;  // the tile's first group: slot j holds group amax_first + j
  const int t = threadIdx.x;
  // 32-bit division: no 64-bit divide call
  const unsigned tiles_k = static_cast<unsigned>((p.tiles_k + kSub - 1) / kSub);
  const int64_t tm = blockIdx.x / tiles_k, tk = (blockIdx.x - tm * tiles_k) * kSub;
  const int64_t c0 = tm * kTileM, k0 = tk * kTileK;
  const T* x = static_cast<const T*>(p.x);

  const int blk = t & 3, r4 = t >> 2;
  const int64_t col = k0 + 16 * blk;
  Slot s[2];
  float chunk_scale[2] = {1.0f, 1.0f};  // CAST_T: row i's chunk's scale (rows outside its group are zeros)
  if (p.tiles) {
    // One 16-byte load of the tile table instead of a binary search per row: the search's chain
    // of dependent loads sat in front of every thread's data loads (2x slower, H200).
    const int4 ti = __ldg(p.tiles + tm);
    const int64_t rows_left = ti.y;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int64_t d = r4 + 64 * i;
      s[i].g = ti.z;
      s[i].row = ti.x + d;
      s[i].in_group = ti.z < p.tb.G && d < rows_left;
      s[i].valid = d < rows_left;
    }
    if (!COL && rows_left <= 0) {  // a tile of padding only (the buffer is sized by a host-known bound)
      const float zeros[16] = {};
#pragma unroll
      for (int i = 0; i < 2; ++i) grouped_row_block<F>(p, zeros, s[i], c0 + r4 + 64 * i, col, blk, k0);
      write_decode_scales<F>(p);
      return;
    }
  } else if constexpr (COL) {  // positions 16-aligned per group: chunk heads (ChunkHead)
    const int warp = t >> 5, lane = t & 31;
    const int64_t heads_at[2] = {c0 + 16 * (warp >> 1), c0 + 16 * ((warp >> 1) + 4)};
    ChunkHead heads[2];
    chunk_heads<CAST_T>(p, heads_at, heads);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      s[i] = head_slot(heads[i], 8 * (warp & 1) + (lane >> 2), p.tb.G, p.T);
      chunk_scale[i] = heads[i].scale;
    }
  } else {
#pragma unroll
    for (int i = 0; i < 2; ++i) s[i] = map_position(p.tb, p.pos, p.T, c0 + r4 + 64 * i);
  }
  Raw8<T> raw[kSub][2][2];
#pragma unroll
  for (int u = 0; u < kSub; ++u)
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const bool ok = col + kTileK * u < p.K && s[i].in_group;
      load16(raw[u][i], x + (ok ? s[i].row * p.K + col + kTileK * u : 0), ok);
    }
  const bool want_amax = F == Format::kFP8 && p.amax_out != nullptr;  // uniform
  if (want_amax) {
    tile_amax_init(amax_slots);
    if (t == 0) amax_first = s[0].g;  // position c0's group: the tile's groups are amax_first and later ones
    __syncthreads();
  }
  // Tensor scaling with one group per tile: one global scale (two IEEE divisions) per thread.
  Nvfp4Global g_tile{};
  const bool tile_global = F == Format::kNVFP4 && p.tiles && !p.row_token && s[0].in_group;
  if (tile_global) g_tile = Nvfp4Global(__ldg(p.amax_row + s[0].g));
  if (COL && blk == 0 && (r4 & 15) == 0) {
#pragma unroll
    for (int i = 0; i < 2; ++i) chunk_group[(r4 + 64 * i) >> 4] = s[i].g;  // 16-chunks are group-uniform
  }
  float tile_max[2] = {0.0f, 0.0f};  // want_amax: max |x| of row i's blocks over the tiles
#pragma unroll
  for (int ui = 0; ui < 2 * kSub; ++ui) {
    const int u = ui >> 1, i = ui & 1;
    float v[16];
    to_float16(raw[u][i], v);
    const int rl = r4 + 64 * i;
    if constexpr (CAST_T) {  // grouped_row_block's FP8 bytes, kept for the columnwise copy too
      const uint4 q = e4m3x16(v, chunk_scale[i]);
      if (ROW && s[i].valid && col + kTileK * u < p.K)
        *reinterpret_cast<uint4*>(p.q_row + s[i].row * p.K + col + kTileK * u) = q;
      store_byte_tile_row(byte_tile[u], rl, blk, q);
    } else {
      if constexpr (ROW) grouped_row_block<F, SR>(p, v, s[i], c0 + rl, col, blk, k0, tile_global ? &g_tile : nullptr);
      if constexpr (kHalfTile) store_half_tile_row<T>(half_tile, rl, blk, raw[u][i]);
      else if constexpr (COL) store_tile_row(tile, rl, blk, v);
    }
    if (want_amax) {  // rows in no group take no part (zeros here); columns past K were loaded as zeros
      // COL: the warp's rows are one chunk, so one group (or none), the same for every tile u
      tile_max[i] = max_nan(tile_max[i], absmax_nan<16>(v));
      if constexpr (COL) {
        if (u == kSub - 1) tile_amax_add_warp(amax_slots, amax_first, p.amax_out, s[i].g < p.tb.G ? s[i].g : -1,
                                              tile_max[i]);
      } else {
        tile_amax_add(amax_slots, amax_first, p.amax_out, s[i].in_group ? s[i].g : -1, tile_max[i]);
      }
    }
  }
  if constexpr (CAST_T) {
    __syncthreads();
    const int lane = t & 31, warp = t >> 5;
    const int64_t pos = c0 + 4 * lane;  // 4 positions of one 16-position chunk
    const int g = chunk_group[lane >> 2];
    // the 8 rows a thread writes per tile are consecutive: one address and one bound per tile
    const int64_t stride = col_row_stride(p), k1 = k0 + 8 * warp;
    uint8_t* const dst = p.q_col + col_row_offset(p, g, k1, pos);
    const int rows_in = pos < p.W ? static_cast<int>(min(p.K - k1, int64_t{kTileK * kSub})) : 0;
#pragma unroll
    for (int u = 0; u < kSub; ++u) {
      uint32_t w[8];
      read_byte_columns(byte_tile[u], warp, lane, w);
#pragma unroll
      for (int b = 0; b < 8; ++b)
        if (kTileK * u + b < rows_in) *reinterpret_cast<uint32_t*>(dst + (kTileK * u + b) * stride) = w[b];
    }
  } else if constexpr (kHalfTile) {
    __syncthreads();
    // lane (pl, c): columns 2pr, 2pr + 1 (pr = 4 * warp + pl, the tile's 4-byte word pr) at the 16 positions of chunk
    // c; a store instruction's 8 lanes of one pl write 128 contiguous bytes of one row of the copy
    const int lane = t & 31, warp = t >> 5, pl = lane >> 3, c = lane & 7;
    const int64_t k = k0 + 2 * (4 * warp + pl), pos = c0 + 16 * c;
    const int g = chunk_group[c];
    float amax[2] = {0.0f, 0.0f};
    if (g < p.tb.G && k < p.K) {  // K % 16 == 0: k + 1 < K too
      amax[0] = p.col_token ? __ldg(p.amax_col + g * p.K + k) : __ldg(p.amax_col + g);
      amax[1] = p.col_token ? __ldg(p.amax_col + g * p.K + k + 1) : amax[0];
    }
    uint32_t w[16];
#pragma unroll
    for (int j = 0; j < 16; ++j)
      w[j] = *reinterpret_cast<const uint32_t*>(half_tile + half_tile_offset(16 * c + j, warp) + 4 * pl);
    float va[16], vb[16];  // columns k and k + 1
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      Raw8<T> r;
      r.w[0] = make_uint4(w[4 * q], w[4 * q + 1], w[4 * q + 2], w[4 * q + 3]);
      float f[8];
      to_float8(r, f);
#pragma unroll
      for (int e = 0; e < 4; ++e) va[4 * q + e] = f[2 * e], vb[4 * q + e] = f[2 * e + 1];
    }
    if (k < p.K && pos < p.W) {
      uint8_t* const dst = p.q_col + col_row_offset(p, g, k, pos);
      *reinterpret_cast<uint4*>(dst) = e4m3x16(va, fp8_scale(amax[0]));
      *reinterpret_cast<uint4*>(dst + col_row_stride(p)) = e4m3x16(vb, fp8_scale(amax[1]));
    }
  } else if constexpr (COL) {
    __syncthreads();
    const int lane = t & 31, warp = t >> 5;
    const int kl = 8 * warp + (lane >> 2), mq = lane & 3;
    const int64_t k = k0 + kl;
    float scale[2];  // both scales before the tile reads (fewer live registers across the divisions)
    int64_t at[2];   // where the 16 positions' bytes go
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int g = chunk_group[mq + 4 * i];
      float amax = 0.0f;
      if (g < p.tb.G && k < p.K) amax = p.col_token ? __ldg(p.amax_col + g * p.K + k) : __ldg(p.amax_col + g);
      scale[i] = fp8_scale(amax);
      at[i] = col_row_offset(p, g, k, c0 + 16 * (mq + 4 * i));
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int64_t pos = c0 + 16 * (mq + 4 * i);
      float v[16];
      read_column<16>(tile, 16 * (mq + 4 * i), kl, v);
      if (k < p.K && pos < p.W) *reinterpret_cast<uint4*>(p.q_col + at[i]) = e4m3x16(v, scale[i]);
    }
  }
  if (want_amax) {
    if constexpr (!COL) __syncthreads();  // (COL: the tile's barrier above already follows every add)
    tile_amax_flush(amax_slots, amax_first, p.tb.G, p.amax_out);
  }
  write_decode_scales<F>(p);
}

// ---------------------------------------------------------------------------
// 4. NVFP4 columnwise copy in the wgrad layout, scales grouped along K
// ---------------------------------------------------------------------------
// Positions are 64-aligned token slots: group g owns [pos64[g], pos64[g+1]). Slot local l
// (l < ceil16(m_g)) is data column pos16[g] + l of q_col [K, W/2 bytes]; 16-slot chunk l/16 is
// scale column l/16 of group g's own K x Cp_g swizzled matrix (Cp_g = ceil64(m_g)/16, rows
// padded to Rp = ceil(K/128)*128), which starts at byte Rp * pos64[g] / 16 of s_col. Slots from
// pos64[G] on zero the data columns from pos16[G] to W and the scale bytes up to Rp * cb_total
// (the host-known bound, cb_total = 4 * ceil((T + 63 G) / 64)), as one more swizzled matrix.

struct GWgradParams {
  const void* x;
  int64_t T, K;
  int64_t tiles_k;  // covers Rp (quantize) or K (RHT stats)
  Table tb;
  int64_t space;  // slots covered (>= 16 * cb_total and >= pos64[G] + W - pos16[G])
  uint8_t* q_col;
  int64_t W;
  uint8_t* s_col;
  int64_t rp, cb_total;
  const float* amax_col;  // [G] (token = 0) or [G, K]
  int col_token;
  float* g_col;
  const float* g_col_amax;
  int64_t n_g_col;
  uint64_t seed, offset;  // stochastic rounding ([K, W] element order)
  const uint64_t* seed_device;  // or null: sr_seed / sr_offset
  float* rht_amax;        // RHT stats output: [G] (token = 0) or [G, K]
};

// The tile's two 64-slot halves each lie in one group (or the tail past the last group):
// info[h] = {group, local slot of the half's first slot, m_g, first row of the group}.
__device__ __forceinline__ void wgrad_tile_info(const GWgradParams& p, int64_t c0, int64_t (&info)[2][4]) {
  const int t = threadIdx.x, G = p.tb.G;
  if (t < 2) {
    const int64_t c = c0 + 64 * t;
    const int g = count_le(p.tb.pos64, G + 1, c) - 1;
    info[t][0] = g;
    info[t][1] = c - __ldg(p.tb.pos64 + g);
    info[t][2] = g < G ? __ldg(p.tb.ends + g) - group_start(p.tb, g) : 0;
    info[t][3] = g < G ? group_start(p.tb, g) : 0;
  }
  __syncthreads();
}

// Slots x 64 columns of x into the shared fp32 tile (slot = tile row); slots that are not rows of
// their group, and columns past K, as zeros.
template <typename T>
__device__ __forceinline__ void load_wgrad_tile(const GWgradParams& p, int64_t k0, const int64_t (&info)[2][4],
                                                float* tile) {
  const int t = threadIdx.x;
  const int blk = t & 3, r4 = t >> 2;
  const int64_t col = k0 + 16 * blk;
  const bool col_ok = col < p.K;
  const T* x = static_cast<const T*>(p.x);
  Raw8<T> raw[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {  // slot r4 + 64 i is slot r4 of half i
    const int64_t local = info[i][1] + r4;
    const bool ok = col_ok && info[i][0] < p.tb.G && local < info[i][2];
    load16(raw[i], x + (ok ? (info[i][3] + local) * p.K + col : 0), ok);
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float v[16];
    to_float16(raw[i], v);
    store_tile_row(tile, r4 + 64 * i, blk, v);
  }
  __syncthreads();
}

// RHT amax of the columnwise copy (NUMERICS 8: taken after the transform, over the bf16 values of
// every 16-chunk of group-local slots, the zero padding of a group's last chunk included):
// rht_amax[g] ("tensor") or rht_amax[g, k] ("token"). Tiles past the last group exit at once.
template <typename T>
__global__ void __launch_bounds__(kThreads) wgrad_rht_stats_kernel(const GWgradParams p) {
  __shared__ __align__(16) float tile[kTileM * kTileK];
  __shared__ int64_t info[2][4];
  const int t = threadIdx.x;
  const unsigned tiles_k = static_cast<unsigned>(p.tiles_k);
  const int64_t tm = blockIdx.x / tiles_k, tk = blockIdx.x - tm * tiles_k;
  const int64_t c0 = tm * kTileM, k0 = tk * kTileK;
  const int G = p.tb.G;
  wgrad_tile_info(p, c0, info);
  if (info[0][0] >= G) return;  // CTA-uniform: the halves' groups are non-decreasing
  load_wgrad_tile<T>(p, k0, info, tile);
  const int lane = t & 31, warp = t >> 5;
  const int kl = 8 * warp + (lane >> 2), mq = lane & 3;
  const int64_t k = k0 + kl;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int g = static_cast<int>(info[i][0]);
    float v[16];
    read_column<16>(tile, 16 * (mq + 4 * i), kl, v);
    rht16(v);
    float m = absmax_nan<16>(v);
    if (p.col_token) {
      m = max_nan(m, __shfl_xor_sync(kFullMask, m, 1));
      m = max_nan(m, __shfl_xor_sync(kFullMask, m, 2));
      if (mq == 0 && g < G && k < p.K && __float_as_uint(m) != 0u) atomic_max_nonneg(p.rht_amax + g * p.K + k, m);
    } else {
#pragma unroll
      for (int sh = 16; sh > 0; sh >>= 1) m = max_nan(m, __shfl_xor_sync(kFullMask, m, sh));
      if (lane == 0 && g < G && __float_as_uint(m) != 0u) atomic_max_nonneg(p.rht_amax + g, m);
    }
  }
}

template <typename T, bool RHT, bool SR>
__global__ void __launch_bounds__(kThreads) nvfp4_wgrad_kernel(const GWgradParams p) {
  __shared__ __align__(16) float tile[kTileM * kTileK];
  __shared__ int64_t info[2][4];
  const int t = threadIdx.x;
  const unsigned tiles_k = static_cast<unsigned>(p.tiles_k);  // 32-bit division: no 64-bit divide call
  const int64_t tm = blockIdx.x / tiles_k, tk = blockIdx.x - tm * tiles_k;
  const int64_t c0 = tm * kTileM, k0 = tk * kTileK;
  const int G = p.tb.G;
  wgrad_tile_info(p, c0, info);
  load_wgrad_tile<T>(p, k0, info, tile);

  const int lane = t & 31, warp = t >> 5;
  const int kl = 8 * warp + (lane >> 2), mq = lane & 3;
  const int64_t k = k0 + kl;
#pragma unroll
  for (int i = 0; i < 2; ++i) {  // half i: 16-slot chunk mq of it
    const int g = static_cast<int>(info[i][0]);
    const int64_t local = info[i][1] + 16 * mq;  // first slot of this chunk in its group
    const int64_t m = info[i][2];
    float amax = 0.0f;
    if (g < G && k < p.K) amax = p.col_token ? __ldg(p.amax_col + g * p.K + k) : __ldg(p.amax_col + g);
    const Nvfp4Global gs(amax);
    float v[16];
    read_column<16>(tile, 16 * (mq + 4 * i), kl, v);
    if constexpr (RHT) rht16(v);  // the padding slots of a group's last chunk become data too
    const bool in = g < G && k < p.K && local < m;  // a real block (possibly partial)
    int64_t data_col;  // slot -> wgrad data column
    if (g < G) data_col = local < (m + 15) / 16 * 16 ? __ldg(p.tb.pos16 + g) + local : -1;
    else data_col = __ldg(p.tb.pos16 + G) + local;
    const bool store = k < p.K && data_col >= 0 && data_col < p.W;
    uint32_t sb;
    const uint64_t n = store ? (static_cast<uint64_t>(k) * static_cast<uint64_t>(p.W) + data_col) / 16 : 0;
    const uint2 q = nvfp4_block<SR>(v, gs, n, sr_seed(p.seed, p.seed_device), sr_offset(p.offset, p.seed_device),
                                    in, sb);
    if (store) *reinterpret_cast<uint2*>(p.q_col + k * (p.W / 2) + data_col / 2) = q;
    const uint32_t word = gather4_bytes(sb);
    if (mq == 0 && k < p.rp) {
      const int64_t base_col = __ldg(p.tb.pos64 + min(g, G)) / 16;  // scale columns before this matrix
      const int64_t cp = g < G ? (m + 63) / 64 * 4 : p.cb_total - base_col;
      const int64_t sc = info[i][1] / 16;  // multiple of 4
      if (sc < cp)
        *reinterpret_cast<uint32_t*>(p.s_col + p.rp * base_col + swizzle_offset(k, sc, cp)) = word;
    }
  }
  const int64_t n = p.n_g_col;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + t; i < n; i += static_cast<int64_t>(gridDim.x) * kThreads)
    p.g_col[i] = Nvfp4Global(__ldg(p.g_col_amax + i)).s_dec;
}

// ---------------------------------------------------------------------------
// host launchers (0 or a cudaError_t; no allocation, no synchronisation: graph-capturable)
// ---------------------------------------------------------------------------

inline int memset_f32(float* p, int64_t n, cudaStream_t stream) {
  if (p == nullptr || n <= 0) return 0;
  return static_cast<int>(cudaMemsetAsync(p, 0, sizeof(float) * n, stream));
}

// Table, then zeroed amax buffers filled by one read of x; amax_out ([G], delayed scaling's, filled by the
// quantize pass) zeroed too.
template <typename T>
int launch_setup_and_stats(const void* x, int64_t T_, int64_t K, const int* offsets, int G, int* table,
                           float* g_amax, float* row_amax, float* gcol_amax, cudaStream_t stream,
                           float* amax_out = nullptr) {
  // the [G] amax buffers are zeroed by the table's kernel (a memset each was one more graph node)
  int err = launch_group_table(offsets, G, static_cast<int>(T_), table, stream, g_amax, amax_out);
  if (!err) err = memset_f32(row_amax, T_, stream);
  if (!err) err = memset_f32(gcol_amax, static_cast<int64_t>(G) * K, stream);
  if (err || (!g_amax && !row_amax && !gcol_amax) || T_ <= 0 || K <= 0) return err;
  GStatsParams sp{x, T_, K, ceil_div(K, kStatsTileK), 0, make_table(table, G), g_amax, row_amax, gcol_amax};
  sp.num_tiles = ceil_div(T_, kGroupedStatsTileM) * sp.tiles_k;
  grouped_stats_kernel<T><<<wave_grid<grouped_stats_kernel<T>>(sp.num_tiles), kThreads, 0, stream>>>(sp);
  return static_cast<int>(cudaGetLastError());
}

__global__ void tile_table_kernel(const Table tb, int64_t T, int64_t ntiles, int4* tiles) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= ntiles) return;
  const Slot b = map_position(tb, tb.pos128, T, i * kTileM);
  const int64_t rows = b.g < tb.G ? (b.in_group ? __ldg(tb.ends + b.g) - b.row : 0) : T - b.row;
  tiles[i] = make_int4(static_cast<int>(b.row), static_cast<int>(rows < 0 ? 0 : rows), b.g, 0);
}

inline int launch_tile_table(const Table& tb, int64_t T, int64_t space, int4* tiles, cudaStream_t stream) {
  const int64_t ntiles = space / kTileM;
  tile_table_kernel<<<static_cast<unsigned>((ntiles + 255) / 256), 256, 0, stream>>>(tb, T, ntiles, tiles);
  return static_cast<int>(cudaGetLastError());
}

// quantize_rows_kernel's positions for the NVFP4 rowwise copy with per-token scaling, two ways (the launcher picks):
//
// GroupedScaleRows: the scale rows of the layout grouped along M, looked up in the tile table (one load; a binary
// search of pos128 per position cost more than the launches it saved), so the group table, the tile table and this
// one launch write the data, the scales with their padding rows, alpha and amax. A tile's `rows` counts the rows of
// x from its first position on (map_position's in_group / valid for its positions).
struct GroupedScaleRows {
  // up to 128 threads per position (H100, 64 groups, K = 7168: 128 rows 33.7 -> 24.6 us against 256 threads, 16384
  // rows 164 -> 145 us; 64 threads 22.6 / 157)
  static constexpr int kMaxThreadsLog2 = 7;
  static constexpr bool kPaddingZeroed = false;  // padding scale rows are written here, as zeros
  const int4* tiles;  // tile_table: {first row, rows of x from there, group, unused} per 128 positions
  int G;
  __device__ __forceinline__ RowSlot operator()(int64_t c) const {
    const int4 tile = __ldg(tiles + (c >> 7));
    const int local = static_cast<int>(c & 127);
    const bool valid = local < tile.y;
    return RowSlot{int64_t(tile.x) + local, valid && tile.z < G, valid, c};
  }
};

// GroupedRows: the rows of x. A row's scale row is pos128[g] + (its index in group g), group g found by a binary
// search of the ends (log2 G loads, L1 hits); rows past the last group keep theirs after pos128[G] (zero data and
// scales). The group table's launch zeroes the scale buffer first, so padding scale rows are never visited. Where they
// outnumber the rows (decode: 33280 scale rows for 512 rows in 256 groups) this is far faster than writing them in
// the kernel 4 bytes at a time into the swizzled layout (H100, K = 7168: 512 rows in 256 groups 76 -> 13.4 us per
// call, the zeroing included); with few of them (16384 rows in 64 groups: 24576 scale rows) the searches and the
// zeroing cost more (144 -> 158 us, measured with a memset in place of the zeroing blocks), hence GroupedScaleRows
// there.
struct GroupedRows {
  static constexpr int kMaxThreadsLog2 = 7;  // as GroupedScaleRows (not re-measured for this mapping)
  static constexpr bool kPaddingZeroed = true;
  Table tb;
  int64_t T;
  __device__ __forceinline__ RowSlot operator()(int64_t c) const {
    const int g = group_of_row(tb, c);
    const int64_t scale_row = __ldg(tb.pos128 + g) + (c - group_start(tb, g));  // g = G: rows past the last group
    return RowSlot{c, g < tb.G, c < T, scale_row};
  }
};

template <Format F, typename T, bool ROW, bool COL, bool SR = false, bool CAST_T = false>
int launch_grouped_tiles(const GQuantParams& p, cudaStream_t stream) {
  const int64_t tiles_m = ceil_div(p.space, kTileM), tiles = tiles_m * p.tiles_k;
  if (tiles <= 0) return 0;
  if constexpr (CAST_T && sizeof(T) == 2) {  // (fp32 inputs: two tiles' values do not fit in 64 registers)
    // the one-tile kernel also runs kColumnwiseBlocks CTAs per SM: past one wave of it, two tiles
    if (tiles > int64_t{kColumnwiseBlocks} * device_sms()) {
      const int64_t pairs = tiles_m * ceil_div(p.tiles_k, int64_t{2});
      grouped_quantize_kernel<F, T, ROW, COL, SR, CAST_T, 2><<<static_cast<unsigned>(pairs), kThreads, 0, stream>>>(p);
      return static_cast<int>(cudaGetLastError());
    }
  }
  grouped_quantize_kernel<F, T, ROW, COL, SR, CAST_T><<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(p);
  return static_cast<int>(cudaGetLastError());
}

inline constexpr int kBadArgs = static_cast<int>(cudaErrorInvalidValue);

// FP8: rowwise [T, K] (q_row) and/or the wgrad-layout columnwise copy [K, W] (q_col).
// token: amax per row (rowwise) and per (group, column) (columnwise); else per group.
// col_group_rows = n > 0: q_col is stacked W^T [G * K, n] (every group n rows: T = W = G * n, n % 16 == 0).
// amax_given (token = 0, delayed scaling): g_amax holds the amax to scale from (no stats pass); amax_out [G], or null,
// is zeroed, then receives each group's max|x| from the quantize pass.
template <typename T>
int launch_fp8_grouped(const void* x, int64_t T_, int64_t K, const int* offsets, int G, int* table, int token,
                       float* g_amax, float* row_amax, float* gcol_amax, uint8_t* q_row, float* sinv_row,
                       uint8_t* q_col, int64_t W, float* sinv_col, int64_t col_group_rows, cudaStream_t stream,
                       int amax_given = 0, float* amax_out = nullptr) {
  if (K % 16 != 0 || (!q_row && !q_col) || G <= 0 || (q_col && W % 16 != 0)) return kBadArgs;
  if (col_group_rows && (!q_col || col_group_rows % 16 != 0 || W != G * col_group_rows || T_ != W)) return kBadArgs;
  if ((amax_given && (token || !g_amax)) || (amax_out && !amax_given)) return kBadArgs;
  if (token && !q_col)  // per-token rows: one kernel (quantize_rows_kernel); no group table, no stats pass, and
    // row_amax only if given (the kernel keeps each row's amax in registers; null: not written)
    return launch_fp8_token_rows<T>(x, T_, K, q_row, sinv_row, row_amax, stream, offsets, G);
  if (!table || (token ? ((q_row && !row_amax) || (q_col && !gcol_amax)) : !g_amax)) return kBadArgs;
  int err = launch_setup_and_stats<T>(x, T_, K, offsets, G, table, token || amax_given ? nullptr : g_amax,
                                      token && q_row ? row_amax : nullptr, token && q_col ? gcol_amax : nullptr,
                                      stream, amax_out);
  if (err) return err;
  const Table tb = make_table(table, G);
  GQuantParams p{};
  p.amax_out = amax_out;
  p.x = x, p.T = T_, p.K = K, p.tiles_k = ceil_div(K, kTileK), p.tb = tb;
  p.q_row = q_row, p.amax_row = token ? row_amax : g_amax, p.row_token = token;
  p.q_col = q_col, p.W = W, p.col_group_rows = col_group_rows, p.amax_col = token ? gcol_amax : g_amax;
  p.col_token = token;
  if (q_row) p.g_row = sinv_row, p.g_row_amax = token ? row_amax : g_amax, p.n_g_row = token ? T_ : G;
  if (q_col) p.g_col = sinv_col, p.g_col_amax = token ? gcol_amax : g_amax, p.n_g_col = token ? G * K : G;
  if (q_col) {  // positions = wgrad columns; the rows past the last group follow pos16[G]
    p.pos = tb.pos16, p.space = W;
    if (!token)  // both copies scaled from g_amax: the rowwise bytes transposed
      return q_row ? launch_grouped_tiles<Format::kFP8, T, true, true, false, true>(p, stream)
                   : launch_grouped_tiles<Format::kFP8, T, false, true, false, true>(p, stream);
    return q_row ? launch_grouped_tiles<Format::kFP8, T, true, true>(p, stream)
                 : launch_grouped_tiles<Format::kFP8, T, false, true>(p, stream);
  }
  p.pos = nullptr, p.space = T_;
  return launch_grouped_tiles<Format::kFP8, T, true, false>(p, stream);
}

template <typename T, bool RHT, bool SR>
int launch_wgrad(const GWgradParams& p, cudaStream_t stream) {
  const int64_t tiles = (p.space / kTileM) * p.tiles_k;
  nvfp4_wgrad_kernel<T, RHT, SR><<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(p);
  return static_cast<int>(cudaGetLastError());
}

// NVFP4 rowwise [T, K/2] with scales grouped along M (space = scale rows of the buffer) and/or
// the wgrad-layout columnwise copy. Amax scratch: g_amax [G] (tensor scaling: the rowwise amax and,
// without rht, the columnwise one), row_amax [T] (token, rowwise), col_amax (the columnwise amax
// when it is not g_amax: [G, K] for token, [G] for tensor with rht). rht: the columnwise copy is
// RHT-transformed (its amax from a stats pass over the transformed groups); sr: stochastic rounding
// of both copies with Philox (seed, offset), or with the pair read from seed_device (sr_seed).
template <typename T>
int launch_nvfp4_grouped(const void* x, int64_t T_, int64_t K, const int* offsets, int G, int* table, int token,
                         float* g_amax, float* row_amax, float* col_amax, uint8_t* q_row, uint8_t* s_row,
                         int64_t scale_rows, void* exact_row, float* alpha_row, uint8_t* q_col, int64_t W,
                         uint8_t* s_col, int64_t cb_total, float* alpha_col, int rht, int sr, uint64_t seed,
                         uint64_t offset,
                         const uint64_t* seed_device, cudaStream_t stream) {
  if (K % 16 != 0 || (!q_row && !q_col) || G <= 0 || scale_rows % 128 != 0 || (q_col && W % 16 != 0) ||
      (rht && !q_col) || (exact_row && !q_row))
    return kBadArgs;
  const bool own_col_amax = q_col && (token || rht);  // the columnwise amax lives in col_amax
  const bool need_g_amax = !token && (q_row || !own_col_amax);  // not for an RHT columnwise-only call
  if ((token && q_row && !row_amax) || (own_col_amax && !col_amax) || (need_g_amax && !g_amax)) return kBadArgs;
  if (token && !q_col) {  // per-token rows: one quantize_rows_kernel (no stats pass) after the group table, over the
    // rows with the scales zeroed in the table's launch where padding scale rows are at least as many as the rows
    // (GroupedRows), else over every scale row of the layout after the tile table (GroupedScaleRows)
    if (scale_rows >= 2 * T_) {
      const int64_t bytes = scale_rows * ceil_div(K / 16, 4) * 4;  // whole 512-byte atoms
      const int64_t zero_blocks = std::min<int64_t>(ceil_div(bytes, 16 * kSetupThreads), 256);
      group_table_kernel<><<<static_cast<unsigned>(1 + zero_blocks), kSetupThreads, 0, stream>>>(
          offsets, G, static_cast<int>(T_), table, s_row, bytes);
      const int e = static_cast<int>(cudaGetLastError());
      if (e) return e;
      return launch_nvfp4_token_rows<T>(x, T_, K, q_row, s_row, exact_row, alpha_row, row_amax, T_,
                                        GroupedRows{make_table(table, G), T_}, sr, seed, offset, seed_device, stream);
    }
    int e = launch_group_table(offsets, G, static_cast<int>(T_), table, stream);
    if (e) return e;
    if ((e = launch_tile_table(make_table(table, G), T_, scale_rows, tile_table(table, G), stream))) return e;
    return launch_nvfp4_token_rows<T>(x, T_, K, q_row, s_row, exact_row, alpha_row, row_amax, scale_rows,
                                      GroupedScaleRows{tile_table(table, G), G}, sr, seed, offset, seed_device, stream);
  }
  int err = launch_setup_and_stats<T>(x, T_, K, offsets, G, table, need_g_amax ? g_amax : nullptr,
                                      token && q_row ? row_amax : nullptr,
                                      own_col_amax && !rht ? col_amax : nullptr, stream);
  if (err) return err;
  const Table tb = make_table(table, G);
  if (q_row) {
    GQuantParams p{};
    p.x = x, p.T = T_, p.K = K, p.tiles_k = ceil_div(K, kTileK), p.tb = tb;
    p.pos = tb.pos128, p.space = scale_rows, p.tiles = tile_table(table, G);
    if ((err = launch_tile_table(tb, T_, scale_rows, tile_table(table, G), stream))) return err;
    p.q_row = q_row, p.s_row = s_row, p.exact_row = exact_row, p.cp_row = ceil_div(K / 16, 4) * 4;
    p.amax_row = token ? row_amax : g_amax, p.row_token = token;
    p.g_row = alpha_row, p.g_row_amax = p.amax_row, p.n_g_row = token ? T_ : G;
    p.seed = seed, p.offset = offset, p.seed_device = seed_device;
    err = sr ? launch_grouped_tiles<Format::kNVFP4, T, true, false, true>(p, stream)
             : launch_grouped_tiles<Format::kNVFP4, T, true, false, false>(p, stream);
    if (err) return err;
  }
  if (q_col) {
    GWgradParams p{};
    p.x = x, p.T = T_, p.K = K, p.tb = tb;
    p.rp = ceil_div(K, 128) * 128;
    p.q_col = q_col, p.W = W, p.s_col = s_col, p.cb_total = cb_total;
    p.space = ceil_div(16 * cb_total + W, kTileM) * kTileM;
    p.amax_col = own_col_amax ? col_amax : g_amax, p.col_token = token;
    p.g_col = alpha_col, p.g_col_amax = p.amax_col, p.n_g_col = token ? G * K : G;
    p.seed = seed, p.offset = offset, p.seed_device = seed_device;
    if (rht) {  // the transformed data's amax: tiles up to pos64[G] (the rest exit at once)
      if ((err = memset_f32(col_amax, token ? G * K : G, stream))) return err;
      p.rht_amax = col_amax;
      p.tiles_k = ceil_div(K, kTileK);
      const int64_t tiles = ceil_div(static_cast<int64_t>(T_) + 63 * G, kTileM) * p.tiles_k;
      wgrad_rht_stats_kernel<T><<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(p);
      if ((err = static_cast<int>(cudaGetLastError()))) return err;
    }
    p.tiles_k = p.rp / kTileK;
    if (rht) err = sr ? launch_wgrad<T, true, true>(p, stream) : launch_wgrad<T, true, false>(p, stream);
    else err = sr ? launch_wgrad<T, false, true>(p, stream) : launch_wgrad<T, false, false>(p, stream);
  }
  return err;
}

// MXFP8 rowwise with scales grouped along M (no amax pass).
template <typename T>
int launch_mxfp8_grouped(const void* x, int64_t T_, int64_t K, const int* offsets, int G, int* table,
                         uint8_t* q_row, uint8_t* s_row, int64_t scale_rows, cudaStream_t stream) {
  if (K % 32 != 0 || !q_row || G <= 0 || scale_rows % 128 != 0) return kBadArgs;
  int err = launch_setup_and_stats<T>(x, T_, K, offsets, G, table, nullptr, nullptr, nullptr, stream);
  if (err) return err;
  const Table tb = make_table(table, G);
  GQuantParams p{};
  p.x = x, p.T = T_, p.K = K, p.tiles_k = 2 * ceil_div(K, 128), p.tb = tb;
  p.pos = tb.pos128, p.space = scale_rows, p.tiles = tile_table(table, G);
  if ((err = launch_tile_table(tb, T_, scale_rows, tile_table(table, G), stream))) return err;
  p.q_row = q_row, p.s_row = s_row, p.cp_row = ceil_div(K / 32, 4) * 4;
  return launch_grouped_tiles<Format::kMXFP8, T, true, false>(p, stream);
}

// ---------------------------------------------------------------------------
// 5. the rows past the groups of a grouped GEMM's output
// ---------------------------------------------------------------------------

// Rows [end, rows) of out [rows, row_bytes] set to zero, end = the clamped running maximum of the offsets
// (group_table_kernel's ends[G-1]): the rows a grouped GEMM does not write (group_offsets::zero_rows_past_groups, which
// the FP8 grouped GEMM's setup launch also runs when asked to). With no such rows the launch is all it costs.
__global__ void __launch_bounds__(kThreads) zero_rows_past_groups_kernel(uint8_t* out, int64_t rows, int64_t row_bytes,
                                                                    const int* offsets, int G) {
  group_offsets::zero_rows_past_groups(reinterpret_cast<char*>(out), rows, row_bytes, offsets, G,
                                       int64_t(blockIdx.x) * blockDim.x + threadIdx.x, int64_t(gridDim.x) * blockDim.x);
}

inline int launch_zero_rows_past_groups(void* out, int64_t rows, int64_t row_bytes, const int* offsets, int G,
                                        cudaStream_t stream) {
  if (!out || !offsets || rows < 0 || row_bytes < 0 || row_bytes % 16 != 0 || G <= 0 ||
      reinterpret_cast<uintptr_t>(out) % 16 != 0)
    return kBadArgs;
  const int64_t words = rows * row_bytes / 16;
  if (words == 0) return 0;
  const int blocks = wave_grid<zero_rows_past_groups_kernel>(ceil_div(words, kThreads));
  zero_rows_past_groups_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<uint8_t*>(out), rows, row_bytes, offsets, G);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace grouped
}  // namespace quant
}  // namespace scalemm
