#!/usr/bin/env bash
# One device call: this tree ("new", /tmp/scalemm-site) and other builds side by side, each from a source tarball
# .jitcache-pack/<name>-src.tgz (BUILDS, default "head": the commit before the change,
# `git archive --format=tar.gz -o .jitcache-pack/head-src.tgz <commit> -- . ':!perf/results'`); kernels from the
# packs in $PACKS (.jitcache-pack/), the missing ones built here with every core; then $TESTS (pytest args, new build,
# 16 processes; empty: none), ab_quant.py rounds in alternating order (ROUNDS), compare.py of each build against the
# first of BUILDS. KEEP=1: a warm machine's installs and cache of the call before are reused (no setup). Other
# experiments reuse it: SPECS (the kernels to build, default ../nvfp4_exact_rows/specs_chain.py) with SPECS_ARGS,
# BENCH (default ab_quant.py here) with BENCH_ARGS, COMPARE (default compare.py here).
#   PACKS="head-chain.tgz new-quant.tgz" TESTS="tests/test_quantize_gpu.py" ROUNDS="1 2" \
#     bash perf/results/h200/quant_decode_rows/device.sh
set -u
export COLUMNS=240 PYTHONUNBUFFERED=1
R=perf/results/h200/quant_decode_rows
SPECS=${SPECS:-perf/results/h200/nvfp4_exact_rows/specs_chain.py}
BENCH=${BENCH:-$R/ab_quant.py}
COMPARE=${COMPARE:-$R/compare.py}
OUT=${OUT:-/tmp/quant-out}; mkdir -p "$OUT"
BUILDS=${BUILDS:-head}
export SCALEMM_CACHE_DIR=/tmp/scalemm-pack/.jitcache
site() { if [ "$1" = new ]; then echo /tmp/scalemm-site; else echo "/tmp/site-$1:/tmp/scalemm-site"; fi; }
if [ -z "${KEEP:-}" ]; then
  rm -rf /tmp/scalemm-pack; mkdir -p /tmp/scalemm-pack
  for p in ${PACKS:-}; do tar xzf ".jitcache-pack/$p" -C /tmp/scalemm-pack; done
  bash scripts/device_run.sh none >/dev/null 2>&1
  for b in $BUILDS; do
    rm -rf "/tmp/src-$b" "/tmp/site-$b"; mkdir -p "/tmp/src-$b"; tar xzf ".jitcache-pack/$b-src.tgz" -C "/tmp/src-$b"
    (cd "/tmp/src-$b" && python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile \
      --no-cache-dir --target "/tmp/site-$b" .) || echo "install $b FAILED"
  done
  for v in new $BUILDS; do
    PYTHONPATH=$(site $v) python3 "$SPECS" ${SPECS_ARGS:-} --build --jobs "$(nproc)" 2>&1 | tail -1
  done
fi
echo "setup ${SECONDS}s"; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
if [ -n "${TESTS:-}" ]; then
  PYTHONPATH=/tmp/scalemm-site python3 scripts/run_gpu_tests.py --shards 16 --timeout "${TEST_TIMEOUT:-300}" \
    --rerun-failed --log-dir /tmp/test-shards $TESTS > "$OUT/tests.log" 2>&1; echo "tests rc $? at ${SECONDS}s"
  tail -15 "$OUT/tests.log"; cp /tmp/test-shards/shards.log "$OUT/test-shards.log" 2>/dev/null || true
fi
for r in ${ROUNDS:-}; do
  order="new $BUILDS"; [ $((r % 2)) = 0 ] && order="$(echo $BUILDS | tr ' ' '\n' | tac | paste -sd' ') new"
  for v in $order; do
    PYTHONPATH=$(site $v) timeout 280 python3 "$BENCH" "$OUT/$v$r.json" ${BENCH_ARGS:-} > "$OUT/$v$r.log" 2>&1 ||
      { echo "$v$r FAILED"; tail -5 "$OUT/$v$r.log"; }
    echo "$v$r done at ${SECONDS}s"
  done
done
base=${BUILDS%% *}
for v in new ${BUILDS#$base}; do
  a=$(ls "$OUT"/$base[0-9]*.json 2>/dev/null | paste -sd,); b=$(ls "$OUT"/$v[0-9]*.json 2>/dev/null | paste -sd,)
  [ -n "$a" ] && [ -n "$b" ] && python3 "$COMPARE" "$a" "$b" > "$OUT/compare-$v.txt" &&
    { echo "== $v over $base"; tail -14 "$OUT/compare-$v.txt"; }
done
# the results travel as few files: the runs' JSON and logs in one tarball
(cd "$OUT" && tar czf runs.tgz --remove-files $(ls *[0-9].json *[0-9].log 2>/dev/null)) 2>/dev/null || true
