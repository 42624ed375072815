"""One small-shape pass over every scalemm kernel, for compute-sanitizer (scripts/device_run.sh sanitize).

  compute-sanitizer --tool memcheck python3 scripts/sanitize_run.py [--only quant,gemm,grouped,nvfp4]

Shapes are small but keep every code path: ragged and empty groups, bad (decreasing, out-of-range)
device offsets, K not a multiple of 64, tokens past the last group, RHT and stochastic rounding.
Exits non-zero if a result is not finite where it must be.
"""
import argparse

import torch

import scalemm


def quantizers(dev):
    x = torch.randn(256, 192, device=dev, dtype=torch.bfloat16)
    for scaling in ("tensor", "token"):
        scalemm.quantize_nvfp4(x, scaling=scaling, columnwise=True, rht=True, stochastic_rounding=True, seed=1)
        scalemm.quantize_fp8(x, scaling=scaling, columnwise=True)
    scalemm.quantize_mxfp8(x, columnwise=True)
    for offs in ([5, 5, 130, 131, 200, 256], [40, 10, 300, 250, 256, 256]):  # ragged/empty; bad offsets
        o = torch.tensor(offs, device=dev, dtype=torch.int32)
        for scaling in ("tensor", "token"):
            scalemm.quantize_fp8_grouped(x, o, scaling=scaling, columnwise=True)
            scalemm.quantize_nvfp4_grouped(x, o, scaling=scaling, columnwise=True, rht=True,
                                           stochastic_rounding=True, seed=2)
        scalemm.quantize_mxfp8_grouped(x, o)
    w = torch.randn(3, 64, 192, device=dev, dtype=torch.bfloat16)
    scalemm.quantize_fp8_stacked(w, scaling="token")
    scalemm.quantize_nvfp4_stacked(w, scaling="token")
    scalemm.quantize_nvfp4_residual(x, [0, 5, 17])
    # the NVFP4 training glue (nvfp4_dequant library): prepared codes with a partial last chunk (K = 80), the
    # wgrad-layout decode of ragged and empty groups, the grouped wgrad's global scales (K % 8 != 0: one per thread)
    from scalemm.gemm_nvfp4 import prepare_sm90_weight, scale_grouped_wgrad
    from scalemm.training import decode_wgrad_bf16
    prepare_sm90_weight(torch.randint(0, 256, (3, 40, 40), device=dev, dtype=torch.uint8))
    o = torch.tensor([5, 5, 130, 131, 200, 256], device=dev, dtype=torch.int32)
    decode_wgrad_bf16(scalemm.quantize_nvfp4_grouped(x, o, columnwise=True).columnwise)
    acc = torch.randn(3, 8, 36, device=dev).to(torch.bfloat16)
    scale_grouped_wgrad(acc, torch.ones(3, 8, device=dev), torch.ones(3, 36, device=dev),
                        torch.tensor([True, False, True], device=dev), torch.float32)


def fp8_gemms(dev):
    a = scalemm.quantize_fp8(torch.randn(7, 256, device=dev), scaling="token")
    b = scalemm.quantize_fp8(torch.randn(128, 256, device=dev), scaling="token")
    for M in (1, 7):
        scalemm.gemm(scalemm.quantize_fp8(torch.randn(M, 256, device=dev), scaling="token"), b)
    scalemm.gemm(a, b, out_dtype=torch.float32, fast_accum=True)
    sizes = [0, 5, 130, 0, 1, 17]
    T, G, N, K = sum(sizes), len(sizes), 64, 64
    offs = torch.tensor(sizes, device=dev).cumsum(0).to(torch.int32)
    x8 = torch.randn(T, K, device=dev).to(torch.float8_e4m3fn)
    w8 = torch.randn(G, N, K, device=dev).to(torch.float8_e4m3fn)
    sa, sb = torch.rand(T, device=dev), torch.rand(G, N, device=dev)
    scalemm.grouped_gemm(x8, w8, offs, sa, sb)
    bad = torch.tensor([40, 10, 500, 153, 153, 90], device=dev, dtype=torch.int32)
    scalemm.grouped_gemm(x8, w8, bad, sa, sb)
    xq = scalemm.quantize_fp8_grouped(torch.randn(T, K, device=dev), offs, scaling="token", columnwise=True)
    dq = scalemm.quantize_fp8_grouped(torch.randn(T, N, device=dev), offs, scaling="token", columnwise=True)
    scalemm.grouped_gemm_wgrad(dq, xq)


def nvfp4_gemms(dev):
    w = scalemm.quantize_nvfp4(torch.randn(256, 2064, device=dev, dtype=torch.bfloat16), scaling="token")
    for M in (1, 7, 130):
        x = torch.randn(M, 2064, device=dev, dtype=torch.bfloat16)
        scalemm.gemm(x, w, out_dtype=torch.float32)
        scalemm.gemm(scalemm.quantize_nvfp4(x, scaling="token"), w)
    # the skinny kernel (each main loop: stepped, lean): a partial last chunk (K = 2080), N past its
    # 64-row tile, every split count (tests/guarded_reads.py checks reads outside the inputs, which
    # memcheck cannot see inside torch's allocator segments)
    from scalemm.cutlass_kernels.configs import SKINNY_MAINLOOPS, SkinnyConfig
    ws = scalemm.quantize_nvfp4(torch.randn(200, 2080, device=dev, dtype=torch.bfloat16), scaling="token")
    for M, tiles in ((1, 1), (9, 2), (33, 8)):
        x = torch.randn(M, 2080, device=dev, dtype=torch.bfloat16)
        for splits in (0, 1, 3, 8):
            for loop in SKINNY_MAINLOOPS:
                scalemm.gemm(x, ws, out_dtype=torch.float32, config=SkinnyConfig(tiles, splits, loop))
    sizes = [5, 0, 130, 1, 0, 17]
    T, G = sum(sizes), len(sizes)
    offs = torch.tensor(sizes, device=dev).cumsum(0).to(torch.int32)
    we = scalemm.quantize_nvfp4_stacked(torch.randn(G, 128, 512, device=dev, dtype=torch.bfloat16), scaling="token")
    x = torch.randn(T + 3, 512, device=dev, dtype=torch.bfloat16)
    scalemm.grouped_gemm(x, we, offs, out_dtype=torch.float32)
    scalemm.grouped_gemm(scalemm.quantize_nvfp4_grouped(x[:T], offs, scaling="token"), we, None)
    bad = torch.tensor([40, 10, 500, 153, 153, 90], device=dev, dtype=torch.int32)
    scalemm.grouped_gemm(x[:T], we, bad)
    # the skinny kernel, grouped: W4A16 and W4A4, a group longer than its token tiles, bad offsets
    for tiles, splits, loop in [(t, s, loop) for t, s in ((1, 0), (8, 3)) for loop in SKINNY_MAINLOOPS]:
        cfg = SkinnyConfig(tiles, splits, loop)
        scalemm.grouped_gemm(x, we, offs, out_dtype=torch.float32, config=cfg)
        scalemm.grouped_gemm(scalemm.quantize_nvfp4_grouped(x[:T], offs, scaling="token"), we, None, config=cfg)
        scalemm.grouped_gemm(x[:T], we, bad, config=cfg)


STAGES = {"quant": quantizers, "gemm": fp8_gemms, "nvfp4": nvfp4_gemms}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--only", default=",".join(STAGES))
    args = p.parse_args()
    for name in args.only.split(","):
        STAGES[name]("cuda")
        torch.cuda.synchronize()
        print(f"sanitize pass: {name} ok", flush=True)


if __name__ == "__main__":
    main()
