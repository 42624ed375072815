"""Keep only the .jitcache entries of the given spec list (python module:attr returning specs)."""
import os, sys, shutil, importlib
from pathlib import Path
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scalemm.jit import cache
mod, attr = sys.argv[1].split(":")
specs = getattr(importlib.import_module(mod), attr)()
keep = {cache.cache_key(s, s.render()) for s in specs}
root = Path(".jitcache/kernels")
kept = 0
for d in root.iterdir():
    if not any(d.name.endswith(f"-{k}-nvcc13.0.88") for k in keep):
        shutil.rmtree(d)
    else:
        kept += 1
print("kept", kept, "of", len(keep))
