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


def gm(v):
    return math.exp(sum(map(math.log, v)) / len(v))


# dense points by token range: speed over A, the quantizer's added microseconds, and W4A4 / W4A16 against bf16 cuBLAS
for lo, hi in ((1, 8), (9, 16), (17, 64), (65, 256)):
    tags = [t for t in a if t[0] == "points" and lo <= t[1] <= hi]
    if not tags:
        continue
    parts = []
    for c in ("w4a4", "chain", "quant"):
        r = [a[t][c] / b[t][c] for t in tags]
        parts.append(f"{c} {gm(r):.3f} (min {min(r):.3f}, max {max(r):.3f})")
    dq = [b[t]["quant"] - a[t]["quant"] for t in tags]
    vs = {f"{n}:{c}": gm([x[t]["bf16"] / x[t][c] for t in tags]) for n, x in (("A", a), ("B", b)) for c in ("w4a4", "w4a16")}
    w = [b[t]["w4a4"] / b[t]["w4a16"] for t in tags]  # B's W4A16 speed over its W4A4 on the same tokens
    print(f"tokens {lo}-{hi} ({len(tags)} points): " + ", ".join(parts)
          + f"; quant {min(dq):+.2f}..{max(dq):+.2f} us; vs bf16 " + " ".join(f"{k} {v:.3f}" for k, v in vs.items())
          + f"; B w4a16 over w4a4 {min(w):.3f}..{max(w):.3f}")
