"""Does the grouped FP8 wgrad gain from overlapping a tile's epilogue with the next tile's mainloop? The rule's
kernel (cooperative 128x256 in clusters of 2, full accumulation in the chunked promotion) runs a tile's ~4 k-tiles
of MMAs and then its epilogue, one after the other. Ping-pong tiles overlap them (one warpgroup's epilogue beside
the other's mainloop), but scalemm's chunked promotion does not compile for them (two wgmma atoms per warpgroup
along M) and CUTLASS's promotion spills at 128-row tiles. This probe times fast-accumulation ping-pong tiles
(which do compile) against fast- and full-accumulation cooperative ones, adding into dW (accumulate=True, own C
buffers) and writing it: if ping-pong does not win in fast accumulation, a full-accumulation ping-pong mainloop is
not worth writing. Twenty-fourth session's probe (before own C buffers): fast ping-pong 128x192 0.895-0.914x.

  python3 perf/results/h100/wgrad_store_staging/ab_pingpong.py --build    (CPU machine)
  python3 perf/results/h100/wgrad_store_staging/ab_pingpong.py --out OUT
"""
import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", ".."))
from grouped_sweep import routed_sizes  # noqa: E402

import scalemm  # noqa: E402
from scalemm import grouped, jit  # noqa: E402
from scalemm.cutlass_kernels.configs import sm90  # noqa: E402
from scalemm.cutlass_kernels.configs.sm90 import GemmConfig  # noqa: E402
from scalemm.formats import layout  # noqa: E402
from scalemm.timing import bench  # noqa: E402

LAYERS = (("gate_up dW", 1536, 2048), ("down dW", 2048, 768))
# name: (config or None for the rule's, fast_accum)
CANDIDATES = {
    "rule_full": (None, False),
    "coop256_fast": (GemmConfig(128, 256, 128, 2, 1, "cooperative"), True),
    "ping128_fast": (GemmConfig(128, 128, 128, 1, 1, "pingpong"), True),
    "ping128c2_fast": (GemmConfig(128, 128, 128, 2, 1, "pingpong"), True),
    "ping192_fast": (GemmConfig(128, 192, 128, 1, 1, "pingpong"), True),
}


def config_of(name, N, K):
    cfg, fast = CANDIDATES[name]
    return cfg or sm90.default_wgrad_config(N, K, fast_accum=fast), fast


def specs():
    out = {}
    for n in CANDIDATES:
        for N, K in ((1536, 2048), (2048, 768)):
            cfg, fast = config_of(n, N, K)
            for acc in (True, False):
                s = grouped.grouped_gemm_kernel_spec(cfg, fast_accum=fast, out_dtype=torch.bfloat16,
                                                     epilogue=grouped._wgrad_tree("bf16", acc), wgrad=True)[0]
                out[s.name] = s
    return list(out.values())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--build", action="store_true")
    args = ap.parse_args()
    if args.build:
        jit.build_many([s for s in specs() if not jit.is_cached(s)], jobs=2)
        return
    lines = [f"device: {torch.cuda.get_device_name()}"]
    sizes = routed_sizes(8192, 128, 8, seed=0)
    E, T = sizes.numel(), int(sizes.sum())
    offsets = torch.cumsum(sizes, 0).to(torch.int32).cuda()
    W = layout.wgrad_width(T, E)
    for label, N, K in LAYERS:
        g = torch.Generator(device="cuda").manual_seed(3)
        dy_t = (torch.randn(N, W, device="cuda", generator=g) * 64).clamp(-448, 448).to(torch.float8_e4m3fn)
        x_t = (torch.randn(K, W, device="cuda", generator=g) * 64).clamp(-448, 448).to(torch.float8_e4m3fn)
        s_dy = torch.rand(E, device="cuda", generator=g) * 1e-5 + 1e-6
        s_x = torch.rand(E, device="cuda", generator=g) * 1e-5 + 1e-6
        prior = (torch.randn(E, N, K, device="cuda", generator=g) * 0.1).to(torch.bfloat16)
        for acc in (True, False):
            outs = {n: prior.clone() for n in CANDIDATES}

            def call(n, acc=acc):
                cfg, fast = config_of(n, N, K)
                scalemm.grouped_gemm_wgrad(dy_t, x_t, offsets, s_dy, s_x, out=outs[n], accumulate=acc,
                                           fast_accum=fast, config=cfg)
            for n in CANDIDATES:
                call(n)
            torch.cuda.synchronize()
            first = {n: outs[n].float() for n in CANDIDATES}
            us = bench({n: (lambda i, n=n: call(n)) for n in CANDIDATES}, copies=1)
            lines.append(f"grouped {label} [{E}, {N}, {K}] from {T} rows, {'adding into' if acc else 'writing'} dW:")
            ref = first["rule_full"]
            for n in CANDIDATES:
                cfg, fast = config_of(n, N, K)
                rel = ((first[n] - ref).abs().max() / ref.abs().max()).item()
                lines.append(f"  {n:<16}{cfg.key():<32}{us[n]:>9.1f} us {2 * T * N * K / us[n] / 1e6:>7.0f} TFLOP/s"
                             f"  {us['rule_full'] / us[n]:.3f}x of rule  max diff / max |ref| {rel:.2e}")
            print("\n".join(lines[-len(CANDIDATES) - 1:]), flush=True)
            del outs
            torch.cuda.empty_cache()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "ab_pingpong.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
