// scalemm quantization kernels for Hopper: NVFP4 (tensor / token scaling, RHT, SR), FP8
// current scaling and MXFP8, rowwise [M, K] and columnwise (x.T, [K, M]) copies written
// from ONE read of x. Numerics: quant_numerics.cuh (bit-exact with py_api/reference/).
//
// Two kernels, launched in this order:
// 1. amax_stats_kernel (only when an amax is not given): one read of x, producing any of
//    the tensor amax, the tensor amax of RHT(x), per-row amax [M] and per-column amax [K]
//    (of RHT(x) with rht). A thread owns 16 rows x 8 columns (16 independent 16-byte
//    loads in flight); a CTA owns 128 x 256 tiles in a grid-stride loop; results reach
//    global memory through atomicMax on float bits (NaN-propagating, buffers zeroed by a
//    memset in the same launch sequence).
// 2. quantize_tile_kernel: one CTA per 128 x 64 tile of x (grid x: tile column, y: tile row;
//    256 threads, 4 x 16-byte loads each, 8 for fp32). The rowwise copy is quantized straight from registers (a thread owns
//    one 16-element block of two rows; a 32-block is two adjacent threads); for the
//    columnwise copy the tile goes through a
//    32 KB fp32 shared-memory tile (XOR-swizzled, conflict-free both ways) and each thread
//    quantizes 16 (or 32) consecutive rows of one column. Every output byte is written by
//    this kernel, scale padding included: the tile grid covers the padded scale
//    matrices (rows up to Rp, columns up to Cp) and blocks outside x get scale byte 0.
//    FP8 with one scale for both copies (tensor scaling) keeps the rowwise e4m3 bytes in an
//    8 KB byte tile instead and writes the columnwise copy as those bytes transposed
//    (read_byte_columns).
//    FP8 delayed scaling (the amax given, so no step 1): it also writes max|x| to amax_out
//    (reduced per CTA in shared memory, one atomic per CTA).
// The rowwise copy alone with per-token amaxes to compute takes neither: quantize_rows_kernel
// reads each row twice (its amax, then its blocks, the second read from L1 / L2) in one launch.
#pragma once

#include <algorithm>

#include "scalemm/group_offsets.cuh"
#include "scalemm/quant_numerics.cuh"
#include "scalemm/sm90/nvfp4_numerics.cuh"  // exact_bf16_word: the exact rows beside an NVFP4 rowwise copy

namespace scalemm {
namespace quant {

enum class Format { kNVFP4, kFP8, kMXFP8 };

constexpr int kThreads = 256;
constexpr int kTileM = 128;  // rows of x per quantize tile
constexpr int kTileK = 64;   // columns of x per quantize tile
constexpr int kStatsRows = 16;    // rows per thread in the stats kernel (= one RHT chunk)
constexpr int kStatsTileK = 256;  // columns per stats tile (32 lanes x 8)
constexpr int kStatsTileM = kStatsRows * (kThreads / 32);

// ---------------------------------------------------------------------------
// amax statistics
// ---------------------------------------------------------------------------

struct StatsParams {
  const void* x;
  int64_t M, K;
  int64_t tiles_k, num_tiles;
  float* amax;      // max |x| over the tensor, or nullptr
  float* amax_rht;  // max |RHT(x)| over the tensor (bf16-rounded values), or nullptr
  float* row_amax;  // [M] max |x| per row, or nullptr
  float* col_amax;  // [K] max per column of x (of RHT(x) when RHT), or nullptr
};

template <typename T, bool RHT>
__global__ void __launch_bounds__(kThreads) amax_stats_kernel(const StatsParams p) {
  __shared__ unsigned col_red[kStatsTileK];
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const T* x = static_cast<const T*>(p.x);
  const bool want_rows = p.row_amax != nullptr, want_cols = p.col_amax != nullptr;
  float acc = 0.0f, acc_rht = 0.0f;

  for (int64_t tile = blockIdx.x; tile < p.num_tiles; tile += gridDim.x) {
    const int64_t tm = tile / p.tiles_k, tk = tile - tm * p.tiles_k;
    const int64_t r0 = tm * kStatsTileM + kStatsRows * warp;
    const int64_t col = tk * kStatsTileK + 8 * lane;
    const bool col_ok = col < p.K;
    Raw8<T> raw[kStatsRows];
#pragma unroll
    for (int i = 0; i < kStatsRows; ++i) {
      const bool ok = col_ok && r0 + i < p.M;
      load8(raw[i], x + (ok ? (r0 + i) * p.K + col : 0), ok);
    }

    float rowmax[kStatsRows];
    float colmax[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) colmax[j] = 0.0f;
#pragma unroll
    for (int i = 0; i < kStatsRows; ++i) {
      float v[8];
      to_float8(raw[i], v);
      rowmax[i] = absmax_nan<8>(v);
      acc = max_nan(acc, rowmax[i]);
      if constexpr (!RHT) {
#pragma unroll
        for (int j = 0; j < 8; ++j) colmax[j] = max_nan(colmax[j], fabsf(v[j]));
      }
    }
    if constexpr (RHT) {  // 16 consecutive rows of each column = one RHT chunk
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        float y[16];
#pragma unroll
        for (int i = 0; i < kStatsRows; ++i) {
          float v[8];
          to_float8(raw[i], v);
          y[i] = v[j];
        }
        rht16(y);
        colmax[j] = absmax_nan<16>(y);
        acc_rht = max_nan(acc_rht, colmax[j]);
      }
    }

    if (want_rows) {  // all 32 lanes hold the same 16 rows: butterfly, then lane i owns row i
      float mine = 0.0f;
#pragma unroll
      for (int i = 0; i < kStatsRows; ++i) {
        float m = rowmax[i];
#pragma unroll
        for (int s = 16; s > 0; s >>= 1) m = max_nan(m, __shfl_xor_sync(kFullMask, m, s));
        if (lane == i) mine = m;
      }
      if (lane < kStatsRows && r0 + lane < p.M) atomic_max_nonneg(p.row_amax + r0 + lane, mine);
    }
    if (want_cols) {  // the 8 warps share the tile's 256 columns
      col_red[t] = 0u;
      __syncthreads();
#pragma unroll
      for (int j = 0; j < 8; ++j) atomicMax(&col_red[8 * lane + j], __float_as_uint(colmax[j]) & 0x7fffffffu);
      __syncthreads();
      const int64_t c = tk * kStatsTileK + t;
      if (c < p.K) atomicMax(reinterpret_cast<unsigned*>(p.col_amax + c), col_red[t]);
      __syncthreads();
    }
  }

#pragma unroll
  for (int s = 16; s > 0; s >>= 1) {
    acc = max_nan(acc, __shfl_xor_sync(kFullMask, acc, s));
    acc_rht = max_nan(acc_rht, __shfl_xor_sync(kFullMask, acc_rht, s));
  }
  if (lane == 0) {
    if (p.amax != nullptr) atomic_max_nonneg(p.amax, acc);
    if (RHT && p.amax_rht != nullptr) atomic_max_nonneg(p.amax_rht, acc_rht);
  }
}

// ---------------------------------------------------------------------------
// the quantize tile kernel
// ---------------------------------------------------------------------------

struct TileParams {
  const void* x;
  int64_t M, K;
  int64_t tiles_k;  // grid: x = tile column, y = tile row - tm0 (launches of <= 65535 tile rows)
  int64_t tm0;
  // rowwise copy [M, K]: data, swizzled scales (Rp x Cp), global decode scale, amax input
  uint8_t* q_row;
  uint8_t* s_row;
  void* exact_row;  // NVFP4: bf16 [M, K] exact rows (store_exact_block), or null
  float* g_row;  // NVFP4: alpha = S_dec; FP8: scale_inv; MXFP8: unused
  const float* amax_row;
  int row_token;
  int64_t rp_row, cp_row;
  // columnwise copy [K, M]
  uint8_t* q_col;
  uint8_t* s_col;
  float* g_col;
  const float* amax_col;
  int col_token;
  int64_t rp_col, cp_col;
  uint64_t seed, offset;  // stochastic rounding
  const uint64_t* seed_device;  // or null: sr_seed / sr_offset
  float* amax_out;  // FP8 delayed scaling: max|x| of the tile's elements (atomic maximum, 0-d), or null
};

// FP8 delayed scaling: a CTA's maxima of |x| per key (the group; 0 in the dense kernel) into out[key]. The keys
// [first, first + kAmaxSlots) (rows are sorted by group, so a tile rarely spans more) are reduced in the CTA's shared
// slots and written with one global atomic each by tile_amax_flush; other keys go to global memory directly. (One
// atomic per warp and key on the same few addresses made the quantize pass ~2x slower on an H100.)
constexpr int kAmaxSlots = 4;

__device__ __forceinline__ void tile_amax_init(unsigned* slots) {  // then a __syncthreads before tile_amax_add
  if (threadIdx.x < kAmaxSlots) slots[threadIdx.x] = 0u;
}

// Every lane of the warp calls it; lanes with key < 0 take no part.
__device__ __forceinline__ void tile_amax_add(unsigned* slots, int first, float* out, int key, float m) {
  const unsigned peers = __match_any_sync(kFullMask, key);
  const unsigned bits = __reduce_max_sync(peers, __float_as_uint(m) & 0x7fffffffu);
  if (key < 0 || static_cast<int>(threadIdx.x & 31) != __ffs(peers) - 1) return;
  const int slot = key - first;
  if (slot >= 0 && slot < kAmaxSlots) atomicMax(slots + slot, bits);
  else atomic_max_nonneg(out + key, __uint_as_float(bits));
}

// After a __syncthreads that follows every tile_amax_add: one global atomic per slot that saw a value.
__device__ __forceinline__ void tile_amax_flush(const unsigned* slots, int first, int keys, float* out) {
  const int t = threadIdx.x;
  if (t < kAmaxSlots && first + t < keys && slots[t] != 0u) atomic_max_nonneg(out + first + t, __uint_as_float(slots[t]));
}

// fp32 index of element (r, c) of the 128 x 64 shared tile: 16 rows of 16-byte chunks, the
// chunk index XOR-swizzled so that both phases are bank-conflict-free:
// - row phase (a warp stores one 16-byte chunk j of its 16-element block for 8 consecutive
//   rows x 4 blocks): (c>>4)&3 spreads the 4 blocks of a row over 4 bank groups, r&1 puts
//   odd rows on the other 4;
// - column phase (a warp reads 8 consecutive columns of 4 rows 16 or 32 apart): f(r) takes 4
//   distinct values on those rows, so 2*f(r) spreads them over 4 chunk pairs.
__device__ __forceinline__ int smem_index(int r, int c) {
  const int f = ((r >> 4) ^ (r >> 5)) & 3;
  const int chunk = (c >> 2) ^ ((c >> 4) & 3) ^ (f << 1) ^ ((r & 1) << 2);
  return r * kTileK + (chunk << 2) + (c & 3);
}

// Reads rows r0 .. r0+N-1 (r0 a multiple of 16, N = 16 or 32) of column c from the shared
// tile. Within 16 rows the swizzle only depends on the row's parity, so two base offsets
// cover them and every read is a base + immediate offset.
template <int N>
__device__ __forceinline__ void read_column(const float* tile, int r0, int c, float (&v)[N]) {
#pragma unroll
  for (int h = 0; h < N / 16; ++h) {
    const float* even = tile + smem_index(r0 + 16 * h, c);
    const float* odd = tile + smem_index(r0 + 16 * h + 1, c) - kTileK;
#pragma unroll
    for (int j = 0; j < 16; ++j) v[16 * h + j] = ((j & 1) ? odd : even)[j * kTileK];
  }
}

// Row rl, columns 16*blk .. 16*blk+15 of the shared tile: four 16-byte stores.
__device__ __forceinline__ void store_tile_row(float* tile, int rl, int blk, const float (&v)[16]) {
#pragma unroll
  for (int j = 0; j < 4; ++j)
    *reinterpret_cast<float4*>(tile + smem_index(rl, 16 * blk + 4 * j)) =
        make_float4(v[4 * j], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3]);
}

// FP8 with one scale for both copies (per-tensor / per-group scaling): the columnwise copy is the rowwise copy's
// e4m3 bytes transposed, so the tile can hold the bytes (128 x 64 = 8 KB) instead of fp32 values and the column
// phase moves bytes: no second scaling and conversion, a quarter of the shared-memory traffic (the cast-then-
// transpose of TransformerEngine's FP8 kernels). Row r's four 16-byte chunks are stored with chunk c at
// c ^ ((r >> 2) & 3): the row phase (a quarter-warp stores rows r, r + 1, four chunks each) is conflict-free, and
// a column-phase read (16 lanes, rows 4l + j of one 8-byte column half) spreads over four chunks.
__device__ __forceinline__ int byte_tile_offset(int r, int chunk) { return r * kTileK + 16 * (chunk ^ ((r >> 2) & 3)); }

// Row rl, columns 16*blk .. 16*blk+15 of the byte tile: the 16 e4m3 bytes of that block.
__device__ __forceinline__ void store_byte_tile_row(uint8_t* tile, int rl, int blk, uint4 q) {
  *reinterpret_cast<uint4*>(tile + byte_tile_offset(rl, blk)) = q;
}

// a[j] = bytes (row j, columns 0..3) -> o[c] = bytes (rows 0..3, column c), row 0 lowest
__device__ __forceinline__ void transpose_bytes4x4(uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                   uint32_t* o) {
  const uint32_t t0 = __byte_perm(a0, a1, 0x5140), t1 = __byte_perm(a0, a1, 0x7362);
  const uint32_t t2 = __byte_perm(a2, a3, 0x5140), t3 = __byte_perm(a2, a3, 0x7362);
  o[0] = __byte_perm(t0, t2, 0x5410), o[1] = __byte_perm(t0, t2, 0x7632);
  o[2] = __byte_perm(t1, t3, 0x5410), o[3] = __byte_perm(t1, t3, 0x7632);
}

// The byte tile's column phase: warp w (of 8) takes tile columns 8w .. 8w+7, lane l tile rows 4l .. 4l+3;
// out[b] = the bytes of column 8w + b at those rows, row 4l lowest (four consecutive positions of the
// columnwise copy's row k0 + 8w + b, so a warp's store of one out[b] is 128 contiguous bytes).
__device__ __forceinline__ void read_byte_columns(const uint8_t* tile, int warp, int lane, uint32_t (&out)[8]) {
  static_assert(kThreads == 256 && kTileM == 128 && kTileK == 64, "8 warps x 8 columns, 32 lanes x 4 rows");
  uint2 r[4];
#pragma unroll
  for (int j = 0; j < 4; ++j)
    r[j] = *reinterpret_cast<const uint2*>(tile + byte_tile_offset(4 * lane + j, warp >> 1) + 8 * (warp & 1));
  transpose_bytes4x4(r[0].x, r[1].x, r[2].x, r[3].x, out);
  transpose_bytes4x4(r[0].y, r[1].y, r[2].y, r[3].y, out + 4);
}

// The scale bytes of this lane and the next three as one word (this lane's byte lowest): four
// consecutive bytes of the swizzled layout, stored by the first of the four lanes. Every lane of
// the warp must call it (shuffles).
__device__ __forceinline__ uint32_t gather4_bytes(uint32_t b) {
  const uint32_t b1 = __shfl_down_sync(kFullMask, b, 1);
  const uint32_t b2 = __shfl_down_sync(kFullMask, b, 2);
  const uint32_t b3 = __shfl_down_sync(kFullMask, b, 3);
  return b | (b1 << 8) | (b2 << 16) | (b3 << 24);
}

template <typename T>
__device__ __forceinline__ void load16(Raw8<T> (&r)[2], const T* p, bool ok) {
  load8(r[0], p, ok);
  load8(r[1], p + 8, ok);
}

template <typename T>
__device__ __forceinline__ void to_float16(const Raw8<T> (&r)[2], float (&f)[16]) {
  float a[8], b[8];
  to_float8(r[0], a);
  to_float8(r[1], b);
#pragma unroll
  for (int i = 0; i < 8; ++i) f[i] = a[i], f[8 + i] = b[i];
}

// 16 consecutive elements at p as floats (zeros where !ok): one block's load where nothing else is in flight
template <typename T>
__device__ __forceinline__ void load_floats16(float (&f)[16], const T* p, bool ok) {
  Raw8<T> raw[2];
  load16(raw, p, ok);
  to_float16(raw, f);
}

__device__ __forceinline__ uint32_t e4m3x4(float a, float b, float c, float d, float scale) {
  return e4m3x2_satfinite(__fmul_rn(a, scale), __fmul_rn(b, scale)) |
         (e4m3x2_satfinite(__fmul_rn(c, scale), __fmul_rn(d, scale)) << 16);
}

// 16 consecutive values -> 16 e4m3 bytes of fl(v * scale)
__device__ __forceinline__ uint4 e4m3x16(const float* v, float scale) {
  return make_uint4(e4m3x4(v[0], v[1], v[2], v[3], scale), e4m3x4(v[4], v[5], v[6], v[7], scale),
                    e4m3x4(v[8], v[9], v[10], v[11], scale), e4m3x4(v[12], v[13], v[14], v[15], scale));
}

// NVFP4 block of 16 values: (scale byte, packed codes). SR: the block is elements 16n .. 16n+15
// of its copy, rounded with the Philox bits of (seed, offset).
template <bool SR>
__device__ __forceinline__ uint2 nvfp4_block(const float (&v)[16], const Nvfp4Global& g, uint64_t n,
                                             uint64_t seed, uint64_t offset, bool in, uint32_t& sb) {
  const float bm = absmax_nan<16>(v);
  float mult;
  sb = nvfp4_block_scale(bm, g, mult);
  if (!in) sb = 0u;  // padding and blocks outside x: scale 0 (never written as data)
  uint4 rnd = make_uint4(0u, 0u, 0u, 0u);
  if constexpr (SR) rnd = sr_words(n, seed, offset);
  return nvfp4_pack16<SR>(v, mult, rnd, bm);
}

// The exact rows beside an NVFP4 rowwise copy (abi.h exact_row): a 16-element block's value(code) x s in bf16, the
// bits the W4A4 GEMMs' decode pass writes (sm90::exact_bf16_word), so that a GEMM on them needs no pass. q: the
// block's 16 packed codes, sb: its scale byte (a block outside x: zeros).
__device__ __forceinline__ void store_exact_block(void* exact, int64_t row, int64_t K, int64_t col, uint2 q,
                                                  uint32_t sb) {
  uint4* dst = reinterpret_cast<uint4*>(static_cast<uint16_t*>(exact) + row * K + col);
  dst[0] = sm90::exact_bf16_word(q.x, sb);
  dst[1] = sm90::exact_bf16_word(q.y, sb);
}

// One thread's 16-element block of the rowwise copy: row m, columns col..col+15 (block `blk`
// of the tile's 4). The 4 threads of a tile row are 4 adjacent lanes.
template <Format F, bool SR>
__device__ __forceinline__ void quantize_row_block(const TileParams& p, const float (&v)[16], int64_t m,
                                                   int64_t col, int blk, int64_t k0, bool first_tile_k,
                                                   const GlobalScale& g_tensor) {
  const bool in = m < p.M && col < p.K;
  GlobalScale gs = g_tensor;
  if (F != Format::kMXFP8 && p.row_token)  // uniform branch: per-row global scale
    gs = global_scale<F == Format::kNVFP4>(m < p.M ? __ldg(p.amax_row + m) : 0.0f);
  if constexpr (F == Format::kNVFP4) {
    uint32_t sb;
    const uint2 q = nvfp4_block<SR>(v, gs.nv, static_cast<uint64_t>(m) * static_cast<uint64_t>(p.K / 16) + col / 16,
                                    sr_seed(p.seed, p.seed_device), sr_offset(p.offset, p.seed_device), in, sb);
    if (in) *reinterpret_cast<uint2*>(p.q_row + m * (p.K / 2) + col / 2) = q;
    if (in && p.exact_row != nullptr) store_exact_block(p.exact_row, m, p.K, col, q, sb);
    const uint32_t word = gather4_bytes(sb);
    const int64_t c = k0 / 16;  // the tile row's 4 scales are one aligned 32-bit store
    if (blk == 0 && m < p.rp_row && c < p.cp_row)
      *reinterpret_cast<uint32_t*>(p.s_row + swizzle_offset(m, c, p.cp_row)) = word;
    if (p.row_token && first_tile_k && blk == 0 && m < p.M) p.g_row[m] = gs.nv.s_dec;
  } else if constexpr (F == Format::kFP8) {
    if (in) *reinterpret_cast<uint4*>(p.q_row + m * p.K + col) = e4m3x16(v, gs.scale);
    if (p.row_token && first_tile_k && blk == 0 && m < p.M) p.g_row[m] = gs.scale_inv;
  } else {  // MXFP8: a 32-block is 2 adjacent threads
    float bm = absmax_nan<16>(v);
    bm = max_nan(bm, __shfl_xor_sync(kFullMask, bm, 1));
    uint32_t b = mxfp8_scale_byte(bm);
    if (!in) b = 0u;
    if (in) *reinterpret_cast<uint4*>(p.q_row + m * p.K + col) = e4m3x16(v, mxfp8_inv_scale(b));
    const uint32_t b1 = __shfl_down_sync(kFullMask, b, 2);
    const int64_t c = k0 / 32;  // even: the two scales are one aligned 16-bit store
    if (blk == 0 && m < p.rp_row && c < p.cp_row)
      *reinterpret_cast<uint16_t*>(p.s_row + swizzle_offset(m, c, p.cp_row)) = static_cast<uint16_t>(b | (b1 << 8));
  }
}

// The columnwise copy from the shared tile: thread (warp w, lane l) owns column
// kl = 8w + l/4 and row group l%4 (+4): 16 rows (NVFP4, FP8) or 32 rows (MXFP8).
template <Format F, bool RHT, bool SR>
__device__ __forceinline__ void quantize_col(const TileParams& p, const float* tile, int64_t m0, int64_t k0,
                                             bool first_tile_m, const GlobalScale& g_tensor) {
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int kl = 8 * warp + (lane >> 2), mq = lane & 3;
  const int64_t k = k0 + kl;
  if constexpr (F == Format::kNVFP4 || F == Format::kFP8) {
    GlobalScale gs = g_tensor;
    if (p.col_token)  // uniform branch: per-column global scale
      gs = global_scale<F == Format::kNVFP4>(k < p.K ? __ldg(p.amax_col + k) : 0.0f);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int mb = mq + 4 * i;
      const int64_t m = m0 + 16 * mb;
      const bool in = k < p.K && m < p.M;
      float v[16];
      read_column<16>(tile, 16 * mb, kl, v);
      if constexpr (F == Format::kNVFP4) {
        if constexpr (RHT) rht16(v);
        uint32_t sb;
        const uint2 q = nvfp4_block<SR>(v, gs.nv, static_cast<uint64_t>(k) * static_cast<uint64_t>(p.M / 16) + m / 16,
                                        sr_seed(p.seed, p.seed_device), sr_offset(p.offset, p.seed_device), in, sb);
        if (in) *reinterpret_cast<uint2*>(p.q_col + k * (p.M / 2) + m / 2) = q;
        const uint32_t word = gather4_bytes(sb);
        const int64_t c = m0 / 16 + 4 * i;
        if (mq == 0 && k < p.rp_col && c < p.cp_col)
          *reinterpret_cast<uint32_t*>(p.s_col + swizzle_offset(k, c, p.cp_col)) = word;
      } else {
        if (in) *reinterpret_cast<uint4*>(p.q_col + k * p.M + m) = e4m3x16(v, gs.scale);
      }
    }
    if (p.col_token && first_tile_m && mq == 0 && k < p.K) {
      if constexpr (F == Format::kNVFP4) p.g_col[k] = gs.nv.s_dec;
      else p.g_col[k] = gs.scale_inv;
    }
  } else {  // MXFP8: 32 rows per thread
    const int64_t m = m0 + 32 * mq;
    const bool in = k < p.K && m < p.M;
    float v[32];
    read_column<32>(tile, 32 * mq, kl, v);
    uint32_t b = mxfp8_scale_byte(absmax_nan<32>(v));
    if (!in) b = 0u;
    const float inv = mxfp8_inv_scale(b);
    if (in) {
      uint4* dst = reinterpret_cast<uint4*>(p.q_col + k * p.M + m);
      dst[0] = e4m3x16(v, inv);
      dst[1] = e4m3x16(v + 16, inv);
    }
    const uint32_t word = gather4_bytes(b);
    const int64_t c = m0 / 32;
    if (mq == 0 && k < p.rp_col && c < p.cp_col)
      *reinterpret_cast<uint32_t*>(p.s_col + swizzle_offset(k, c, p.cp_col)) = word;
  }
}

// CAST_T (FP8, COL, tensor scaling with amax_row = amax_col): the columnwise copy is the rowwise bytes transposed
// through a byte tile (read_byte_columns); else the columnwise copy is made from an fp32 tile.
template <Format F, typename T, bool ROW, bool COL, bool RHT, bool SR, bool CAST_T = false>
__global__ void __launch_bounds__(kThreads, SR ? 4 : 5) quantize_tile_kernel(const TileParams p) {
  static_assert(!CAST_T || (F == Format::kFP8 && COL), "the byte tile is FP8's columnwise copy");
  __shared__ __align__(16) float tile[COL && !CAST_T ? kTileM * kTileK : 4];
  __shared__ __align__(16) uint8_t byte_tile[CAST_T ? kTileM * kTileK : 16];
  __shared__ GlobalScale g_shared[2];
  __shared__ unsigned amax_slots[F == Format::kFP8 ? kAmaxSlots : 1];  // FP8 delayed scaling (p.amax_out)
  const int t = threadIdx.x;
  const int64_t tm = p.tm0 + blockIdx.y, tk = blockIdx.x;
  const int64_t m0 = tm * kTileM, k0 = tk * kTileK;
  const T* x = static_cast<const T*>(p.x);

  // phase 1: rows r4 and r4 + 64, one 16-element block (columns 16*blk ..) per row; all
  // four 16-byte loads (eight for fp32) are issued before any use
  const int blk = t & 3, r4 = t >> 2;
  const int64_t col = k0 + 16 * blk;
  const bool col_ok = col < p.K;
  Raw8<T> raw[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int64_t m = m0 + r4 + 64 * i;
    const bool ok = col_ok && m < p.M;
    load16(raw[i], x + (ok ? m * p.K + col : 0), ok);
  }
  // per-tensor global scales (the token paths derive theirs per row / column): one thread
  // computes them while the loads are in flight and shares them (every warp computing them cost
  // ~4% of the kernel's instructions). The condition is uniform over the CTA.
  if constexpr (F == Format::kFP8) {
    if (p.amax_out != nullptr) {
      tile_amax_init(amax_slots);
      __syncthreads();
    }
  }
  constexpr bool kGlobal = F != Format::kMXFP8;
  GlobalScale g_row{}, g_col{};
  if (kGlobal && ((ROW && !p.row_token) || (COL && !p.col_token))) {
    if (t == 0) {
      g_shared[0] = global_scale<F == Format::kNVFP4>((ROW && !p.row_token) ? __ldg(p.amax_row) : 0.0f);
      g_shared[1] = global_scale<F == Format::kNVFP4>((COL && !p.col_token) ? __ldg(p.amax_col) : 0.0f);
    }
    __syncthreads();
    g_row = g_shared[0], g_col = g_shared[1];
  }

#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float v[16];
    to_float16(raw[i], v);
    const int rl = r4 + 64 * i;
    if constexpr (CAST_T) {  // quantize_row_block's FP8 bytes, kept for the columnwise copy too (g_col = g_row)
      const uint4 q = e4m3x16(v, g_col.scale);
      if (ROW && m0 + rl < p.M && col_ok) *reinterpret_cast<uint4*>(p.q_row + (m0 + rl) * p.K + col) = q;
      store_byte_tile_row(byte_tile, rl, blk, q);
    } else {
      if constexpr (ROW) quantize_row_block<F, SR>(p, v, m0 + rl, col, blk, k0, tk == 0, g_row);
      if constexpr (COL) store_tile_row(tile, rl, blk, v);
    }
    if constexpr (F == Format::kFP8)  // delayed scaling (uniform branch); elements past M or K were loaded as zeros
      if (p.amax_out != nullptr) tile_amax_add(amax_slots, 0, p.amax_out, 0, absmax_nan<16>(v));
  }
  if constexpr (CAST_T) {
    __syncthreads();
    const int lane = t & 31, warp = t >> 5;
    uint32_t w[8];
    read_byte_columns(byte_tile, warp, lane, w);
    const int64_t m = m0 + 4 * lane;
#pragma unroll
    for (int b = 0; b < 8; ++b) {
      const int64_t k = k0 + 8 * warp + b;
      if (k < p.K && m < p.M) *reinterpret_cast<uint32_t*>(p.q_col + k * p.M + m) = w[b];
    }
  } else if constexpr (COL) {
    __syncthreads();
    quantize_col<F, RHT, SR>(p, tile, m0, k0, tm == 0, g_col);
  }
  if constexpr (F == Format::kFP8) {
    if (p.amax_out != nullptr) {
      if constexpr (!COL) __syncthreads();  // (COL: the tile's barrier above already follows every add)
      tile_amax_flush(amax_slots, 0, 1, p.amax_out);
    }
  }

  if (tm == 0 && tk == 0 && t == 0) {  // per-tensor decode scales
    if constexpr (kGlobal) {
      constexpr bool kNv = F == Format::kNVFP4;
      if (ROW && !p.row_token) p.g_row[0] = kNv ? g_row.nv.s_dec : g_row.scale_inv;
      if (COL && !p.col_token) p.g_col[0] = kNv ? g_col.nv.s_dec : g_col.scale_inv;
    }
  }
}

// ---------------------------------------------------------------------------
// the rowwise copy with per-token scaling in one kernel
// ---------------------------------------------------------------------------
// Per-token scaling needs each row's amax before the row is quantized. For the rowwise copy alone (no columnwise copy,
// whose per-column amax needs every row first) one kernel does both: a group of 2^tpr_log2 threads (32..1024, whole
// warps; launch_rows picks) owns a position of the launch (a row, or a padding scale row of the dense NVFP4 layout),
// reads its row of x once for the amax (max over the threads: shuffles, then shared memory and shuffles across the
// group's warps), and reads it again, now from L1 / L2, to quantize it with the tile kernels' block functions. Against
// the stats kernel + memset + tile kernel it saves launches (decode) and one read of x from memory (prefill), and it
// writes the same bytes: the amax is a maximum, so the order of the reduction does not matter (max.NaN gives the
// canonical NaN either way). Every output byte is written: the dense NVFP4 scale rows at every position (padding rows
// and columns up to Cp as zero bytes); the grouped layout's scale buffer is zeroed by its launcher first, and each row
// writes its scale row (Rows::kPaddingZeroed).

// What position c of a launch holds.
struct RowSlot {
  int64_t row;       // row of x
  bool quantize;     // the row is quantized (else, where written, its data is zeros and its amax 0)
  bool write;        // row < M: its data, decode scale and amax are written here
  int64_t scale_row; // NVFP4: the row of the swizzled scale layout its block scales go to
};

// Positions are rows (NVFP4: the scale rows of the dense layout, Rp = M rounded up to 128; those past M are padding,
// written as zero scale rows here). offsets (grouped FP8; else nullptr): int32 [groups] cumulative row ends, clamped
// to [0, M] as the group table clamps them; rows past the largest end belong to no group (zero data, amax 0). Every
// warp reads the offsets itself: a few hundred ints against the row it quantizes.
struct DenseRows {
  static constexpr int kMaxThreadsLog2 = 8;  // up to 256 threads per row (H100: fastest from 1 to 16384 rows)
  static constexpr bool kPaddingZeroed = false;  // every position's scale row is written here, padding as zeros
  int64_t M;
  const int* offsets;
  int groups;
  __device__ __forceinline__ RowSlot operator()(int64_t c) const {
    const int64_t last = offsets != nullptr ? group_offsets::warp_groups_end(offsets, groups, M) : M;
    return RowSlot{c, c < last, c < M, c};
  }
};

template <class Rows>
struct RowsParams {
  const void* x;
  int64_t M, K;
  int64_t positions;  // of the launch: FP8 M; NVFP4 dense Rp (padding rows included), grouped T
  int tpr_log2;       // threads per position = 2^tpr_log2, 5..10 (at most the CTA's threads)
  uint8_t* q;
  uint8_t* s;         // NVFP4 swizzled scales (scale rows x cp)
  void* exact;        // NVFP4: bf16 [M, K] exact rows (store_exact_block), or null
  float* g;           // [M] NVFP4 alpha = S_dec, FP8 scale_inv
  float* amax;        // [M] the rows' amax, or nullptr
  int64_t cp;
  uint64_t seed, offset;
  const uint64_t* seed_device;
  Rows rows;          // position -> RowSlot
};

// A CTA of the rows kernel: kThreads threads, or one row's threads where a row takes more, up to kRowsMaxThreads
// (launch_rows).
constexpr int kRowsMaxThreads = 1024;

template <Format F, typename T, bool SR, class Rows, int kCta>
__global__ void __launch_bounds__(kCta) quantize_rows_kernel(const RowsParams<Rows> p) {
  static_assert(F == Format::kNVFP4 || F == Format::kFP8, "per-token scaling: NVFP4 and FP8");
  __shared__ float warp_amax[kCta / 32];
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int tpr = 1 << p.tpr_log2, j = t & (tpr - 1);
  const int64_t c = int64_t(blockIdx.x) * (kCta >> p.tpr_log2) + (t >> p.tpr_log2);
  const RowSlot r = p.rows(c);  // uniform over the position's threads
  const int64_t m = r.row, blocks = p.K / 16;
  const T* xr = static_cast<const T*>(p.x) + (r.quantize ? m * p.K : 0);

  float a = 0.0f;
  if (r.quantize) {
#pragma unroll 4
    for (int64_t b = j; b < blocks; b += tpr) {
      float v[16];
      load_floats16(v, xr + 16 * b, true);
      a = max_nan(a, absmax_nan<16>(v));
    }
  }
#pragma unroll
  for (int sh = 16; sh > 0; sh >>= 1) a = max_nan(a, __shfl_xor_sync(kFullMask, a, sh));
  if (tpr > 32) {  // uniform: the group's warps share their maxima (up to 32: one more round of shuffles)
    if (lane == 0) warp_amax[warp] = a;
    __syncthreads();
    const int warps = tpr >> 5, w0 = warp & ~(warps - 1);
    a = lane < warps ? warp_amax[w0 + lane] : 0.0f;
#pragma unroll
    for (int sh = 16; sh > 0; sh >>= 1) a = max_nan(a, __shfl_xor_sync(kFullMask, a, sh));
  }
  constexpr bool kNv = F == Format::kNVFP4;
  const GlobalScale gs = global_scale<kNv>(a);
  if (r.write && j == 0) {
    p.g[m] = kNv ? gs.nv.s_dec : gs.scale_inv;
    if (p.amax != nullptr) p.amax[m] = a;
  }

  if constexpr (kNv) {  // every block of the padded scale row; the 4 scales of 4 adjacent lanes are one store
    // Rows::kPaddingZeroed: the launcher zeroed the scales, so only rows write theirs (a position past the rows
    // returns here: uniform per warp, and no barrier follows)
    if (Rows::kPaddingZeroed && !r.write) return;
    const uint64_t seed = sr_seed(p.seed, p.seed_device), offset = sr_offset(p.offset, p.seed_device);
    for (int64_t b0 = 0; b0 < p.cp; b0 += tpr) {  // uniform trip count: gather4_bytes shuffles the whole warp
      const int64_t b = b0 + j;
      const bool in = r.quantize && b < blocks;
      float v[16];
      load_floats16(v, xr + 16 * (in ? b : 0), in);
      uint32_t sb = 0u;
      uint2 q = make_uint2(0u, 0u);
      if (in) q = nvfp4_block<SR>(v, gs.nv, static_cast<uint64_t>(m) * static_cast<uint64_t>(blocks) + b, seed,
                                  offset, in, sb);
      if (r.write && b < blocks) {
        *reinterpret_cast<uint2*>(p.q + m * (p.K / 2) + 8 * b) = q;
        if (p.exact != nullptr) store_exact_block(p.exact, m, p.K, 16 * b, q, sb);
      }
      const uint32_t word = gather4_bytes(sb);
      if ((j & 3) == 0 && c < p.positions && b < p.cp)
        *reinterpret_cast<uint32_t*>(p.s + swizzle_offset(r.scale_row, b, p.cp)) = word;
    }
  } else if (r.quantize) {
#pragma unroll 4
    for (int64_t b = j; b < blocks; b += tpr) {
      float v[16];
      load_floats16(v, xr + 16 * b, true);
      *reinterpret_cast<uint4*>(p.q + m * p.K + 16 * b) = e4m3x16(v, gs.scale);
    }
  } else if (r.write) {  // a row past the last group
    for (int64_t b = j; b < blocks; b += tpr) *reinterpret_cast<uint4*>(p.q + m * p.K + 16 * b) = make_uint4(0, 0, 0, 0);
  }
}

// ---------------------------------------------------------------------------
// host launchers (return 0 or a cudaError_t; CUDA-graph capturable: no allocation, no sync)
// ---------------------------------------------------------------------------

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

constexpr int kMaxDevices = 64;

// SMs of the current device (queried once per device: slow next to a small launch).
inline int device_sms() {
  static int sms[kMaxDevices] = {};  // benign race: every writer stores the same value
  int dev = 0;
  cudaGetDevice(&dev);
  int n = dev < kMaxDevices ? sms[dev] : 0;
  if (n == 0) {
    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
    if (n <= 0) n = 1;
    if (dev < kMaxDevices) sms[dev] = n;
  }
  return n;
}

// Grid of a kernel that loops over its tiles (the stats kernels): one wave of resident CTAs of
// kThreads threads, at most num_tiles. The occupancy query is done once per device and kernel
// (it is slow next to a small launch).
template <auto Kernel>
inline int wave_grid(int64_t num_tiles) {
  static int wave[kMaxDevices] = {};  // benign race: every writer stores the same value
  int dev = 0;
  cudaGetDevice(&dev);
  int g = dev < kMaxDevices ? wave[dev] : 0;
  if (g == 0) {
    int per_sm = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, Kernel, kThreads, 0);
    g = device_sms() * (per_sm > 0 ? per_sm : 1);
    if (dev < kMaxDevices) wave[dev] = g;
  }
  return static_cast<int>(num_tiles < g ? num_tiles : g);
}

// Zeroes the non-null outputs, then one read of x fills them (see amax_stats_kernel).
template <typename T>
int launch_amax_stats(const void* x, int64_t M, int64_t K, float* amax, float* amax_rht, float* row_amax,
                      float* col_amax, int rht, cudaStream_t stream) {
  cudaError_t err = cudaSuccess;
  if (amax) err = cudaMemsetAsync(amax, 0, sizeof(float), stream);
  if (!err && amax_rht) err = cudaMemsetAsync(amax_rht, 0, sizeof(float), stream);
  if (!err && row_amax && M > 0) err = cudaMemsetAsync(row_amax, 0, sizeof(float) * M, stream);
  if (!err && col_amax && K > 0) err = cudaMemsetAsync(col_amax, 0, sizeof(float) * K, stream);
  if (err) return static_cast<int>(err);
  if (M <= 0 || K <= 0) return 0;
  StatsParams p{x, M, K, ceil_div(K, kStatsTileK), 0, amax, amax_rht, row_amax, col_amax};
  p.num_tiles = ceil_div(M, kStatsTileM) * p.tiles_k;
  if (rht)
    amax_stats_kernel<T, true><<<wave_grid<amax_stats_kernel<T, true>>(p.num_tiles), kThreads, 0, stream>>>(p);
  else
    amax_stats_kernel<T, false><<<wave_grid<amax_stats_kernel<T, false>>(p.num_tiles), kThreads, 0, stream>>>(p);
  return static_cast<int>(cudaGetLastError());
}

template <Format F, typename T, bool ROW, bool COL, bool RHT, bool SR, bool CAST_T = false>
int launch_tiles(TileParams p, cudaStream_t stream) {
  constexpr int64_t kMaxGridY = 65535;
  const int64_t tiles_m = ceil_div(p.M, kTileM);
  if (p.tiles_k > INT32_MAX) return static_cast<int>(cudaErrorInvalidValue);
  for (p.tm0 = 0; p.tm0 < tiles_m && p.tiles_k > 0; p.tm0 += kMaxGridY) {
    const dim3 grid(static_cast<unsigned>(p.tiles_k), static_cast<unsigned>(std::min(kMaxGridY, tiles_m - p.tm0)));
    quantize_tile_kernel<F, T, ROW, COL, RHT, SR, CAST_T><<<grid, kThreads, 0, stream>>>(p);
    if (const cudaError_t err = cudaGetLastError()) return static_cast<int>(err);
  }
  return 0;
}

template <Format F, typename T, bool RHT, bool SR>
int launch_tiles_rc(const TileParams& p, cudaStream_t stream) {
  const bool row = p.q_row != nullptr, col = p.q_col != nullptr;
  if (row && col) return launch_tiles<F, T, true, true, RHT, SR>(p, stream);
  if (col) return launch_tiles<F, T, false, true, RHT, SR>(p, stream);
  if (RHT) return static_cast<int>(cudaErrorInvalidValue);  // RHT needs the columnwise copy
  return launch_tiles<F, T, true, false, false, SR>(p, stream);
}

// Tile columns: enough to cover K and the padded scale columns of every copy produced.
inline int64_t tiles_k_for(Format f, int64_t K, bool col) {
  if (f == Format::kMXFP8 || (f == Format::kNVFP4 && col)) return 2 * ceil_div(K, 128);
  return ceil_div(K, kTileK);
}

// The rowwise copy with per-token scaling, amax included (quantize_rows_kernel): threads per position the fewest
// whole warps that give each thread one 16-element block, at most 2^Rows::kMaxThreadsLog2 (longer rows: several
// blocks per thread, which is faster where rows fill the GPU), or up to kRowsMaxThreads, in CTAs of one position
// each, where the launch's CTAs then still fit in kRowsMaxThreads threads per SM (decode: a thread's blocks are a
// serial chain of latencies, so a row of K = 14336 at 256 threads took four; two rows in one CTA of 1024 threads ran
// 0.75-0.9x of 256 threads at K = 7168 / 8192 on an H200).
template <Format F, typename T, bool SR, class Rows, int kCta>
int launch_rows_cta(const RowsParams<Rows>& p, cudaStream_t stream) {
  const int64_t grid = ceil_div(p.positions, int64_t(kCta >> p.tpr_log2));
  if (grid > INT32_MAX) return static_cast<int>(cudaErrorInvalidValue);
  if (grid > 0) quantize_rows_kernel<F, T, SR, Rows, kCta><<<static_cast<unsigned>(grid), kCta, 0, stream>>>(p);
  return static_cast<int>(cudaGetLastError());
}

template <Format F, typename T, bool SR, class Rows>
int launch_rows(RowsParams<Rows> p, cudaStream_t stream) {
  int one_block = 5;  // log2 of the threads that give each thread one block
  while ((int64_t(16) << one_block) < p.K && (1 << one_block) < kRowsMaxThreads) ++one_block;
  p.tpr_log2 = std::min(one_block, Rows::kMaxThreadsLog2);
  const int64_t one_wave = int64_t(device_sms()) * kRowsMaxThreads;  // threads: one CTA of kRowsMaxThreads per SM
  while (p.tpr_log2 < one_block && p.positions * (int64_t(2) << p.tpr_log2) <= one_wave) ++p.tpr_log2;
  static_assert(kThreads == 256 && kRowsMaxThreads == 1024 && Rows::kMaxThreadsLog2 <= 8, "CTAs of 256, 512, 1024");
  if (p.tpr_log2 == 10) return launch_rows_cta<F, T, SR, Rows, 1024>(p, stream);
  if (p.tpr_log2 == 9) return launch_rows_cta<F, T, SR, Rows, 512>(p, stream);
  return launch_rows_cta<F, T, SR, Rows, kThreads>(p, stream);
}

// NVFP4 rows: `positions` launch positions (dense: Rp scale rows; grouped: the T rows), `rows` maps them.
template <typename T, class Rows>
int launch_nvfp4_token_rows(const void* x, int64_t M, int64_t K, uint8_t* q, uint8_t* s, void* exact, float* alpha,
                            float* amax, int64_t positions, Rows rows, int sr, uint64_t seed, uint64_t offset,
                            const uint64_t* seed_device, cudaStream_t stream) {
  if (K % 16 != 0) return static_cast<int>(cudaErrorInvalidValue);
  RowsParams<Rows> p{};
  p.x = x, p.M = M, p.K = K, p.q = q, p.s = s, p.exact = exact, p.g = alpha, p.amax = amax;
  p.positions = positions, p.cp = ceil_div(K / 16, 4) * 4, p.rows = rows;
  p.seed = seed, p.offset = offset, p.seed_device = seed_device;
  return sr ? launch_rows<Format::kNVFP4, T, true>(p, stream) : launch_rows<Format::kNVFP4, T, false>(p, stream);
}

// offsets / groups: the grouped quantizer's (rows past the last group: zero data), or nullptr / 0.
template <typename T>
int launch_fp8_token_rows(const void* x, int64_t M, int64_t K, uint8_t* q, float* scale_inv, float* amax,
                          cudaStream_t stream, const int* offsets = nullptr, int groups = 0) {
  if (K % 16 != 0) return static_cast<int>(cudaErrorInvalidValue);
  RowsParams<DenseRows> p{};
  p.x = x, p.M = M, p.K = K, p.positions = M, p.q = q, p.g = scale_inv, p.amax = amax;
  p.rows = DenseRows{M, offsets, groups};
  return launch_rows<Format::kFP8, T, false>(p, stream);
}

template <typename T>
int launch_nvfp4(const void* x, int64_t M, int64_t K, uint8_t* q_row, uint8_t* s_row, void* exact_row,
                 float* alpha_row, const float* amax_row, int row_token, uint8_t* q_col, uint8_t* s_col,
                 float* alpha_col, const float* amax_col, int col_token, int rht, int sr, uint64_t seed,
                 uint64_t offset, const uint64_t* seed_device, cudaStream_t stream) {
  if (K % 16 != 0 || (q_col && M % 16 != 0) || (!q_row && !q_col) || (exact_row && !q_row))
    return static_cast<int>(cudaErrorInvalidValue);
  TileParams p{};
  p.x = x, p.M = M, p.K = K, p.tiles_k = tiles_k_for(Format::kNVFP4, K, q_col != nullptr);
  p.q_row = q_row, p.s_row = s_row, p.exact_row = exact_row, p.g_row = alpha_row, p.amax_row = amax_row;
  p.row_token = row_token, p.rp_row = ceil_div(M, 128) * 128, p.cp_row = ceil_div(K / 16, 4) * 4;
  p.q_col = q_col, p.s_col = s_col, p.g_col = alpha_col, p.amax_col = amax_col, p.col_token = col_token;
  p.rp_col = ceil_div(K, 128) * 128, p.cp_col = ceil_div(M / 16, 4) * 4;
  p.seed = seed, p.offset = offset, p.seed_device = seed_device;
  if (rht) {
    return sr ? launch_tiles_rc<Format::kNVFP4, T, true, true>(p, stream)
              : launch_tiles_rc<Format::kNVFP4, T, true, false>(p, stream);
  }
  return sr ? launch_tiles_rc<Format::kNVFP4, T, false, true>(p, stream)
            : launch_tiles_rc<Format::kNVFP4, T, false, false>(p, stream);
}

// amax_out (tensor scaling; delayed scaling's amax of x): zeroed here, then max|x| by the copies' pass; or null.
template <typename T>
int launch_fp8(const void* x, int64_t M, int64_t K, uint8_t* q_row, float* scale_inv_row, const float* amax_row,
               int row_token, uint8_t* q_col, float* scale_inv_col, const float* amax_col, int col_token,
               cudaStream_t stream, float* amax_out = nullptr) {
  if (K % 16 != 0 || (q_col && M % 16 != 0) || (!q_row && !q_col)) return static_cast<int>(cudaErrorInvalidValue);
  if (amax_out && (row_token || col_token)) return static_cast<int>(cudaErrorInvalidValue);
  if (amax_out)
    if (const cudaError_t err = cudaMemsetAsync(amax_out, 0, sizeof(float), stream)) return static_cast<int>(err);
  TileParams p{};
  p.x = x, p.M = M, p.K = K, p.tiles_k = tiles_k_for(Format::kFP8, K, q_col != nullptr);
  p.q_row = q_row, p.g_row = scale_inv_row, p.amax_row = amax_row, p.row_token = row_token;
  p.q_col = q_col, p.g_col = scale_inv_col, p.amax_col = amax_col, p.col_token = col_token;
  p.amax_out = amax_out;
  if (q_col && !row_token && !col_token && amax_row == amax_col)  // one scale: the rowwise bytes transposed
    return q_row ? launch_tiles<Format::kFP8, T, true, true, false, false, true>(p, stream)
                 : launch_tiles<Format::kFP8, T, false, true, false, false, true>(p, stream);
  return launch_tiles_rc<Format::kFP8, T, false, false>(p, stream);
}

template <typename T>
int launch_mxfp8(const void* x, int64_t M, int64_t K, uint8_t* q_row, uint8_t* s_row, uint8_t* q_col,
                 uint8_t* s_col, cudaStream_t stream) {
  if (K % 32 != 0 || (q_col && M % 32 != 0) || (!q_row && !q_col)) return static_cast<int>(cudaErrorInvalidValue);
  TileParams p{};
  p.x = x, p.M = M, p.K = K, p.tiles_k = tiles_k_for(Format::kMXFP8, K, q_col != nullptr);
  p.q_row = q_row, p.s_row = s_row, p.rp_row = ceil_div(M, 128) * 128, p.cp_row = ceil_div(K / 32, 4) * 4;
  p.q_col = q_col, p.s_col = s_col, p.rp_col = ceil_div(K, 128) * 128, p.cp_col = ceil_div(M / 32, 4) * 4;
  return launch_tiles_rc<Format::kMXFP8, T, false, false>(p, stream);
}

}  // namespace quant
}  // namespace scalemm
