"""A quick check before timing: the two-warpgroup wgmma loop against the one-warpgroup loop and the exact
dequantized product (fp32 outputs, poisoned first), W4A16 and W4A4, every token-tile count, blocks above 64."""
import torch
import scalemm
from scalemm.cutlass_kernels.configs import SkinnyConfig
from scalemm.reference import dequantize_nvfp4

torch.manual_seed(0)
worst = 0.0
for N, K in ((4096, 4096), (1000, 2080), (576, 7168)):
    w = scalemm.quantize_nvfp4(torch.randn(N, K, device="cuda").to(torch.bfloat16), scaling="token")
    wd = dequantize_nvfp4(w).double()
    for M, tiles in ((9, 2), (16, 2), (17, 4), (32, 4), (33, 8), (64, 8), (130, 8), (70, 4)):
        x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
        exact = x.double() @ wd.T
        for a in (x, scalemm.quantize_nvfp4(x, scaling="token")):
            exact = (a.double() if a is x else dequantize_nvfp4(a).double()) @ wd.T
            outs = []
            for loop in ("wgmma", "wgmma_pair"):
                out = torch.full((M, N), float("nan"), device="cuda")
                scalemm.gemm(a, w, out_dtype=torch.float32, out=out, config=SkinnyConfig(tiles, mainloop=loop))
                assert not out.isnan().any(), (N, K, M, loop)
                err = ((out.double() - exact).norm() / exact.norm()).item()
                worst = max(worst, err)
                assert err <= 1e-5, (N, K, M, loop, err)
                outs.append(out)
            d = ((outs[0] - outs[1]).abs().max() / outs[0].abs().max()).item()
            print(f"N={N} K={K} M={M} t{tiles} {'w4a4' if a is not x else 'w4a16'}: pair vs one {d:.2e}")
print(f"all passed, worst rel err against the exact product {worst:.2e}")
