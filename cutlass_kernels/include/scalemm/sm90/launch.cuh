// Host-side helpers every SM90 CUTLASS launcher shares: status codes, the device's SM count,
// tile-scheduler knobs, and can_implement -> workspace -> initialize -> run.
#pragma once

#include <cstdint>
#include <cuda_runtime.h>

#include "cutlass/cutlass.h"
#include "cutlass/kernel_hardware_info.h"

#include "scalemm/abi.h"

namespace scalemm::sm90 {

inline int status_code(cutlass::Status s) {
  return s == cutlass::Status::kSuccess ? 0 : kCutlassStatusBase + static_cast<int>(s);
}

// Multiprocessor count per device, queried once (cudaDeviceGetAttribute is cheap but not free).
inline int sm_count(int device) {
  static int cached[64] = {0};
  if (device < 0 || device >= 64) return 0;
  if (cached[device] == 0) cudaDeviceGetAttribute(&cached[device], cudaDevAttrMultiProcessorCount, device);
  return cached[device];
}

inline cutlass::KernelHardwareInfo hardware_info(int device) {
  cutlass::KernelHardwareInfo hw;
  hw.device_id = device;
  hw.sm_count = sm_count(device);
  return hw;
}

// raster: 0 along M, 1 along N, 2 CUTLASS's heuristic; splits: stream-K only (1 = heuristic).
template <class Kernel, bool kStreamK, class Arguments>
inline void set_scheduler_options(Arguments& args, int64_t raster, int64_t swizzle, int64_t splits) {
  using RasterOrder = typename Kernel::TileScheduler::RasterOrderOptions;
  args.scheduler.raster_order = raster == 0 ? RasterOrder::AlongM : raster == 1 ? RasterOrder::AlongN
                                                                                 : RasterOrder::Heuristic;
  args.scheduler.max_swizzle_size = int(swizzle);
  if constexpr (kStreamK) args.scheduler.splits = int(splits);
}

template <class Gemm>
inline int launch(typename Gemm::Arguments const& args, void* workspace, int64_t workspace_bytes,
                  cudaStream_t stream) {
  Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) return kCannotImplement;
  if (static_cast<int64_t>(Gemm::get_workspace_size(args)) > workspace_bytes) return kWorkspaceTooSmall;
  int rc = status_code(gemm.initialize(args, workspace, stream));
  if (rc) return rc;
  rc = status_code(gemm.run(stream));
  if (rc) return rc;
  return static_cast<int>(cudaGetLastError());
}

}  // namespace scalemm::sm90
