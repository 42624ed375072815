"""What the epilogue's scale vectors cost at decode: the heuristic's pick with the preset epilogue (scale_a[m] *
scale_b[n] * acc, bf16 out) against the same tile storing the bare accumulator (epilogues.Acc(): no vector loads),
and cuBLASLt per-tensor (torch._scaled_mm with scalar scales), same process (gemm_sweep.time_point: CUDA graphs,
weights rotated past L2). From the repository root:
  python3 perf/results/h100/fp8_decode_clusters/epilogue_probe.py [--build] [--check]
--check first compares the preset kernels (with a bias, partial tiles) against fp32 math on the same operands.
epilogue_rows.log ran it with row_registers.patch applied (SCALEMM_EXPERIMENT_ROW_REGISTERS=1 selects the patched
row-vector node; the patch is not in the code: README.txt item 10)."""
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
    from scalemm.gemm import _resolve_epilogue, bias_leaf
    specs = [gemm_kernel_spec(default_config(M, N, K), fast_accum=True, out_dtype=torch.bfloat16, epilogue=tree)[0]
             for M, N, K in POINTS + ((100, 2056, 1040), (7, 2056, 1040))
             for tree in (epi.Acc(), _resolve_epilogue(None, torch.bfloat16, bias=False),
                          _resolve_epilogue(None, torch.bfloat16, bias=True))]
    for spec, err in build_many(specs, jobs=2):
        if err:
            print(spec.name, "FAILED", err.splitlines()[0])
    sys.exit()
from gemm_sweep import time_point
print(torch.cuda.get_device_name())
if "--check-scalars" in sys.argv:  # swap-AB decode with one-value scales (dynamic broadcast), both accumulation modes
    import scalemm
    for M, N, K in ((1, 4096, 4096), (7, 2056, 1040), (16, 3072, 4096)):
        g = torch.Generator(device="cuda").manual_seed(M + N)
        a = torch.randn(M, K, device="cuda", generator=g).to(torch.float8_e4m3fn)
        b = torch.randn(N, K, device="cuda", generator=g).to(torch.float8_e4m3fn)
        vec_a, vec_b = torch.rand(M, device="cuda", generator=g) + 0.5, torch.rand(N, device="cuda", generator=g) + 0.5
        one_a, one_b = torch.rand(1, device="cuda", generator=g) + 0.5, torch.rand(1, device="cuda", generator=g) + 0.5
        for sa, sb in ((one_a, one_b), (vec_a, one_b), (one_a, vec_b), (vec_a, vec_b)):
            for fast in (True, False):
                ref = (a.float() @ b.float().T) * sa.reshape(-1, 1) * sb.reshape(1, -1)
                out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
                scalemm.gemm(a, b, sa, sb, out=out, fast_accum=fast)
                err = ((out.float() - ref).norm() / ref.norm()).item()
                print(f"scalars M={M} N={N} sa {sa.numel()} sb {sb.numel()} fast {fast}: nan {out.isnan().any().item()} "
                      f"rel err {err:.2e}", flush=True)
    sys.exit()
if "--check" in sys.argv:  # the preset kernels against fp32 math on the same FP8 operands (partial tiles, a bias)
    import scalemm
    for M, N, K in POINTS + ((100, 2056, 1040), (7, 2056, 1040)):
        g = torch.Generator(device="cuda").manual_seed(M + N)
        a = torch.randn(M, K, device="cuda", generator=g).to(torch.float8_e4m3fn)
        b = torch.randn(N, K, device="cuda", generator=g).to(torch.float8_e4m3fn)
        sa, sb = torch.rand(M, device="cuda", generator=g) + 0.5, torch.rand(N, device="cuda", generator=g) + 0.5
        bias = torch.randn(N, device="cuda", generator=g).to(torch.bfloat16)
        ref = (a.float() @ b.float().T) * sa[:, None] * sb[None, :] + bias.float()
        out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        scalemm.gemm(a, b, sa, sb, bias=bias, out=out, fast_accum=True)
        err = ((out.float() - ref).norm() / ref.norm()).item()
        print(f"check M={M} N={N} K={K} {default_config(M, N, K).key()}: nan {out.isnan().any().item()} "
              f"rel err {err:.2e}", flush=True)
for M, N, K in POINTS:
    cfg = default_config(M, N, K)
    us = time_point(M, N, K, True, configs=[cfg], with_bf16=False, epilogues=[("_acc", epi.Acc())])
    print(f"M={M:>4} N={N:>6} K={K:>5} {cfg.key():<28} preset {us['scalemm']:6.2f} us  bare acc "
          f"{us[cfg.label() + '_acc']:6.2f}  per-tensor {us['torch_tensorwise']:6.2f}  rowwise {us['torch_rowwise']:6.2f}",
          flush=True)
