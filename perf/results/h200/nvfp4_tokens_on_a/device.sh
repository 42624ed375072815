#!/bin/bash
# One device call: install, then STAGES of "tests" (the GPU tests below in 12 shards, with the benchmark's kernels
# prebuilt beside them), "fuzz" (tests/test_fuzz_gpu.py's dense NVFP4 cases on new seeds) and "bench" (ab.py). The JIT cache stays in .jitcache (ignored: kept between warm calls).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SITE=/tmp/scalemm-site
if [ ! -d "$SITE/scalemm" ] || [ "${REINSTALL:-1}" = 1 ]; then
  bash scripts/install_site.sh "$SITE" .whl/nvidia_cutlass*.whl || exit 1
fi
# A JIT cache prebuilt elsewhere (same nvcc) may travel as .jitcache-pack/cache.tgz and extra-*.tgz: unpacked into
# .jitcache on a fresh machine (scripts/unpack_jitcache.sh).
[ -d .jitcache ] || bash scripts/unpack_jitcache.sh .jitcache
export PYTHONPATH=$SITE PYTHONUNBUFFERED=1 SCALEMM_CACHE_DIR=$PWD/.jitcache
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
here=perf/results/h200/nvfp4_tokens_on_a
for stage in ${STAGES:-tests bench}; do
  case $stage in
    tests)
      [ "${PREBUILD:-1}" = 1 ] && (python3 $here/ab.py --prebuild-only ${AB_ARGS:-} > "$OUT/prebuild.log" 2>&1) &
      python3 scripts/run_gpu_tests.py --shards 12 --timeout 520 --rerun-failed --log-dir /tmp/shards \
        tests/test_nvfp4_gemm_gpu.py -k "${TEST_K:-tokens_on_a}" > "$OUT/tests.log" 2>&1
      echo "tests rc=$?"; tail -n 15 "$OUT/tests.log"; cp /tmp/shards/shards.log "$OUT/" 2>/dev/null
      wait; tail -n 3 "$OUT/prebuild.log" 2>/dev/null;;
    fuzz)
      SCALEMM_FUZZ_KINDS=nvfp4_dense SCALEMM_FUZZ_CASES=${FUZZ_CASES:-24} SCALEMM_FUZZ_FIRST=${FUZZ_FIRST:-5200} \
        timeout 400 python3 -m pytest -m gpu tests/test_fuzz_gpu.py -k "nvfp4 and not grouped and not quantization" -q \
        -p no:cacheprovider > "$OUT/fuzz.log" 2>&1; echo "fuzz rc=$?"; tail -n 5 "$OUT/fuzz.log";;
    bench)
      python3 $here/ab.py --out "$OUT/ab.json" ${AB_ARGS:-} 2>&1 | tee "$OUT/ab.log" | tail -n 80;;
  esac
done
