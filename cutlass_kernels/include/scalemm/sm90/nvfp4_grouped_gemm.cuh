// scalemm: SM90 grouped (MoE) NVFP4-weight GEMM fed by device-side offsets.
//
// out[rows of group g] = Evt(x[rows of g] @ dequant(W_g)^T), x [T, K] bf16/fp16 with rows sorted by
// group, W stacked NVFP4 expert weights [G, N, K] (prepared, scales batched), offsets int32 [G]
// cumulative row ends (torch._grouped_mm's `offs`). A one-CTA setup kernel clamps the offsets into
// [0, T] and makes them non-decreasing (a running max: the rule scalemm's grouped quantizers use),
// then writes CUTLASS's per-group problem shapes, row starts, output pointers and strides and the
// epilogue leaves' per-group pointers, all on the device: nothing is read on the host and the call
// is CUDA-graph capturable. Every group is computed swapped (D_g^T = W_g x_g^T, see nvfp4_gemm.cuh).
#pragma once

#include <cstdint>
#include <cuda_runtime.h>

#include "cutlass/cutlass.h"
#include "cute/tensor.hpp"
#include "cutlass/numeric_types.h"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"
#include "cutlass/epilogue/thread/activation.h"
#include "cutlass/util/packed_stride.hpp"

#include "scalemm/abi.h"
#include "scalemm/group_offsets.cuh"
#include "scalemm/sm90/launch.cuh"
#include "scalemm/sm90/nvfp4_mainloop.hpp"

namespace scalemm::sm90 {

constexpr int kGroupSetupThreads = 1024;

template <class Problem, class StrideD>
__global__ void __launch_bounds__(kGroupSetupThreads)
nvfp4_grouped_setup(Nvfp4GroupedGemmArgs const a, int elem_bytes_d, Problem* problems, int* row_start, void** ptr_d,
                    StrideD* stride_d, void const** leaf_ptrs, char* clear, int64_t clear_bytes) {
  group_offsets::zero_bytes(clear, clear_bytes, threadIdx.x, kGroupSetupThreads);  // see workspace_bytes_to_zero
  __shared__ int64_t scan_scratch[kGroupSetupThreads / 32];
  __shared__ int64_t ends[kGroupSetupThreads];
  int const* offsets = static_cast<int const*>(a.offsets);
  int const t = threadIdx.x;
  int64_t carry = 0;  // the end of the last group of the previous chunk
  for (int64_t base = 0; base < a.groups; base += kGroupSetupThreads) {
    int64_t const g = base + t;
    int64_t e = g < a.groups ? group_offsets::clamp_offset(__ldg(offsets + g), a.tokens) : 0;
    e = group_offsets::block_scan<kGroupSetupThreads>(e, group_offsets::MaxOp{}, scan_scratch).inclusive;
    e = e > carry ? e : carry;
    ends[t] = e;
    __syncthreads();
    int64_t const start = t > 0 ? ends[t - 1] : carry;
    if (g < a.groups) {
      int const m = int(e - start);
      problems[g] = {int(a.n), m, int(a.k)};
      row_start[g] = int(start);
      ptr_d[g] = static_cast<char*>(a.d) + start * a.n * elem_bytes_d;
      stride_d[g] = cutlass::make_cute_packed_stride(StrideD{}, cute::make_shape(int(a.n), m, 1));
      for (int i = 0; i < a.leaf_count; ++i) {
        char const* lb = static_cast<char const*>(a.leaf_base[i]);
        int64_t off = 0;
        switch (a.leaf_mode[i]) {
          case kLeafPerRow: off = start; break;
          case kLeafPerGroupVec: off = g * a.leaf_group_stride[i]; break;
          case kLeafPerGroup: off = g; break;
          default: off = 0;
        }
        leaf_ptrs[int64_t(i) * a.groups + g] = lb ? lb + off * a.leaf_elem_bytes[i] : nullptr;
      }
    }
    carry = ends[kGroupSetupThreads - 1];
    __syncthreads();  // ends is rewritten by the next chunk
  }
}

inline bool leaf_mode_is_vector(int64_t mode) {
  return mode == kLeafPerRow || mode == kLeafPerGroupVec || mode == kLeafShared;
}

template <class ElementB, class ElementD, class TileShape, class ClusterShape, class KernelSchedule,
          class EpilogueSchedule, class Evt>
struct Nvfp4GroupedGemm {
  using LayoutD = cutlass::layout::ColumnMajor;  // D_g^T column-major == D_g row-major
  static constexpr int kAlignD = 128 / cutlass::sizeof_bits<ElementD>::value;
  using ProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;
  using Problem = typename ProblemShape::UnderlyingProblemShape;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD*, kAlignD, ElementD, LayoutD*,
      kAlignD, EpilogueSchedule, Evt>::CollectiveOp;

  static constexpr int kStages = nvfp4_stages<TileShape, ElementB>(
      int(sizeof(typename CollectiveEpilogue::SharedStorage)) +
      int(sizeof(typename CollectiveEpilogue::TensorMapStorage)) + 2048);
  static_assert(kStages >= 2, "tile too large for two pipeline stages");

  using CollectiveMainloop =
      Nvfp4GroupedMainloop<TileShape, ClusterShape, KernelSchedule, ElementB, kStages>;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using StrideD = typename Kernel::InternalStrideD;

  static constexpr int64_t align256(int64_t x) { return (x + 255) / 256 * 256; }

  // Device arrays the setup kernel writes, carved from the front of the caller's workspace.
  struct Arrays {
    Problem* problems; int* row_start; void** ptr_d; StrideD* stride_d; void const** leaf_ptrs;
    char* rest; int64_t bytes;
  };
  static Arrays carve(void* workspace, int64_t G) {
    Arrays r;
    char* p = static_cast<char*>(workspace);
    auto take = [&](int64_t n) { char* q = p; p += align256(n); return q; };
    r.problems = reinterpret_cast<Problem*>(take(sizeof(Problem) * G));
    r.row_start = reinterpret_cast<int*>(take(sizeof(int) * G));
    r.ptr_d = reinterpret_cast<void**>(take(sizeof(void*) * G));
    r.stride_d = reinterpret_cast<StrideD*>(take(sizeof(StrideD) * G));
    r.leaf_ptrs = reinterpret_cast<void const**>(take(sizeof(void*) * G * kMaxLeaves));
    r.bytes = p - static_cast<char*>(workspace);
    r.rest = p;
    return r;
  }

  template <class MakeEvtArgs>
  static int run(Nvfp4GroupedGemmArgs const& a, MakeEvtArgs make_evt_args) {
    cudaError_t err = cudaSetDevice(int(a.device));
    if (err != cudaSuccess) return static_cast<int>(err);
    if (a.leaf_count > kMaxLeaves || a.groups <= 0) return kBadArgument;
    Arrays arr = carve(a.workspace, a.groups);
    if (arr.bytes > a.workspace_bytes) return kWorkspaceTooSmall;
    cudaStream_t stream = static_cast<cudaStream_t>(a.stream);
    void const* leaf_arrays[kMaxLeaves];
    int64_t vec[kMaxLeaves];
    for (int i = 0; i < kMaxLeaves; ++i) {
      bool const present = i < a.leaf_count && a.leaf_mode[i] != kLeafNull;
      leaf_arrays[i] = present ? static_cast<void const*>(arr.leaf_ptrs + int64_t(i) * a.groups) : nullptr;
      vec[i] = i < a.leaf_count && leaf_mode_is_vector(a.leaf_mode[i]);
    }
    typename CollectiveMainloop::Arguments mainloop;
    auto& o = mainloop.operands;
    o.weight = static_cast<uint8_t const*>(a.weight);
    o.x = a.x;
    o.x_scales = static_cast<uint8_t const*>(a.x_scales);
    o.scales = static_cast<uint8_t const*>(a.weight_scales);
    o.n = a.n;
    o.k = a.k;
    o.weight_batches = a.groups;
    o.x_rows = a.tokens;
    o.k_pad = a.k_pad;
    o.scale_atoms_per_row_tile = a.scale_cols / 4;
    o.scale_batch_bytes = (a.n + kScaleAtomRows - 1) / kScaleAtomRows * kScaleAtomRows * a.scale_cols;
    mainloop.row_start = arr.row_start;
    mainloop.x_sf_offsets = static_cast<int const*>(a.x_sf_offsets);
    typename Gemm::Arguments args{cutlass::gemm::GemmUniversalMode::kGrouped,
                                  {int(a.groups), arr.problems, nullptr},  // problem shapes on the device only
                                  mainloop,
                                  {make_evt_args(leaf_arrays, vec), nullptr, arr.stride_d,
                                   reinterpret_cast<ElementD**>(arr.ptr_d), arr.stride_d},
                                  hardware_info(int(a.device))};
    int64_t const cutlass_bytes = static_cast<int64_t>(Gemm::get_workspace_size(args));
    if (cutlass_bytes > a.workspace_bytes - arr.bytes) return kWorkspaceTooSmall;
    nvfp4_grouped_setup<Problem, StrideD><<<1, kGroupSetupThreads, 0, stream>>>(
        a, int(sizeof(ElementD)), arr.problems, arr.row_start, arr.ptr_d, arr.stride_d, arr.leaf_ptrs, arr.rest,
        workspace_bytes_to_zero(cutlass_bytes));
    err = cudaGetLastError();
    if (err != cudaSuccess) return static_cast<int>(err);
    return launch<Gemm>(args, arr.rest, a.workspace_bytes - arr.bytes, stream);
  }
};

}  // namespace scalemm::sm90
