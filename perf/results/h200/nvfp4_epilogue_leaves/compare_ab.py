import json, math, sys
d = sys.argv[1]
def load(f): return {(p["M"],p["N"],p["K"]): p["us"] for p in json.load(open(f"{d}/{f}"))["points"]}
o1,o2,n1,n2 = (load(f) for f in ("old1.json","old2.json","new1.json","new2.json"))
keys = sorted(o1)
for kind in ("w4a16","w4a4"):
    for M in sorted({k[0] for k in keys}):
        rs=[min(o1[k][kind], o2[k][kind])/min(n1[k][kind], n2[k][kind]) for k in keys if k[0]==M]
        print(kind, M, f"{math.exp(sum(map(math.log,rs))/len(rs)):.3f}", " ".join(f"{r:.2f}" for r in rs))
for a,b,n in ((o1,o2,"old1/old2"),(n1,n2,"new1/new2")):
    rs=[a[k]["w4a16"]/b[k]["w4a16"] for k in keys]; print(n, round(math.exp(sum(map(math.log,rs))/len(rs)),3), round(min(rs),3), round(max(rs),3))
