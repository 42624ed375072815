"""Build B over build A (A's time / B's time) from ab_quant.py's JSON files (runs of each build averaged), and whether
the two builds' quantizer outputs are the same bytes: `python3 compare.py A1.json,A2.json B1.json,B2.json`."""
import json
import math
import sys


def load(names):
    runs = [json.load(open(n)) for n in names.split(",")]
    out = {}
    for key in ("quant", "chain", "grouped"):
        for pts in zip(*(r[key] for r in runs)):
            tag = (key,) + tuple(pts[0][k] for k in ("E", "T", "M", "N", "K") if k in pts[0])
            out[tag] = ({c: sum(p["us"][c] for p in pts) / len(pts) for c in pts[0]["us"]}, pts[0].get("bits"))
    return out


def gm(v):
    return math.exp(sum(map(math.log, v)) / len(v))


a, b = load(sys.argv[1]), load(sys.argv[2])
ratios, differ = {}, []
for tag in a:
    (ta, bits_a), (tb, bits_b) = a[tag], b[tag]
    if bits_a != bits_b:
        differ.append(tag)
    line = "  ".join(f"{c} {ta[c]:6.2f} -> {tb[c]:6.2f} us ({ta[c] / tb[c]:.3f}x)" for c in ta)
    print(f"{str(tag):34s} {line}")
    for c in ta:
        ratios.setdefault((tag[0], c), []).append((tag, ta[c] / tb[c], ta[c] - tb[c]))
for (key, c), r in sorted(ratios.items()):
    v = [x[1] for x in r]
    print(f"{key:8s} {c:6s} geomean {gm(v):.3f}x min {min(v):.3f} max {max(v):.3f}; saved {min(x[2] for x in r):+.2f}"
          f"..{max(x[2] for x in r):+.2f} us")
for lo, hi in ((1, 8), (9, 64), (65, 256), (257, 1 << 30)):  # dense quantizers by rows
    for c in ("nvfp4", "fp8"):
        v = [x[1] for x in ratios.get(("quant", c), []) if lo <= x[0][1] <= hi]
        if v:
            print(f"quant {c:5s} rows {lo}-{min(hi, 4096)}: geomean {gm(v):.3f}x min {min(v):.3f} max {max(v):.3f}"
                  f" ({len(v)} points)")
print("outputs: same bytes at every point" if not differ else f"outputs DIFFER at {len(differ)} points: {differ}")
