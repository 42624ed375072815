"""Kernel specs the default NVFP4 dispatch runs at the A/B points (1-64 tokens, ab_defaults.py's nine layers; 132
SMs) for the scalemm on sys.path (PYTHONPATH=a variant's install for its kernels): `python specs_ab.py [--build]
[--pack OUT.tgz]` (the pack: those kernels' JIT-cache entries, to carry and unpack on the device)."""
import sys, torch
sys.path.insert(0, __import__("os").path.dirname(__file__))  # pack_specs.py beside it
from scalemm.gemm_nvfp4 import skinny_kernel_spec, nvfp4_gemm_kernel_spec, dequant_kernel_spec
from scalemm.cutlass_kernels import configs as _configs
from scalemm import epilogues as epi
from scalemm.quantize import kernel_specs as qs
from scalemm.jit import build_many
sm90 = _configs.for_arch("sm90")
bf = torch.bfloat16
SHAPES = [(4096, 4096), (6144, 4096), (5120, 2048), (8192, 8192), (14336, 4096), (4096, 14336), (576, 7168),
          (24576, 1536), (2048, 4096)]
specs, other = {}, {}
for N, K in SHAPES:
    for M in (1, 4, 8, 16, 32, 48, 64):
        for x4 in (False, True):
            c = sm90.default_nvfp4_skinny_config(M, N, K, nvfp4_activations=x4, num_sms=132)
            if c is None:
                cfg = sm90.default_nvfp4_config(M, N, K, num_sms=132)
                s, _ = nvfp4_gemm_kernel_spec(cfg.compiled(), act_dtype=bf, out_dtype=bf, epilogue=epi.scaled(bf, bias=True, activation=None))
                other[s.name] = s
            else:
                if c.mainloop == "resident":  # _resident_where_it_pays may fall back to the stepped loop
                    import dataclasses
                    st = dataclasses.replace(c, mainloop="stepped")
                    s = skinny_kernel_spec(st, act_dtype="nvfp4" if x4 else bf, out_dtype=bf)
                    specs[s.name] = s
                s = skinny_kernel_spec(c, act_dtype="nvfp4" if x4 and c.mainloop != "wgmma" else bf, out_dtype=bf)
                specs[s.name] = s
print("skinny:", sorted(specs), "\nother:", sorted(other))
allspecs = list(specs.values()) + list(other.values()) + [dequant_kernel_spec()] + list(qs())
if "--build" in sys.argv:
    print([x[0].name for x in build_many(allspecs, jobs=2) if x[1]])
if "--pack" in sys.argv:
    from pack_specs import pack; pack(sys.argv[sys.argv.index("--pack") + 1], allspecs)
