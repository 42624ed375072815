"""Speed of build B over build A per contender (A's time / B's time), from ab_chain.py's JSON files (runs of each
build averaged): `python3 compare.py A1.json,A2.json B1.json,B2.json`."""
import json
import math
import sys


def load(names):
    runs = [json.load(open(n)) for n in names.split(",")]
    out = {}
    for key in ("points", "grouped"):
        for pts in zip(*(r[key] for r in runs)):
            tag = (key,) + tuple(pts[0][k] for k in ("E", "T", "M", "N", "K") if k in pts[0])
            out[tag] = {c: sum(p["us"][c] for p in pts) / len(pts) for c in pts[0]["us"]}
    return out


a, b = load(sys.argv[1]), load(sys.argv[2])
ratios = {}
for tag in a:
    line = " ".join(f"{c}={a[tag][c] / b[tag][c]:.3f}" for c in ("w4a16", "w4a4", "quant", "chain"))
    extra = f"  B: w4a4 {b[tag]['w4a4']:.1f} us chain {b[tag]['chain']:.1f} us" + (
        f" bf16 {b[tag]['bf16']:.1f} us (chain {b[tag]['bf16'] / b[tag]['chain']:.2f}x of bf16)" if "bf16" in b[tag] else "")
    print(f"{str(tag[1:]):28s} {line}{extra}")
    for c in ("w4a16", "w4a4", "quant", "chain"):
        ratios.setdefault((tag[0], c), []).append(a[tag][c] / b[tag][c])
for (key, c), r in sorted(ratios.items()):
    print(f"{key:8s} {c:6s} geomean {math.exp(sum(map(math.log, r)) / len(r)):.3f} min {min(r):.3f} max {max(r):.3f}")
