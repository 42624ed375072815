// scalemm: SM90 (Hopper) TMA warp-specialized GEMMs with an EVT epilogue.
//
// A [M,K] and B [N,K] are both K-major (B in nn.Linear weight layout, i.e. CUTLASS
// ColumnMajor KxN). D is [M,N] row-major, or, for the swap-AB form that computes
// D^T = B A^T for small M, the same memory seen as column-major [N,M].
#pragma once

#include <cstdint>
#include <cuda_runtime.h>

#include "cutlass/cutlass.h"
#include "cute/tensor.hpp"
#include "cutlass/numeric_types.h"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"
#include "cutlass/epilogue/thread/activation.h"
#include "cutlass/util/packed_stride.hpp"

#include "scalemm/abi.h"
#include "scalemm/sm90/fp8_promotion.hpp"
#include "scalemm/sm90/launch.cuh"

namespace scalemm {

template <class ElementA_, class ElementB_, class ElementD_, class LayoutD_, class TileShape_,
          class ClusterShape_, class MainloopSchedule, class EpilogueSchedule, class Evt,
          class ElementC_ = void, class TileScheduler = void>
struct Sm90Gemm {
  using ElementA = ElementA_;
  using ElementB = ElementB_;
  using ElementC = ElementC_;
  using ElementD = ElementD_;
  using LayoutA = cutlass::layout::RowMajor;     // K-major
  using LayoutB = cutlass::layout::ColumnMajor;  // K-major
  using LayoutD = LayoutD_;
  using TileShape = TileShape_;
  using ClusterShape = ClusterShape_;
  static constexpr int kAlignA = 128 / cutlass::sizeof_bits<ElementA>::value;
  static constexpr int kAlignB = 128 / cutlass::sizeof_bits<ElementB>::value;
  static constexpr int kAlignD = 128 / cutlass::sizeof_bits<ElementD>::value;
  using ElementCOrD = cute::conditional_t<cute::is_void_v<ElementC>, ElementD, ElementC>;
  static constexpr int kAlignC = 128 / cutlass::sizeof_bits<ElementCOrD>::value;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float,
      ElementC, LayoutD, kAlignC, ElementD, LayoutD, kAlignD, EpilogueSchedule, Evt>::CollectiveOp;

  // MainloopSchedule: a CUTLASS kernel schedule, or sm90::Fp8ChunkedPromotion<fast-accumulation
  // schedule, chunks> for scalemm's full-accumulation mainloop on CUTLASS's fast-accumulation
  // collective (scalemm/sm90/fp8_promotion.hpp).
  using CollectiveMainloop = sm90::mainloop_t<typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, LayoutA, kAlignA, ElementB,
      LayoutB, kAlignB, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      sm90::builder_schedule_t<MainloopSchedule>>::CollectiveOp, MainloopSchedule>;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>,
                                                      CollectiveMainloop, CollectiveEpilogue,
                                                      TileScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  static constexpr bool kStreamK = cute::is_same_v<TileScheduler, cutlass::gemm::StreamKScheduler>;
  using StrideA = typename Gemm::GemmKernel::StrideA;
  using StrideB = typename Gemm::GemmKernel::StrideB;
  using StrideC = typename Gemm::GemmKernel::StrideC;
  using StrideD = typename Gemm::GemmKernel::StrideD;

  // CUTLASS's arguments for D = Evt(A B^T), A [M,K], B [N,K] (problem coordinates of this kernel: GemmArgs'
  // m, n, k). `c` is the Source operand (M x N, same layout as D) or null when the tree has none.
  static typename Gemm::Arguments arguments(GemmArgs const& p, typename Evt::Arguments const& evt_args) {
    void const* a = p.a;
    void const* b = p.b;
    void const* c = p.c;
    void* d = p.d;
    int const M = int(p.m), N = int(p.n), K = int(p.k);
    int const device = int(p.device), raster_along_n = int(p.raster), swizzle = int(p.swizzle);
    int const splits = int(p.splits);
    auto stride_a = cutlass::make_cute_packed_stride(StrideA{}, cute::make_shape(M, K, 1));
    auto stride_b = cutlass::make_cute_packed_stride(StrideB{}, cute::make_shape(N, K, 1));
    auto stride_c = cutlass::make_cute_packed_stride(StrideC{}, cute::make_shape(M, N, 1));
    auto stride_d = cutlass::make_cute_packed_stride(StrideD{}, cute::make_shape(M, N, 1));

    typename Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {M, N, K, 1},
        {static_cast<ElementA const*>(a), stride_a, static_cast<ElementB const*>(b), stride_b},
        {evt_args, static_cast<ElementCOrD const*>(c), stride_c, static_cast<ElementD*>(d), stride_d},
        sm90::hardware_info(device)};
    sm90::set_scheduler_options<Kernel, kStreamK>(args, raster_along_n, swizzle, splits);
    return args;
  }

  // The workspace a launch with `p` needs (stream-K: partial sums and locks for this shape on this GPU; else 0).
  static int workspace_bytes(GemmArgs const& p, typename Evt::Arguments const& evt_args, int64_t* bytes) {
    *bytes = static_cast<int64_t>(Gemm::get_workspace_size(arguments(p, evt_args)));
    return 0;
  }

  static int run(GemmArgs const& p, typename Evt::Arguments const& evt_args) {
    cudaError_t err = cudaSetDevice(int(p.device));  // our static cudart tracks its own current device
    if (err != cudaSuccess) return static_cast<int>(err);
    return sm90::launch<Gemm>(arguments(p, evt_args), p.workspace, p.workspace_bytes,
                              static_cast<cudaStream_t>(p.stream));
  }
};

}  // namespace scalemm
