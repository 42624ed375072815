"""What the epilogue's scale vectors cost at decode: the heuristic's pick with the preset epilogue (scale_a[m] *
scale_b[n] * acc, bf16 out) against the same tile storing the bare accumulator (epilogues.Acc(): no vector loads),
and cuBLASLt per-tensor (torch._scaled_mm with scalar scales), same process (gemm_sweep.time_point: CUDA graphs,
weights rotated past L2). From the repository root:
  python3 perf/results/h100/fp8_decode_clusters/epilogue_probe.py [--build]"""
import sys
sys.path.insert(0, "perf")
import torch
from scalemm import epilogues as epi
from scalemm.cutlass_kernels.configs import default_config
POINTS = ((1, 4096, 4096), (1, 2048, 4096), (16, 3072, 4096), (64, 6144, 4096), (128, 5120, 2048), (128, 4096, 4096),
          (128, 7168, 2048), (128, 28672, 4096))
if "--build" in sys.argv:
    from scalemm.gemm import gemm_kernel_spec
    from scalemm.jit import build_many
    specs = [gemm_kernel_spec(default_config(M, N, K), fast_accum=True, out_dtype=torch.bfloat16, epilogue=epi.Acc())[0]
             for M, N, K in POINTS]
    for spec, err in build_many(specs, jobs=2):
        if err:
            print(spec.name, "FAILED", err.splitlines()[0])
    sys.exit()
from gemm_sweep import time_point
print(torch.cuda.get_device_name())
for M, N, K in POINTS:
    cfg = default_config(M, N, K)
    us = time_point(M, N, K, True, configs=[cfg], with_bf16=False, epilogues=[("_acc", epi.Acc())])
    print(f"M={M:>4} N={N:>6} K={K:>5} {cfg.key():<28} preset {us['scalemm']:6.2f} us  bare acc "
          f"{us[cfg.label() + '_acc']:6.2f}  per-tensor {us['torch_tensorwise']:6.2f}  rowwise {us['torch_rowwise']:6.2f}",
          flush=True)
