// SwiGLU, the activation between an MLP's (or MoE expert's) gate_up and down projections, forward and backward
// each as one memory-bound pass (scalemm.swiglu; reference: py_api/reference/activation.py, docs/training.md):
//   h [rows, 2I] = [gate | up] (torch's h.chunk(2, dim=-1)), out [rows, I] = silu(gate) * up,
//   dh = [dgate | dup] from dout [rows, I]: dup = dout * silu(gate), dgate = dout * up * s * (1 + gate * (1 - s)),
// with s = 1 / (1 + exp(-gate)) and silu(gate) = gate / (1 + exp(-gate)) (torch's formulas, so special values behave
// as torch's silu / silu_backward), everything in fp32 and each output rounded once to the tensors' dtype.
// torch's eager `F.silu(gate) * up` takes three passes forward (silu's read of a strided half of h, its write, the
// product) and four backward (two products, silu_backward, the cat of both halves), and rounds silu's output to the
// tensor dtype before the product.
#pragma once

#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <type_traits>

namespace scalemm::swiglu {

constexpr int kThreads = 256;

// One thread, one 16-byte vector (or one element where I is not a multiple of a vector), no launch bound: few
// registers, eight CTAs per SM. On the expert block's h [65536, 1536] on an H200 that ran at a copy's rate, 1.52x
// (forward) / 1.25x (backward) as fast as four vectors per thread at two CTAs per SM, 1.11x / 1.03-1.09x as fast as
// two vectors (perf/NOTES.md, fiftieth session; perf/results/h200/session50/call3).

// N consecutive elements held as one word: a uint4 for 16 bytes (one 16-byte load or store), else one T. get / set
// convert to / from fp32 (round to nearest even).
template <typename T, int N>
struct Pack {
  using Word = typename std::conditional<sizeof(T) * N == 16, uint4, T>::type;
  static_assert(sizeof(Word) == sizeof(T) * N, "a pack is 16 bytes or one element");
  Word w;
  __device__ __forceinline__ static Pack load(const T* p) { return Pack{__ldg(reinterpret_cast<const Word*>(p))}; }
  __device__ __forceinline__ void store(T* p) const {
    if constexpr (sizeof(Word) == 16)  // nvcc split a plain 16-byte store of this struct into four 4-byte ones
      asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(w.x), "r"(w.y), "r"(w.z), "r"(w.w)
                   : "memory");
    else
      *reinterpret_cast<Word*>(p) = w;
  }
  __device__ __forceinline__ float get(int i) const {
    const T v = reinterpret_cast<const T*>(&w)[i];
    if constexpr (std::is_same<T, float>::value) return v;
    else if constexpr (std::is_same<T, __nv_bfloat16>::value) return __bfloat162float(v);
    else return __half2float(v);
  }
  __device__ __forceinline__ void set(int i, float v) {
    T* e = reinterpret_cast<T*>(&w);
    if constexpr (std::is_same<T, float>::value) e[i] = v;
    else if constexpr (std::is_same<T, __nv_bfloat16>::value) e[i] = __float2bfloat16_rn(v);
    else e[i] = __float2half_rn(v);
  }
};

// One element's forward and backward, in torch's formulas (fp32; expf is CUDA's accurate exp, never __expf). The
// divisions are __fdividef (reciprocal then product, 2 ulp), not IEEE division's longer sequence: the kernels do
// ~20 instructions of arithmetic per element against 2-3 bytes moved. __fdividef returns 0 for denominators past
// 2^126, so below gate = -80 (rare: a divergent branch costs nothing) they are IEEE divisions, as torch's: tiny
// values, and 1 + exp(-gate) = inf past gate = -88.7 gives silu = -0 (times an infinite up: NaN, as torch).
constexpr float kLargeNegative = -80.0f;

__device__ __forceinline__ float sigmoid(float g) {
  const float den = 1.0f + expf(-g);
  return g < kLargeNegative ? __fdiv_rn(1.0f, den) : __fdividef(1.0f, den);
}

__device__ __forceinline__ float silu(float g) {
  const float den = 1.0f + expf(-g);
  return g < kLargeNegative ? __fdiv_rn(g, den) : __fdividef(g, den);
}

__device__ __forceinline__ void silu_mul_backward(float g, float u, float d, float& dg, float& du) {
  const float s = sigmoid(g);
  du = d * (g * s);
  dg = d * u * (s * (1.0f + g * (1.0f - s)));
}

// Rows of I elements, walked in packs of N (16 bytes where I % (16 / sizeof(T)) == 0 and the tensors are 16-byte
// aligned, else 1), n packs in all, one per thread; a pack's row is its index divided by the packs per row: a
// multiply-high by a magic number (Granlund-Montgomery, exact for every 32-bit dividend) where n < 2^32, else a
// 64-bit division.
struct Params {
  const void* h;     // [rows, 2I]
  const void* dout;  // [rows, I] (backward)
  void* out;         // forward: [rows, I]; backward: dh [rows, 2I]
  int64_t rows, inner;
  int64_t per_row, n;     // packs per row and in all
  uint32_t magic, shift;  // v / per_row = (umulhi(v, magic) + v) >> shift, for v < 2^32
};

// magic and shift for per_row >= 1: shift = ceil(log2(per_row)), magic = floor(2^32 (2^shift - d) / d) + 1
inline void set_divisor(Params& p, int64_t per_row) {
  p.per_row = per_row;
  uint32_t shift = 0;
  while ((int64_t(1) << shift) < per_row) ++shift;
  p.shift = shift;
  p.magic = per_row < (int64_t(1) << 32)
                ? uint32_t((uint64_t(1) << 32) * ((uint64_t(1) << shift) - uint64_t(per_row)) / uint64_t(per_row) + 1)
                : 0u;
}

// Element offsets of pack v in a [rows, I] tensor (out / dout) and in h's gate half ([rows, 2I]; up is I further).
template <int N>
__device__ __forceinline__ void pack_offsets(const Params& p, int64_t v, int64_t& in_out, int64_t& in_h) {
  int64_t r;
  if (p.n <= 0xffffffffLL) {
    const uint32_t v32 = uint32_t(v);
    r = int64_t((uint64_t(__umulhi(v32, p.magic)) + v32) >> p.shift);
  } else {
    r = v / p.per_row;
  }
  const int64_t c = (v - r * p.per_row) * N;
  in_out = r * p.inner + c;
  in_h = r * 2 * p.inner + c;
}

// One pack per thread: forward (out = silu(gate) * up) or BACKWARD (dh from h and dout).
template <typename T, int N, bool BACKWARD>
__global__ void __launch_bounds__(kThreads) swiglu_kernel(const Params p) {
  using P = Pack<T, N>;
  const int64_t v = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (v >= p.n) return;
  int64_t o, ih;
  pack_offsets<N>(p, v, o, ih);
  const T* h = static_cast<const T*>(p.h);
  const P g = P::load(h + ih), u = P::load(h + ih + p.inner);
  if constexpr (!BACKWARD) {
    P y;
#pragma unroll
    for (int i = 0; i < N; ++i) y.set(i, silu(g.get(i)) * u.get(i));
    y.store(static_cast<T*>(p.out) + o);
  } else {
    const P d = P::load(static_cast<const T*>(p.dout) + o);
    P dg, du;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      float a, b;
      silu_mul_backward(g.get(i), u.get(i), d.get(i), a, b);
      dg.set(i, a);
      du.set(i, b);
    }
    T* dh = static_cast<T*>(p.out);
    dg.store(dh + ih);
    du.store(dh + ih + p.inner);
  }
}

// One launch; 0 or a cudaError_t. vec: 16-byte packs (I a multiple of 16 / sizeof(T), every pointer 16-byte
// aligned: the caller's check, it knows the tensors).
template <typename T>
int launch(Params p, bool backward, bool vec, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  const int64_t per_row = vec ? p.inner / kVec : p.inner;
  p.n = p.rows * per_row;
  if (p.n == 0) return 0;
  set_divisor(p, per_row);
  const int64_t blocks = (p.n + kThreads - 1) / kThreads;
  if (blocks > 0x7fffffffLL) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(blocks));
  if (backward) {
    if (vec) swiglu_kernel<T, kVec, true><<<grid, kThreads, 0, stream>>>(p);
    else swiglu_kernel<T, 1, true><<<grid, kThreads, 0, stream>>>(p);
  } else {
    if (vec) swiglu_kernel<T, kVec, false><<<grid, kThreads, 0, stream>>>(p);
    else swiglu_kernel<T, 1, false><<<grid, kThreads, 0, stream>>>(p);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace scalemm::swiglu
