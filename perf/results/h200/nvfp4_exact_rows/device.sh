#!/usr/bin/env bash
# One device call: this tree ("new", /tmp/scalemm-site) and the commit before the exact rows ("old":
# .jitcache-pack/old-src.tgz, `git archive --format=tar.gz -o .jitcache-pack/old-src.tgz b0bd73f -- . ':!perf/results'`)
# side by side; kernels from the packs in $PACKS (.jitcache-pack/), the missing ones built here with every core;
# (BUILD_TESTS=1: also the NVFP4 GPU tests' kernels); then $TESTS (pytest args, new build; empty: none) and ab_chain.py rounds in alternating order (ROUNDS), compare.py.
#   PACKS="new.tgz old.tgz" TESTS="tests/test_quantize_gpu.py" ROUNDS="1 2" bash perf/results/h200/nvfp4_exact_rows/device.sh
set -u
export COLUMNS=240 PYTHONUNBUFFERED=1
R=perf/results/h200/nvfp4_exact_rows
OUT=${OUT:-/tmp/chain-out}; mkdir -p "$OUT"
# KEEP_CACHE=1: add the packs to a warm machine's cache of the call before (its builds kept): a call carries at most
# 64 MiB with the working tree, so a large set of kernels travels in two calls
[ -z "${KEEP_CACHE:-}" ] && rm -rf /tmp/scalemm-pack
mkdir -p /tmp/scalemm-pack
for p in ${PACKS:-}; do tar xzf ".jitcache-pack/$p" -C /tmp/scalemm-pack; done
export SCALEMM_CACHE_DIR=/tmp/scalemm-pack/.jitcache
bash scripts/device_run.sh none >/dev/null 2>&1
rm -rf /tmp/src-old /tmp/site-old; mkdir -p /tmp/src-old; tar xzf .jitcache-pack/old-src.tgz -C /tmp/src-old
(cd /tmp/src-old && python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --no-cache-dir \
  --target /tmp/site-old .) || echo "install old FAILED"
site() { if [ "$1" = new ]; then echo /tmp/scalemm-site; else echo "/tmp/site-old:/tmp/scalemm-site"; fi; }
PYTHONPATH=$(site new) python3 $R/specs_chain.py --build --jobs "$(nproc)" ${BUILD_TESTS:+--tests} 2>&1 | tail -1
PYTHONPATH=$(site old) python3 $R/specs_chain.py --build --jobs "$(nproc)" 2>&1 | tail -1
echo "setup ${SECONDS}s"; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
if [ -n "${TESTS:-}" ]; then  # in 16 pytest processes (scripts/run_gpu_tests.py)
  PYTHONPATH=/tmp/scalemm-site python3 scripts/run_gpu_tests.py --shards 16 --timeout "${TEST_TIMEOUT:-300}" \
    --rerun-failed --log-dir /tmp/test-shards $TESTS > "$OUT/tests.log" 2>&1; echo "tests rc $?"; tail -15 "$OUT/tests.log"
  cp /tmp/test-shards/shards.log "$OUT/test-shards.log" 2>/dev/null || true
fi
for r in ${ROUNDS:-}; do
  order="new old"; [ $((r % 2)) = 0 ] && order="old new"
  for v in $order; do
    PYTHONPATH=$(site $v) timeout 250 python3 $R/ab_chain.py "$OUT/$v$r.json" ${AB_ARGS:-} > "$OUT/$v$r.log" 2>&1 ||
      { echo "$v$r FAILED"; tail -5 "$OUT/$v$r.log"; }
    echo "$v$r done at ${SECONDS}s"
  done
done
if [ -n "${ROUNDS:-}" ]; then
  old=$(for r in $ROUNDS; do echo -n "$OUT/old$r.json,"; done); new=$(for r in $ROUNDS; do echo -n "$OUT/new$r.json,"; done)
  python3 $R/compare.py "${old%,}" "${new%,}" | tee "$OUT/compare.txt"
fi
