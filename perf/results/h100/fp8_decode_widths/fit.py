"""The 33-128-token rule (configs.sm90._decode_config) on the fit runs' timings: for each point, the time of the rule's
pick and of the previous rule's (_token_tiles_config, the "scalemm" column of those runs) where both were timed.

  python3 perf/results/h100/fp8_decode_widths/fit.py      # no GPU needed
"""
import json
import math
import os

from scalemm.cutlass_kernels.configs import default_config, sm90

HERE = os.path.dirname(os.path.abspath(__file__))
rows = []
for name in ("fit_run1.json", "fit_run2.json"):
    rows += json.load(open(os.path.join(HERE, name)))["rows"]
g = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))
per, lows, missing = {}, [], []
for r in rows:
    M, N, K, us = r["M"], r["N"], r["K"], r["us"]
    new, old = default_config(M, N, K).label(), sm90._token_tiles_config(M, N, sm90.REFERENCE_SMS).label()
    t = us["scalemm"] if new == old else us.get(new)
    if t is None:
        missing.append((r["layer"], M, new))
        continue
    per.setdefault(M, []).append(us["scalemm"] / t)
    lows.append((us["scalemm"] / t, r["layer"], M, new))
xs = [x for v in per.values() for x in v]
print(f"{len(xs)} points: the rule's pick {g(xs):.3f}x the previous rule's speed; by tokens:")
print("  " + ", ".join(f"{M}: {g(v):.3f}" for M, v in sorted(per.items())))
print("lowest:", ", ".join(f"{x:.3f} ({layer} at {M}, {k})" for x, layer, M, k in sorted(lows)[:5]))
print(f"not timed in the fit runs ({len(missing)}):", missing)
