"""Same-process A/B of the grouped FP8 wgrad that adds dW into .grad (accumulate=True: GroupedLinear's
fuse_wgrad_accumulation) with the epilogue's D staging changed. The kept kernel (own_source_buffers_t,
perf/results/h100/wgrad_source_staging/) has the builder's 4 C buffers of its own and 2 D buffers: an epilogue
subtile's TMA store must have been read out of a D buffer two subtiles later. The candidates give D 3 or 4 buffers
(and C 4-6); the shared memory they take comes out of the mainloop's stages only where the stage count drops
(reported: the kernel's scalemm_exp_stages, mainloop x 100 + C x 10 + D).

Reuses ../wgrad_source_staging/ab.py's harness (its run / step functions) with these candidates and the experiment
template cutlass_kernels/templates/grouped_gemm_sm90_stages_exp.cu (not part of scalemm; the file is this
directory's stages_exp.cu, copied there to run).
  python3 perf/results/h100/wgrad_store_staging/ab.py --build        (jobs=2, on the CPU machine)
  python3 perf/results/h100/wgrad_store_staging/ab.py --out OUT [--step auto]
"""
import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("wgrad_source_staging_ab",
                                               os.path.join(HERE, "..", "wgrad_source_staging", "ab.py"))
base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(base)

from scalemm import jit  # noqa: E402
from scalemm.jit import KernelSpec  # noqa: E402

# name: (accumulate, None for the kept kernel or (StagesC, StagesD, ReuseSmemC))
base.CANDIDATES = {"cur": (True, None), "write": (False, None), "c4d3": (True, (4, 3, "false")),
                   "c4d4": (True, (4, 4, "false")), "c6d2": (True, (6, 2, "false")),
                   "c5d4": (True, (5, 4, "false")), "c6d3": (True, (6, 3, "false"))}


def exp_spec(spec, staging):
    c, d, reuse = staging
    return KernelSpec(name=f"{spec.name}_c{c}d{d}{'r' if reuse == 'true' else 'o'}",
                      template="grouped_gemm_sm90_stages_exp.cu",
                      params={**dict(spec.params), "EXP_STAGES_C": str(c), "EXP_STAGES_D": str(d),
                              "EXP_REUSE_C": reuse})


base.exp_spec = exp_spec


def report_stages(names):
    for n in names:
        st = base.CANDIDATES[n][1]
        if st:
            for s in base.specs([n]):
                lib = jit.build(s).lib
                print(f"{n}: {s.name} stages (mainloop*100 + C*10 + D) = {lib.scalemm_exp_stages()}", flush=True)


if __name__ == "__main__":
    names = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--candidates=")),
                 ",".join(base.CANDIDATES)).split(",")
    if "--build" not in sys.argv:
        report_stages(names)
    base.main()
