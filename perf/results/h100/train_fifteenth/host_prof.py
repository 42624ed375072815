import cProfile, pstats, time, torch, io
import scalemm
from scalemm.recipes import FP8Rowwise
x = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
key = FP8Rowwise().key()
def q():
    return torch.ops.scalemm.train_quantize(x, key, "input", True, True)
def qd():
    return scalemm.quantize_fp8(x, scaling="token", rowwise=True, columnwise=True)
for f in (q, qd):
    for _ in range(5): f()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(50): f()
    dt = (time.perf_counter() - t) / 50 * 1e6
    torch.cuda.synchronize()
    print(f.__name__, "host us per call", round(dt, 1))
pr = cProfile.Profile(); pr.enable()
for _ in range(50): q()
pr.disable(); torch.cuda.synchronize()
s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(45); print(s.getvalue()[:9000])
s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(25); print(s.getvalue()[:6000])
