#!/usr/bin/env bash
# Before / after on one GPU: the previous code (change.diff reversed) in /tmp/site-old, this tree in
# /tmp/scalemm-site (scripts/device_run.sh), each timing the expert layers' micro-steps against bf16 in its own
# process, alternated twice; then one launch-order profile of each. Usage (after device_run.sh): bash ab.sh OUT
set -uo pipefail
OUT=$1
HERE=perf/results/h100/train_launch_gaps
rm -rf /tmp/old && mkdir -p /tmp/old
cp -r $(ls -A | grep -v -E '^(\.git|\.whl|\.jitcache-pack|perf|tests|results)$') /tmp/old/ 2>/dev/null
(cd /tmp/old && patch -s -R -p1 < "$OLDPWD/$HERE/change.diff") || exit 1
rm -rf /tmp/site-old && python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --no-cache-dir \
  --target /tmp/site-old /tmp/old || exit 1
ARGS="--only moe-layers --graphs --cache-weight --fuse-wgrad-accumulation --contenders delayed|tensorwise"
for run in 1 2; do
  for v in old new; do
    site=/tmp/scalemm-site; [ $v = old ] && site=/tmp/site-old:/tmp/scalemm-site
    mkdir -p "$OUT/$v$run"
    PYTHONPATH=$site timeout 300 python3 perf/train_bench.py --out "$OUT/$v$run" $ARGS 2>&1 | grep -E "layer|Error" | sed "s/^/[$v$run] /"
  done
done
for v in old new; do
  site=/tmp/scalemm-site; [ $v = old ] && site=/tmp/site-old:/tmp/scalemm-site
  PYTHONPATH=$site timeout 200 python3 $HERE/gaps.py --contenders delayed --out "$OUT/gaps_$v" 2>&1 | grep "^==" | sed "s/^/[$v] /"
done
