"""Before timing: the wgmma loop with TMA copies against the cp.async one, bit for bit, and both against the exact
dequantized product (fp32 outputs, poisoned first): W4A16 and W4A4 (via the bf16 pass), 9-64 tokens, blocks above
64, odd K (a last chunk of one k-tile), N not a multiple of 64, fixed and automatic splits."""
import torch
import scalemm
from scalemm.cutlass_kernels.configs import SkinnyConfig
from scalemm.reference import dequantize_nvfp4

torch.manual_seed(0)
worst = 0.0
for N, K in ((4096, 4096), (1000, 2080), (576, 7168), (72, 96)):
    w = scalemm.quantize_nvfp4(torch.randn(N, K, device="cuda").to(torch.bfloat16), scaling="token")
    wd = dequantize_nvfp4(w).double()
    for M, tiles, splits in ((9, 2, 0), (16, 2, 3), (17, 4, 0), (32, 4, 1), (33, 8, 0), (64, 8, 2), (130, 8, 0),
                             (70, 4, 0)):
        x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
        for a in (x, scalemm.quantize_nvfp4(x, scaling="token")):
            exact = (a.double() if a is x else dequantize_nvfp4(a).double()) @ wd.T
            outs = []
            for loop in ("wgmma", "wgmma_tma"):
                out = torch.full((M, N), float("nan"), device="cuda")
                scalemm.gemm(a, w, out_dtype=torch.float32, out=out, config=SkinnyConfig(tiles, splits, loop))
                assert not out.isnan().any(), (N, K, M, loop)
                err = ((out.double() - exact).norm() / exact.norm()).item()
                worst = max(worst, err)
                assert err <= 1e-5, (N, K, M, loop, err)
                outs.append(out)
            assert torch.equal(outs[0], outs[1]), (N, K, M, tiles, splits)
        print(f"N={N} K={K} M={M} t{tiles} s{splits}: bit-identical, rel err {err:.1e}", flush=True)
print(f"all passed, worst rel err against the exact product {worst:.2e}")
