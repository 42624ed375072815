"""pack(out, specs): a .tgz of the JIT-cache entries (.jitcache/kernels/...) of `specs` that are built."""
import sys, os, tarfile, torch
from scalemm.jit import cache_key, cache, cache_dir, _nvcc_release
def pack(out, specs):
    nv=_nvcc_release(); root=cache_dir(); dirs=set(); miss=[]
    for s in specs:
        e=cache.entry_dir(root, s.name, cache_key(s, s.render()), nv)
        (dirs.add(e) if (e/"kernel.so").exists() else miss.append(s.name))
    with tarfile.open(out,"w:gz") as t:
        for e in sorted(dirs): t.add(e, arcname=os.path.join(".jitcache", os.path.relpath(e, root)))
    print(len(dirs),"packed",len(miss),"missing",miss, os.path.getsize(out)>>20,"MB")
