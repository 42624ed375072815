"""Summaries of fit.json / held.json (ab.py): over the points the rule (NVFP4_TOKENS_ON_A_*) takes, the pass's time
over the tokens on A's, and W4A4's speed over bf16 cuBLAS before (pass) and after (the rule's pick) at >= 4096
tokens."""
import json
import math
import sys

from scalemm.cutlass_kernels.configs import sm90


def geo(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


for f in sys.argv[1:]:
    rows = json.load(open(f))["rows"]
    taken = [r for r in rows if sm90.nvfp4_tokens_on_a(r["M"], r["N"], r["K"])]
    gain = [r["us"]["w4a4_pass"] / r["us"]["w4a4_regs"] for r in taken]
    print(f"{f}: {len(rows)} points, the rule takes {len(taken)}: pass / tokens on A geomean {geo(gain):.3f}x, "
          f"min {min(gain):.3f}x, max {max(gain):.3f}x")
    left = [r["us"]["w4a4_pass"] / r["us"]["w4a4_regs"] for r in rows if r not in taken]
    print(f"  not taken: {len(left)} points, there tokens on A would run {geo(left):.3f}x (min {min(left):.3f}x, "
          f"max {max(left):.3f}x)")
    pre = [r for r in rows if r["M"] >= 4096]
    before = [r["us"]["bf16"] / r["us"]["w4a4_pass"] for r in pre]
    after = [r["us"]["bf16"] / (r["us"]["w4a4_regs"] if r in taken else r["us"]["w4a4_pass"]) for r in pre]
    w16 = [r["us"]["bf16"] / r["us"]["w4a16"] for r in pre]
    print(f"  >= 4096 tokens ({len(pre)} points), of bf16 cuBLAS: W4A4 before {geo(before):.3f}x "
          f"(min {min(before):.3f}x), after {geo(after):.3f}x (min {min(after):.3f}x); W4A16 {geo(w16):.3f}x "
          f"(min {min(w16):.3f}x)")
