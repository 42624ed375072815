#!/usr/bin/env bash
# One device call: the working tree's build ("tree") and each variant (variants/<v>.cuh in place of nvfp4_skinny.cuh)
# installed side by side, kernels from .jitcache-pack/$PACK; bit-for-bit outputs against the tree's, then
# ../nvfp4_epilogue_leaves/ab_defaults.py (AB=$R/ab_splits.py: fixed splits) rounds in alternating order, then compare_ab.py (each variant's speed over the tree's).
# variants/<v>.cuh: `git show af88057:cutlass_kernels/include/scalemm/sm90/nvfp4_skinny.cuh > variants/<v>.cuh &&
# patch variants/<v>.cuh variants/<v>.patch` (af88057.cuh: the first command alone).
#   PACK=stages.tgz VARIANTS="p4 s86 s110" ROUNDS="1" BITS=1 bash perf/results/h200/nvfp4_wgmma_stages/device_ab.sh
set -u
export COLUMNS=240
R=perf/results/h200/nvfp4_wgmma_stages
OUT=${OUT:-/tmp/ab-out}; mkdir -p "$OUT"
rm -rf /tmp/scalemm-pack; mkdir -p /tmp/scalemm-pack; tar xzf ".jitcache-pack/$PACK" -C /tmp/scalemm-pack
export SCALEMM_CACHE_DIR=/tmp/scalemm-pack/.jitcache
bash scripts/device_run.sh none >/dev/null 2>&1
site() { if [ "$1" = tree ]; then echo /tmp/scalemm-site; else echo "/tmp/site-$1:/tmp/scalemm-site"; fi; }
for v in $VARIANTS; do
  rm -rf "/tmp/src-$v" "/tmp/site-$v"; mkdir -p "/tmp/src-$v"
  tar cf - --exclude=./.whl --exclude=./.jitcache-pack --exclude=./.jitcache --exclude=./perf/results --exclude=./.git . |
    tar xf - -C "/tmp/src-$v"
  cp "${VDIR:-$R/variants}/$v.cuh" "/tmp/src-$v/cutlass_kernels/include/scalemm/sm90/nvfp4_skinny.cuh"
  (cd "/tmp/src-$v" && python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --no-cache-dir \
    --target "/tmp/site-$v" .) || echo "install $v FAILED"
done
echo "setup ${SECONDS}s"; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
if [ "${BITS:-1}" = 1 ]; then
  for v in tree $VARIANTS; do PYTHONPATH=$(site $v) timeout 120 python3 $R/same_bits.py "/tmp/bits-$v.pt" > "$OUT/bits_$v.log" 2>&1 || tail -3 "$OUT/bits_$v.log"; done
  for v in $VARIANTS; do echo -n "$v: "; python3 $R/same_bits.py --compare /tmp/bits-tree.pt "/tmp/bits-$v.pt"; done | tee "$OUT/same_bits.txt"
fi
for r in $ROUNDS; do
  order="tree $VARIANTS"; [ $((r % 2)) = 0 ] && order="$(echo $order | tr ' ' '\n' | tac | tr '\n' ' ')"
  for v in $order; do
    PYTHONPATH=$(site $v) timeout 200 python3 ${AB:-perf/results/h200/nvfp4_epilogue_leaves/ab_defaults.py} "$OUT/$v$r.json" --ms ${MS:-16,32,48,64} > "$OUT/$v$r.log" 2>&1 ||
      { echo "$v$r FAILED"; tail -5 "$OUT/$v$r.log"; }
    echo "$v$r done at ${SECONDS}s"
  done
done
python3 $R/compare_ab.py "$OUT" tree $VARIANTS | tee "$OUT/compare.txt"
