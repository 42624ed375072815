import scalemm.__main__ as m
from scalemm.jit import build_many
specs = [s for s in m.kernel_set("tests") if s.name.startswith("fp8_gemm")]
res = build_many(specs, jobs=16, progress=False)
bad = [(s.name, e) for s, e in res if e]
print(f"built {len(specs)} fp8 dense kernels, {len(bad)} failed"); [print(n, e[-3000:]) for n, e in bad[:2]]
