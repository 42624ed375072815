import os, sys; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from specs import spec
from variants import FAST, FULL
from scalemm.jit import build_many
specs = [spec(c, True) for c in FAST.values()] + [spec(c, False) for c in FULL.values()]
build_many(specs, jobs=2, progress=True)
print("done")
