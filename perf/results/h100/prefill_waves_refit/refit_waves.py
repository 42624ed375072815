"""Offline refits of PREFILL_TILE_MODEL (sm90.py) with other wave counts, on a saved fp8_prefill_model.json (no GPU):
  ceil: ceil(tiles / SMs) (the model); frac: tiles / SMs; tailA: full waves + a partial last wave costing A + (1 - A)
  x its fraction; ppA: tailA for ping-pong kernels only. Fitted on the sweep's rows, each refitted rule scored by the
  measured times of its picks (the one-wave rule's points keep the measured rule), on the sweep and held out.

  python3 perf/results/h100/prefill_waves_refit/refit_waves.py perf/results/h100/fp8_prefill_narrow/run6_rule_both_c1x1_fp8_prefill_model.json
"""
import json, math, os, sys, torch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', '..'))
from fp8_prefill_model import held_out, gm
from scalemm.cutlass_kernels.configs import sm90
rows = json.load(open(sys.argv[1]))['rows']
rows = [r for r in rows if r['M'] >= 1024]
S = 132
def waves_fn(kind):
    def w(cfg, M, N):
        t = sm90.tile_count(cfg, M, N)
        if kind == 'ceil': return math.ceil(t / S)
        if kind == 'frac': return t / S
        if kind.startswith('tail'):  # full waves + a partial last wave at cost alpha + (1-alpha) * fraction
            a = float(kind[4:]); full, rem = divmod(t, S)
            return full + (0 if rem == 0 else a + (1 - a) * rem / S)
        if kind.startswith('pp'):  # fractional tail only for ping-pong
            a = float(kind[2:]); full, rem = divmod(t, S)
            if cfg.schedule != 'pingpong': return math.ceil(t / S)
            return full + (0 if rem == 0 else a + (1 - a) * rem / S)
    return w
def fit(rows, w):
    tr = [r for r in rows if not held_out(r)]
    out = []
    for cfg, *_ in sm90.PREFILL_TILE_MODEL:
        sel = [r for r in tr if r['us'].get(cfg.label())]
        ws = [w(cfg, r['M'], r['N']) for r in sel]
        X = torch.tensor([[wi * r['K'], wi, 1.0] for wi, r in zip(ws, sel)], dtype=torch.float64)
        y = torch.tensor([r['us'][cfg.label()] for r in sel], dtype=torch.float64)
        coef = torch.linalg.lstsq(X / y[:, None], torch.ones_like(y)[:, None]).solution[:, 0]
        err = X @ coef / y - 1
        out.append((cfg, *map(float, coef), float(err.square().mean().sqrt())))
    return out
def pick(model, w, r):
    ents = [e for e in model if e[0].schedule != 'pingpong' or sm90.tile_count(e[0], r['M'], r['N']) > S]
    return min(ents, key=lambda e: w(e[0], r['M'], r['N']) * (e[1] * r['K'] + e[2]) + e[3])[0]
for kind in ['ceil', 'frac', 'tail0.25', 'tail0.5', 'tail0.75', 'pp0', 'pp0.25', 'pp0.5']:
    w = waves_fn(kind)
    model = fit(rows, w)
    res = {}
    for part, sel in (('sweep', [r for r in rows if not held_out(r)]), ('held', [r for r in rows if held_out(r)])):
        # where the one-wave rule decides, use the rule's actual timing (scalemm) since it is the same kernel
        xs = []
        for r in sel:
            if sm90.one_wave_prefill_config(r['M'], r['N'], S) is not None:
                xs.append(r['us']['torch_rowwise'] / r['us']['scalemm'])
            else:
                xs.append(r['us']['torch_rowwise'] / r['us'][pick(model, w, r).label()])
        res[part] = (gm(xs), min(xs), sum(x < 0.95 for x in xs))
    cur = {}
    for part, sel in (('sweep', [r for r in rows if not held_out(r)]), ('held', [r for r in rows if held_out(r)])):
        xs = [r['us']['torch_rowwise'] / r['us']['scalemm'] for r in sel]
        cur[part] = (gm(xs), min(xs), sum(x < 0.95 for x in xs))
    rms = ' '.join(f"{m[0].label().replace('x128_c2x1','')[1:]}:{m[4]:.3f}" for m in model)
    print(f"{kind:<9} sweep {res['sweep'][0]:.4f} min {res['sweep'][1]:.3f} n<.95 {res['sweep'][2]} | held {res['held'][0]:.4f} min {res['held'][1]:.3f} n<.95 {res['held'][2]} | rms {rms}")
print('measured rule', cur)
