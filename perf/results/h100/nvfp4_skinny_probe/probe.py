"""Where the wgmma skinny loop's time goes: the same kernel built with parts of its main loop removed
(SCALEMM_SKINNY_PROBE, probe.patch: 1 no token copies, 2 no weight copies, 3 no wgmmas, 4 no e2m1 decode;
outputs wrong, timing only), CUDA-graph medians with the weights rotated past L2 (perf/gemm_sweep.py's bench).

  python probe.py [--build-only]
  python probe.py --splits        # the unprobed kernel at fixed split counts
"""
import dataclasses
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
import scalemm  # noqa: E402
import scalemm.gemm_nvfp4 as gn  # noqa: E402
from scalemm import jit  # noqa: E402
from scalemm.cutlass_kernels.configs import SkinnyConfig  # noqa: E402

PROBES = {0: "full", 1: "no_tokens", 2: "no_weights", 3: "no_wgmma", 4: "no_decode", 5: "no_mainloop"}
PROBE = [0]
_orig = gn.skinny_kernel_spec


def probed_spec(config, *, act_dtype, out_dtype, activation=None):
    spec = _orig(config, act_dtype=act_dtype, out_dtype=out_dtype, activation=activation)
    if PROBE[0] == 0:
        return spec
    return dataclasses.replace(spec, name=spec.name + f"_probe{PROBE[0]}",
                               extra_flags=spec.extra_flags + (f"-DSCALEMM_SKINNY_PROBE={PROBE[0]}",))


gn.skinny_kernel_spec = probed_spec
SHAPES = [(4096, 4096), (8192, 8192), (14336, 4096), (4096, 14336)]
TOKENS = [16, 64]


def specs():
    out = []
    for t in TOKENS:
        for p in PROBES:
            PROBE[0] = p
            out.append(probed_spec(SkinnyConfig(t // 8, 0, "wgmma"), act_dtype=torch.bfloat16, out_dtype=torch.bfloat16))
    PROBE[0] = 0
    return out


if __name__ == "__main__":
    if "--build-only" in sys.argv:
        jit.build_many(specs(), jobs=2)
        sys.exit(0)
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "perf"))
    from gemm_sweep import L2_BYTES, bench  # noqa: E402
    jit.build_many(specs(), jobs=16)
    print(torch.cuda.get_device_name())
    if "--splits" in sys.argv:
        PROBES = {0: "full"}
    for N, K in SHAPES:
        copies = max(1, min(8, math.ceil(2 * L2_BYTES / (N * K * 0.5625))))
        g = torch.Generator(device="cuda").manual_seed(N)
        ws = [scalemm.quantize_nvfp4(torch.randn(N, K, device="cuda", generator=g).to(torch.bfloat16), scaling="token")
              for _ in range(copies)]
        w16 = [torch.randn(N, K, device="cuda", generator=g).to(torch.bfloat16) for _ in range(copies)]
        for M in TOKENS:
            x = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
            out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
            cfg = SkinnyConfig(M // 8, 0, "wgmma")
            fns = {"torch_bf16": (lambda x: lambda i: torch.matmul(x, w16[i].T))(x)}
            if "--splits" in sys.argv:
                for s in (1, 2, 3, 4, 6, 8):
                    c = SkinnyConfig(M // 8, s, "wgmma")
                    fns[f"s{s}"] = (lambda c: lambda i: gn.gemm_nvfp4(x, ws[i], out=out, config=c))(c)
            for p, name in PROBES.items():
                PROBE[0] = p
                try:
                    for w in ws:
                        gn.gemm_nvfp4(x, w, out=out, config=cfg)
                except Exception as e:
                    print(f"  {name} at M={M} failed: {str(e)[:200]}", flush=True)
                    torch.cuda.synchronize()
                    continue
                fns[name] = (lambda p: lambda i: (PROBE.__setitem__(0, p), gn.gemm_nvfp4(x, ws[i], out=out, config=cfg)))(p)
            PROBE[0] = 0
            us = bench(fns, copies)
            splits = gn.skinny_splits(x, ws[0], cfg)
            print(f"N={N:>6} K={K:>6} M={M:>3} splits={splits}  " +
                  "  ".join(f"{k} {v:.2f}" for k, v in us.items()), flush=True)
