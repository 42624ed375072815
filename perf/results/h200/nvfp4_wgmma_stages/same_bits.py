"""Outputs of the skinny kernel (W4A16, W4A4 with per-token alphas) at 1-64 tokens and fixed splits, saved
for a bit-for-bit comparison between two builds: `python3 same_bits.py OUT.pt`, then `python3 same_bits.py --compare
A.pt B.pt`."""
import sys
import torch

if sys.argv[1] == "--compare":
    a, b = torch.load(sys.argv[2]), torch.load(sys.argv[3])
    assert a.keys() == b.keys()
    bad = [k for k in a if not torch.equal(a[k], b[k])]
    print(f"{len(a)} outputs compared, {len(bad)} differ: {bad[:5]}")
    sys.exit(1 if bad else 0)
import scalemm
from scalemm.cutlass_kernels.configs import SkinnyConfig
torch.manual_seed(0)
outs = {}
for N, K in ((4096, 4096), (1000, 2080), (576, 7168)):
    w = scalemm.quantize_nvfp4(torch.randn(N, K, device="cuda").to(torch.bfloat16), scaling="token")
    for M in (1, 5, 8, 16, 24, 32, 33, 64):
        x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
        xq = scalemm.quantize_nvfp4(x, scaling="token")
        tiles = 1 if M <= 8 else 2 if M <= 16 else 4 if M <= 32 else 8
        loop = "stepped" if M <= 8 else "wgmma"
        for splits in (0, 1, 3, 8):
            cfg = SkinnyConfig(tiles, splits, loop)
            outs[f"{N}x{K} M{M} s{splits} w4a16"] = scalemm.gemm(x, w, config=cfg)
            outs[f"{N}x{K} M{M} s{splits} w4a4"] = scalemm.gemm(xq, w, config=cfg)
torch.save({k: v.cpu() for k, v in outs.items()}, sys.argv[1])
print(len(outs), "outputs saved")
