"""Per token count, the geomean over the layers of min(base runs) / min(variant runs) (> 1: the variant is faster):
`python3 compare_ab.py DIR BASE VARIANT...` with DIR/<base>1.json, DIR/<base>2.json, DIR/<variant>1.json, ..."""
import json, math, sys
from pathlib import Path
d = Path(sys.argv[1])
def load(f): return {(p["M"], p["N"], p["K"]): p["us"] for p in json.loads((d / f).read_text())["points"]}
def runs(v): return [load(f.name) for f in sorted(d.glob(f"{v}[0-9].json"))]
def gm(rs): return math.exp(sum(map(math.log, rs)) / len(rs))
base = runs(sys.argv[2])
keys = sorted(base[0])
for v in sys.argv[3:]:
    var = runs(v)
    kinds = sorted(base[0][keys[0]].keys() - {"bf16"})  # ab_defaults: w4a16, w4a4; ab_splits: s0, s1, ...
    for kind in kinds:
        for M in sorted({k[0] for k in keys}):
            rs = [min(h[k][kind] for h in base) / min(r[k][kind] for r in var) for k in keys if k[0] == M]
            print(f"{v:5s} {kind:5s} M={M:3d} {gm(rs):.3f}  " + " ".join(f"{r:.2f}" for r in rs))
    rs = [min(h[k][kind] for h in base) / min(r[k][kind] for r in var) for k in keys for kind in kinds]
    print(f"{v:5s} all {gm(rs):.3f} min {min(rs):.3f} max {max(rs):.3f}")
if len(base) > 1:
    rs = [base[0][k][kind] / base[1][k][kind] for k in keys for kind in kinds]
    print(f"{sys.argv[2]}1/{sys.argv[2]}2 {gm(rs):.3f} min {min(rs):.3f} max {max(rs):.3f}")
