"""Regret of the wgmma loop's split model (nvfp4_skinny.cuh choose_splits, replicated) on a skinny_splits.py log, and
a grid over its constants (saturating CTAs, overhead chunks, fractional waves, a per-split cost).
  python3 fit_split_model.py run1_splits.txt
"""
import math
import re
import sys

def load(path):
    pts=[]
    for l in open(path):
        m=re.match(r"M=(\d+) N=(\d+) K=(\d+) bf16=([\d.]+) s0->(\d+) (.*)",l)
        if not m: continue
        M,N,K=map(int,m.groups()[:3]); auto=int(m.group(5))
        t={int(a):float(b) for a,b in re.findall(r"s(\d+)=([\d.]+)\(",m.group(6)) if a!='0'}
        t0=float(re.search(r"s0=([\d.]+)",m.group(6)).group(1))
        pts.append(dict(M=M,N=N,K=K,auto=auto,t=t,t0=t0,bf16=float(m.group(4))))
    return pts
pts=load(sys.argv[1])
def default_regime(p):
    nk=p['N']*p['K']
    return p['M']<=16 or (p['M']<=32 and nk<=2**26) or (p['M']<=64 and nk<=2**25)
def fit_of(M):
    t=(M+7)//8
    return 132*(3 if t>4 else 4)
def choose(p, sat, ov, frac=False, cs=0.0):
    tiles=-(-p['N']//64); chunks=-(-p['K']//128); fit=fit_of(p['M']); sms=132
    best=None
    for s in (1,2,4,8):
        if s>chunks: continue
        ctas=tiles*s; per=-(-chunks//s)
        waves=ctas/fit if frac else -(-ctas//fit)
        busiest=-(-min(ctas,fit)//sms)
        cost=waves*(per+ov)*max(sat,2*busiest)+cs*s
        if best is None or cost<best[0]-1e-9: best=(cost,s)
    return best[1]
def score(params, sel):
    regs=[p['t'][choose(p,*params)]/min(p['t'].values()) for p in pts if sel(p)]
    return math.exp(sum(map(math.log,regs))/len(regs)), max(regs), len(regs)
cur=(4,4,False,0.0)
print("model check (picks == launcher):", sum(choose(p,*cur)==p['auto'] for p in pts), "/", len(pts))
print("current default-regime:", score(cur, default_regime), "all:", score(cur, lambda p: True))
res=[]
for sat in (2,3,4,5,6,8):
    for ov in (0,1,2,3,4,6,8,12):
        for frac in (False,True):
            for cs in (0,1,2,4,8,16,32):
                prm=(sat,ov,frac,cs)
                res.append((score(prm,default_regime)[:2], score(prm,lambda p: True)[:2], prm))
res.sort()
for r in res[:12]: print(r)
print()
for p in pts:
    s=choose(p,*cur); b=min(p['t'],key=p['t'].get)
    r=p['t'][s]/p['t'][b]
    if r>1.04: print(p['M'],p['N'],p['K'],"pick",s,"best",b,f"{r:.3f}", "default" if default_regime(p) else "")
