"""W4A4 prefill: the activations' bf16 pass + the swapped kernel (activation_decode="pass", the previous default,
config None) against the tokens on A (activation_decode="registers": the weights' pass + the unswapped kernel that
decodes the tokens in registers), with W4A16 and bf16 torch.matmul in the same process; CUDA graphs, inputs rotated
past L2 (--stream-k / --widths / --rule: other candidates, see their functions). Prints one line per point and writes
--out JSON. The kernels are prebuilt in parallel (a recording dry run,
jit.prebuild_calls)."""
import argparse
import json
import sys
from dataclasses import replace

import torch

import scalemm
from scalemm import jit
from scalemm.cutlass_kernels.configs import sm90
from scalemm.gemm_nvfp4 import gemm_nvfp4
from scalemm.timing import bench, l2_copies

LAYERS = {  # name: (N, K)
    "dsv3.kv_a": (576, 7168), "dsv3.q_a": (1536, 7168),
    "llama3-8b.o": (4096, 4096), "llama3-8b.down": (4096, 14336), "llama3-8b.qkv": (6144, 4096),
    "qwen3-30b.o": (2048, 4096), "qwen3-30b.qkv": (5120, 2048), "dsv3.shared_down": (7168, 2048),
    "gpt-oss.qkv": (5120, 2880), "mistral-7b.kv": (1024, 4096), "llama3-70b.o": (8192, 8192),
}


# Held out from the rule (NVFP4_TOKENS_ON_A_RATIO was set before any of these ran): other models' layers.
HELD = {
    "qwen2.5-7b.kv": (512, 3584), "qwen2.5-7b.o": (3584, 3584), "phi3-mini.o": (3072, 3072),
    "phi3-mini.down": (3072, 8192), "llama3-405b.kv": (2048, 16384), "gpt-oss.o": (2880, 4096),
    "gemma3-27b.o": (5376, 4096), "qwen3-235b.q": (8192, 4096),
}
LAYERS.update(HELD)
# Held out from the stream-K bound (default_nvfp4_tokens_on_a_config takes it from the real token count since the
# forty-fourth session; set from stream_k_w4a16_on_a.log before any of these ran): other narrow layers, and kv_a at
# other waves. --changed times the points where the bound changes the tile.
CHANGED = {
    "dsv2-lite.kv_a": (576, 2048), "llama3.2-1b.kv": (512, 2048), "minicpm3.kv_a": (288, 2560),
    "qwen2-0.5b.q": (896, 896), "glm4-9b.kv": (256, 4096),
}
# Held out from the K bound (NVFP4_TOKENS_ON_A_STREAM_K_MIN_K, set from changed.log before these ran).
K_BOUND = {"gpt-oss.kv": (512, 2880), "qwen3-1.7b.kv": (1024, 2048)}
LAYERS.update(K_BOUND)
LAYERS.update(CHANGED)
# Held out from the W4A16-on-A rule and the fitted weight widths (sm90.nvfp4_w4a16_on_a, NVFP4_TOKENS_ON_A_WIDTHS: set
# from stream_k_w4a16_on_a.log and widths.log before these ran); with CHANGED's llama3.2-1b.kv, glm4-9b.kv and
# qwen2-0.5b.q, which neither run timed as W4A16 on A. --rule times them.
RULE = {
    "llama3.2-3b.kv": (1024, 3072), "qwen2.5-14b.kv": (1024, 5120), "dsv2.kv_a": (576, 5120),
    "minicpm3.q_a": (768, 2560), "qwen2-1.5b.kv": (256, 1536), "qwen2.5-3b.kv": (256, 2048),
    "qwen3-8b.kv": (1024, 4096), "phi3-medium.kv": (1280, 5120), "yi-34b.kv": (1024, 7168),
}
LAYERS.update(RULE)
# The weight-row padding term of nvfp4_w4a16_on_a (NVFP4_W4A16_ON_A_MIN_ROW_PADDING, set from MiniCPM3's kv_a alone
# before these ran): --padded times W4A16 swapped and on A at every point where the tokens-on-A rule holds. Few real
# layers have 256-511 rows padded by a quarter (MiniCPM3 kv_a, 288 = 256 + 32); "rows-" layers are synthetic widths
# on both sides of the bound (272 / 304 / 400 rows: padded 1.41 / 1.26 / 1.28; 320 / 352: 1.20 / 1.09, not taken).
PADDED = {
    "minicpm3.kv_a": (288, 2560), "smollm2-360m.kv": (320, 960), "rows-272.k4096": (272, 4096),
    "rows-304.k3072": (304, 3072), "rows-400.k2048": (400, 2048), "rows-400.k5120": (400, 5120),
    "rows-320.k2560": (320, 2560), "rows-352.k4096": (352, 4096),
}
LAYERS.update(PADDED)
# Held out from the waves model that gates the padding term (_w4a16_waves_cost, NVFP4_W4A16_STREAM_K_WAVE_COST: set
# from padded.log, flip.log and flip2.log before these ran): other widths and depths of 256-511 rows (synthetic), and
# MiniCPM3's kv_a, at other token counts (--ms 9000,10240,11264,14000,18000,22528,28000).
HELD_PADDED = {
    "rows-264.k3072": (264, 3072), "rows-296.k2048": (296, 2048), "rows-416.k3584": (416, 3584),
    "rows-288.k5120": (288, 5120), "rows-320.k4096": (320, 4096), "rows-408.k2560": (408, 2560),
}
LAYERS.update(HELD_PADDED)
# Held out from W4A16's data-parallel tile on A (sm90.default_nvfp4_w4a16_on_a_config, NVFP4_W4A16_ON_A_DP_LAST_WAVE:
# set from flip.log and flip2.log before these ran), with HELD_PADDED's layers of at most 320 rows, at last waves
# 0.33-0.5 full (--ms 11264,11520,11904,19968,21000,28672).
HELD_DP = {"rows-280.k3584": (280, 3584), "rows-312.k2048": (312, 2048)}
LAYERS.update(HELD_DP)


def previous_rule(M, N, K):
    """The tokens-on-A tile before the forty-fourth session: default_nvfp4_config's for N "tokens", unswapped."""
    return replace(sm90.default_nvfp4_config(N, M, K), swap_ab=False)


def contenders(M, N, K, extra):
    w = scalemm.quantize_nvfp4(torch.randn(N, K, device="cuda").to(torch.bfloat16), scaling="token")
    wb = scalemm.reference.dequantize_nvfp4(w, torch.bfloat16)
    copies = l2_copies(M * K * 2)
    xs = [torch.randn(M, K, device="cuda").to(torch.bfloat16) for _ in range(copies)]
    qs = [scalemm.quantize_nvfp4(x, scaling="token") for x in xs]
    outs = {k: torch.empty(M, N, device="cuda", dtype=torch.bfloat16) for k in ("any", "w4a16", "pass", "regs")}
    out = outs["any"]
    on_a = sm90.default_nvfp4_tokens_on_a_config(M, N, K)
    fns = {
        "bf16": lambda i: torch.matmul(xs[i], wb.T, out=out),
        "w4a16": lambda i: scalemm.gemm(xs[i], w, out=outs["w4a16"]),
        "w4a4_pass": lambda i: gemm_nvfp4(qs[i], w, out=outs["pass"], activation_decode="pass"),
        "w4a4_regs": lambda i: gemm_nvfp4(qs[i], w, out=outs["regs"], config=on_a, activation_decode="registers"),
    }
    if not W4A4:
        del fns["w4a4_pass"], fns["w4a4_regs"], outs["pass"], outs["regs"]
    for label, cfg in extra(M, N, K):
        outs[label] = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        if label.startswith("w4a16"):  # W4A16 with the tokens on A: the weights decoded, a bf16 x bf16 kernel
            fns[label] = lambda i, cfg=cfg, o=outs[label]: gemm_nvfp4(xs[i], w, out=o, config=cfg)
        else:
            fns[label] = lambda i, cfg=cfg, o=outs[label]: gemm_nvfp4(qs[i], w, out=o, config=cfg,
                                                                     activation_decode="registers")
    return fns, copies, on_a, outs


def no_extra(M, N, K):
    return []


def stream_k_extra(M, N, K):
    """--stream-k: beside the default tokens-on-A tile (W4A4: "w4a4_regs"), the same tile with stream-K flipped
    ("sk": stream-K rastered along the tokens where the default has none, "dp": data-parallel where it has), and
    W4A16 with the tokens on A (the weights decoded to bf16, a bf16 x bf16 kernel) on both ("w4a16_on_a",
    "w4a16_on_a_sk" / "w4a16_on_a_dp")."""
    cfg = sm90.default_nvfp4_tokens_on_a_config(M, N, K)
    flip = replace(cfg, stream_k=not cfg.stream_k, raster="auto" if cfg.stream_k else "m")
    tag = "dp" if cfg.stream_k else "sk"
    return [(tag, flip)] + ([("w4a16_on_a", cfg), (f"w4a16_on_a_{tag}", flip)] if W4A16_ON_A else [])


W4A16_ON_A = True  # --no-w4a16-on-a: the W4A4 candidates only
W4A4 = True  # --padded: the W4A16 contenders only
FLIP = False  # --flip-stream-k (with --padded)


def fitted_weight_width(N, tile_n):
    """The narrowest multiple of 16 that tiles N weight rows in as many tiles as tile_n does (576 rows in 4 x 144
    instead of 4 x 160, the last one 96 rows full)."""
    tiles = -(-N // tile_n)
    return -(-(-(-N // tiles)) // 16) * 16


def unfitted_width(M, N, K):
    """The tokens-on-A tile's width before NVFP4_TOKENS_ON_A_WIDTHS (the forty-fourth session's rule)."""
    if N <= 128:
        return max(sm90.default_nvfp4_config(N, M, K).tile_n, sm90.NVFP4_TOKENS_ON_A_MIN_WIDTH)
    prefill = M >= sm90.NVFP4_STREAM_K_PREFILL_TOKENS and K >= sm90.NVFP4_TOKENS_ON_A_STREAM_K_MIN_K
    return sm90._nvfp4_mid_tokens_config(N, M, K, sm90.REFERENCE_SMS, prefill=prefill).tile_n


def rule_extra(M, N, K):
    """--rule: the swapped W4A16 kernel ("w4a16_swapped"; "w4a16" is the default, on A where nvfp4_w4a16_on_a holds)
    and W4A4 on the unfitted width ("unfit") where NVFP4_TOKENS_ON_A_WIDTHS changes it."""
    cfg = sm90.default_nvfp4_tokens_on_a_config(M, N, K)
    out = [("w4a16_swapped", sm90.default_nvfp4_config(M, N, K))]
    if unfitted_width(M, N, K) != cfg.tile_n:
        out.append(("unfit", replace(cfg, tile_n=unfitted_width(M, N, K))))
    return out


def padded_extra(M, N, K):
    """--padded: W4A16 on the swapped kernel ("w4a16_swapped") and with the tokens on A ("w4a16_on_a"), whichever
    the default ("w4a16") is; with --flip-stream-k also the tokens-on-A tile with stream-K flipped
    ("w4a16_on_a_flip")."""
    on_a = sm90.default_nvfp4_tokens_on_a_config(M, N, K)
    out = [("w4a16_swapped", sm90.default_nvfp4_config(M, N, K)), ("w4a16_on_a", on_a)]
    if FLIP:
        out.append(("w4a16_on_a_flip", replace(on_a, stream_k=not on_a.stream_k, raster="auto" if on_a.stream_k else "m")))
    return out


def width_extra(M, N, K):
    """--widths: the default tokens-on-A tile at fitted_weight_width ("fit", W4A4 in registers) where that differs,
    and W4A16 with the tokens on A on the default tile and the fitted one ("w4a16_on_a", "w4a16_on_a_fit")."""
    cfg = sm90.default_nvfp4_tokens_on_a_config(M, N, K)
    fit = replace(cfg, tile_n=fitted_weight_width(N, cfg.tile_n))
    out = [("w4a16_on_a", cfg)] if W4A16_ON_A else []
    if fit != cfg:
        out = [("fit", fit)] + out + ([("w4a16_on_a_fit", fit)] if W4A16_ON_A else [])
    return out


def waves(M, N, K):
    """Waves of the default tokens-on-A tile on the reference GPU."""
    cfg = sm90.default_nvfp4_tokens_on_a_config(M, N, K)
    return -(-M // cfg.tile_m) * -(-N // cfg.tile_n) / sm90.REFERENCE_SMS


def best_extra(t):
    """The fastest extra W4A4 candidate against the default tokens-on-A tile, and the fastest W4A16-on-A one against
    the swapped W4A16 kernel ("" without candidates)."""
    line = ""
    for kind, base in (("w4a4", "w4a4_regs"), ("w4a16", "w4a16")):
        extras = {k: v for k, v in t.items() if k not in ("bf16", "w4a16", "w4a4_pass", "w4a4_regs")
                  and k.startswith("w4a16") == (kind == "w4a16")}
        if extras:
            k = min(extras, key=extras.get)
            line += f"  best {kind}: {k} {t[base] / extras[k]:.3f}x (of bf16 {t['bf16'] / extras[k]:.3f}x)"
    return line


def prebuild(points, extra):
    """Every kernel of every point's contenders, built in parallel (jit.prebuild_calls)."""
    def point(M, N, K):
        for f in contenders(M, N, K, extra)[0].values():
            f(0)
    failed = jit.prebuild_calls([lambda p=p: point(*p) for p in points], modules=("gemm", "gemm_nvfp4", "quantize"))
    assert not failed, failed


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ms", default="1024,2048,4096,8192,16384")
    p.add_argument("--layers", default=None, help="comma-separated names (default: the fit set; 'held': HELD; 'all')")
    p.add_argument("--out", default=None)
    p.add_argument("--prebuild-only", action="store_true")
    p.add_argument("--stream-k", action="store_true", help="also time stream-K candidates (stream_k_extra)")
    p.add_argument("--taken", action="store_true", help="only the points where the rule takes the tokens on A")
    p.add_argument("--max-waves", type=float, default=None, help="only points of fewer waves of the default tile")
    p.add_argument("--changed", action="store_true", help="only points whose tile previous_rule gave otherwise")
    p.add_argument("--no-w4a16-on-a", action="store_true", help="--stream-k without the W4A16-on-A candidates")
    p.add_argument("--widths", action="store_true", help="time fitted weight-tile widths (width_extra)")
    p.add_argument("--fitted", action="store_true", help="only points where fitted_weight_width changes the tile")
    p.add_argument("--padded", action="store_true", help="PADDED's layers where the tokens-on-A rule holds, W4A16 "
                   "only, with padded_extra's candidates")
    p.add_argument("--flip-stream-k", action="store_true", help="with --padded: also the tokens-on-A tile with "
                   "stream-K flipped")
    p.add_argument("--rule", action="store_true", help="points where nvfp4_w4a16_on_a holds or the fitted width "
                   "changes the tile, with rule_extra's candidates")
    args = p.parse_args()
    fit = [l for l in LAYERS if l not in HELD]
    fit = [l for l in fit if l not in CHANGED and l not in K_BOUND and l not in RULE]
    rule = ",".join(list(RULE) + ["llama3.2-1b.kv", "glm4-9b.kv", "qwen2-0.5b.q"])
    fit = [l for l in fit if l not in PADDED and l not in HELD_PADDED]
    if args.padded and args.layers is None:
        args.layers = ",".join(PADDED)
    args.layers = {"held": ",".join(HELD), "all": ",".join(LAYERS), "changed": ",".join(CHANGED), "rule": rule}.get(
        args.layers, args.layers or ",".join(fit))
    global W4A16_ON_A, W4A4, FLIP
    W4A16_ON_A = not args.no_w4a16_on_a
    W4A4 = not args.padded
    FLIP = args.flip_stream_k
    points = [(M, *LAYERS[l]) for l in args.layers.split(",") for M in map(int, args.ms.split(","))]
    names = [l for l in args.layers.split(",") for _ in args.ms.split(",")]
    if args.taken:
        names, points = zip(*[(n, p) for n, p in zip(names, points) if sm90.nvfp4_tokens_on_a(*p)])
    if args.max_waves:
        names, points = zip(*[(n, p) for n, p in zip(names, points) if waves(*p) < args.max_waves])
    if args.changed:
        names, points = zip(*[(n, p) for n, p in zip(names, points)
                              if previous_rule(*p) != sm90.default_nvfp4_tokens_on_a_config(*p)])
    if args.fitted:
        names, points = zip(*[(n, p) for n, p in zip(names, points) if sm90.nvfp4_tokens_on_a(*p) and (
            lambda c: fitted_weight_width(p[1], c.tile_n) != c.tile_n)(sm90.default_nvfp4_tokens_on_a_config(*p))])
    if args.rule:
        names, points = zip(*[(n, p) for n, p in zip(names, points) if (sm90.nvfp4_w4a16_on_a(*p) or (
            sm90.nvfp4_tokens_on_a(*p) and unfitted_width(*p) != sm90.default_nvfp4_tokens_on_a_config(*p).tile_n))
            and sm90.default_nvfp4_skinny_config(*p, nvfp4_activations=False) is None])  # (skinny: W4A16 default)
    if args.padded:
        names, points = zip(*[(n, p) for n, p in zip(names, points) if sm90.nvfp4_tokens_on_a(*p)
                              and sm90.default_nvfp4_skinny_config(*p, nvfp4_activations=False) is None])
    extra = (padded_extra if args.padded else stream_k_extra if args.stream_k else width_extra if args.widths else rule_extra if args.rule
             else no_extra)
    prebuild(points, extra)
    if args.prebuild_only:
        return
    rows = []
    for name, (M, N, K) in zip(names, points):
        fns, copies, on_a, outs = contenders(M, N, K, extra)
        for k, f in fns.items():
            if k != "bf16":
                f(0)
        # the same products: every W4A4 run agrees with the pass and every W4A16 run with the swapped W4A16 kernel
        # within accumulation order (bf16 outputs)
        d = {}
        for k, o in outs.items():
            if k not in ("any", "pass", "w4a16"):
                ref = outs["w4a16" if k.startswith("w4a16") else "pass"].double()
                d[k] = ((o.double() - ref).norm() / ref.norm()).item()
        assert all(v < 4e-3 for v in d.values()) and not any(o.isnan().any() for k, o in outs.items() if k != "any"), (name, M, d)
        # --stream-k: the pass is known from the fit and held runs (fit.json, held.json), so only checked
        t = bench({k: f for k, f in fns.items() if not (args.stream_k and k == "w4a4_pass")}, copies)
        row = {"layer": name, "M": M, "N": N, "K": K, "on_a": on_a.label(), "us": t, "regs_vs_pass": d.get("regs"),
               "vs_reference": d, "w4a16_default_on_a": sm90.nvfp4_w4a16_on_a(M, N, K),
               "swapped": sm90.default_nvfp4_config(M, N, K).label()}
        rows.append(row)
        if args.padded:
            print(f"{name:18s} M={M:6d} N={N:6d} K={K:6d} default {'on A' if row['w4a16_default_on_a'] else 'swapped'}"
                  f" (on A {on_a.label()}, swapped {row['swapped']}) " + " ".join(f"{k}={v:9.1f}" for k, v in t.items())
                  + f"  on_a/swapped={t['w4a16_swapped'] / t['w4a16_on_a']:.3f}x  default/bf16={t['bf16'] / t['w4a16']:.3f}x"
                  + f"  on_a/bf16={t['bf16'] / t['w4a16_on_a']:.3f}x  swapped/bf16={t['bf16'] / t['w4a16_swapped']:.3f}x"
                  + (f"  flip/on_a={t['w4a16_on_a'] / t['w4a16_on_a_flip']:.3f}x" if FLIP else ""), flush=True)
        else:
            print(f"{name:18s} M={M:6d} N={N:6d} K={K:6d} {on_a.label():32s} " +
                  " ".join(f"{k}={v:9.1f}" for k, v in t.items()) +
                  f"  regs/bf16={t['bf16'] / t['w4a4_regs']:.3f}x" + (f"  regs/pass={t['w4a4_pass'] / t['w4a4_regs']:.3f}x"
                  f"  pass/bf16={t['bf16'] / t['w4a4_pass']:.3f}x" if "w4a4_pass" in t else "") + best_extra(t),
                  flush=True)
        del fns
        torch.cuda.empty_cache()
        if args.out:  # after every point: a run cut short keeps what it timed
            json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, open(args.out, "w"), indent=1)


if __name__ == "__main__":
    sys.exit(main())
