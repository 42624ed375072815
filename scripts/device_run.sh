#!/usr/bin/env bash
# Run scalemm on a bare GPU machine (no network): install the carried wheels and scalemm,
# prebuild kernels (cache hits for what was carried), run the GPU tests and the benchmarks,
# and write everything under $OUT (default ./results).
#
#   bash scripts/device_run.sh                 # all stages: build test sweep grouped quant
#   TEST_SHARDS=12 bash scripts/device_run.sh build test  # the GPU tests in 12 pytest processes (run_gpu_tests.py)
#   bash scripts/device_run.sh test sweep      # some stages; also: tune (sweep + candidates), tuned (scalemm.tune
#                                              # over the sweep's points, then tuned vs heuristic; copies the
#                                              # tuned-config cache to $OUT), nvfp4 (NVFP4 config exploration),
#                                              # sanitize (compute-sanitizer over every kernel; logs in $OUT),
#                                              # multigpu (two GPUs: tests/test_multi_gpu.py, then under memcheck),
#                                              # decode (NVFP4 at 1-64 tokens: the skinny kernel's splits against
#                                              # the CUTLASS kernel and bf16 cuBLAS; kernels of --set tests),
#                                              # profile (ncu on one 8192x8192 decode GEMM: skinny (default
#                                              # stepped loop), skinny lean loop, CUTLASS, bf16 cuBLAS;
#                                              # PROFILE_ARGS="--m 8 --n 4096 --k 4096"; and the default
#                                              # skinny kernel's stall samples per SASS instruction:
#                                              # ncu-skinny-sass.csv; PROFILE_KERNELS="skinny lean bf16"
#                                              # picks the kernels), loops (the skinny kernel's main loops
#                                              # against bf16 cuBLAS at 1, 8 and 16 tokens: kernels of
#                                              # --set skinny),
#                                              # pack (tar the JIT cache)
#
# Skinny / decode work in one call: BUILD_SETS="--set decode" bash scripts/device_run.sh build decode profile
# (add TESTS="tests/test_nvfp4_gemm_gpu.py -k skinny" and `test`). Quickest for the skinny kernel alone:
# BUILD_SETS="--set skinny" TESTS="tests/test_nvfp4_gemm_gpu.py -k skinny" PROFILE_KERNELS="skinny lean bf16" \
#   bash scripts/device_run.sh build test loops profile
# (--set skinny, 51 kernels: build it on the device, ~1-2 min with 16 jobs; its cache is larger than a call carries).
# Needs, in the repo root: .whl/ with nvidia_cutlass-4.2.*.whl (torchao's wheel optional) and,
# to skip compiling, .jitcache/ (SCALEMM_CACHE_DIR) built on a machine with the same nvcc, or the same
# packed as .jitcache-pack/cache.tgz (below).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/results}
mkdir -p "$OUT"
# A JIT cache built on a CPU machine may also travel compressed (CUTLASS kernels shrink about 3x, so more of
# them fit in a carry): `tar czf .jitcache-pack/cache.tgz .jitcache` in the repo root (/.jitcache*/ is
# git-ignored). Without SCALEMM_CACHE_DIR set, such a pack and any .jitcache-pack/extra-*.tgz are unpacked to /tmp
# (scripts/unpack_jitcache.sh) and used by the stages below.
if [ -z "${SCALEMM_CACHE_DIR:-}" ] && ls .jitcache-pack/*.tgz > /dev/null 2>&1; then
  rm -rf /tmp/scalemm-pack && bash scripts/unpack_jitcache.sh /tmp/scalemm-pack && SCALEMM_CACHE_DIR=/tmp/scalemm-pack
fi
export PYTHONUNBUFFERED=1 SCALEMM_CACHE_DIR=${SCALEMM_CACHE_DIR:-$PWD/.jitcache}
stages=${*:-build test sweep grouped quant}
has() { [[ " $stages " == *" $1 "* ]]; }
SITE=/tmp/scalemm-site
bash scripts/install_site.sh "$SITE" || exit 1
export PYTHONPATH=$SITE
# Everything printed goes to $OUT/run.log too (the results travel as few files: the log, JSON, PNG).
exec > >(tee -a "$OUT/run.log") 2>&1
python3 -m scalemm info
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
status=0
touch /tmp/scalemm-start
if has build; then
  python3 -m scalemm build ${BUILD_SETS:---set all} --jobs "$(nproc)" 2>&1 | tail -n 40 || status=1
fi
if has test; then
  if [ "${TEST_SHARDS:-1}" -gt 1 ]; then  # N pytest processes side by side: kernels missing from the cache compile in parallel
    # The shards share the GPU's memory (a large test can run out of it beside others): the failures run again alone
    # and both results are reported. The per-shard logs stay in /tmp; $OUT gets them in one file.
    python3 scripts/run_gpu_tests.py --shards "$TEST_SHARDS" --timeout 1200 --rerun-failed \
      --log-dir /tmp/scalemm-test-shards ${TESTS:-tests} || status=1
    cp /tmp/scalemm-test-shards/shards.log "$OUT/test-shards.log" 2>/dev/null || true
  else
    timeout 900 python3 -m pytest -m gpu ${TESTS:-tests} -q -rfE --durations=15 -p no:cacheprovider --continue-on-collection-errors || status=1
  fi
fi
if has sweep || has tune || has tuned; then
  extra=""; has tune && extra="--tune"; has tuned && extra="$extra --tuned"
  python3 perf/gemm_sweep.py --out "$OUT" $extra || status=1
  if has tuned; then cp "$SCALEMM_CACHE_DIR/tuning/tuned.json" "$OUT/" || status=1; fi
fi
if has grouped; then
  python3 perf/grouped_sweep.py --out "$OUT" || status=1
fi
if has quant; then
  python3 perf/quant_bench.py --out "$OUT" || status=1
fi
if has sanitize; then  # small shapes through every kernel under each compute-sanitizer tool
  # One plain pass first: it checks the script and JIT-builds every kernel it uses, so no compile
  # (and no driver query of the build's toolchain check) happens under the sanitizer.
  python3 scripts/sanitize_run.py || status=1
  for tool in memcheck racecheck initcheck; do
    log=$OUT/sanitize-$tool.log
    # SCALEMM_ZERO_WORKSPACE=1: the grouped GEMMs zero CUTLASS's TMA-descriptor workspace first,
    # so initcheck does not flag its benign first writes (include/scalemm/sm90/launch.cuh says why).
    SCALEMM_ZERO_WORKSPACE=1 timeout ${SANITIZE_TIMEOUT:-240} compute-sanitizer --tool $tool --print-limit 200 --error-exitcode 3 \
      --log-file "$log" python3 scripts/sanitize_run.py | sed "s/^/[$tool] /"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
    # The summary line, then each kind of report once with its count and where it happened
    # (kernel templates shortened to their first name; +0x.. is the SASS offset for cuobjdump).
    grep -E "SUMMARY" "$log" | sed "s/^/[$tool] /"
    grep -E "^=========( Program hit| [A-Z][a-z]+ .*(read|write|access|hazard)|     at )" "$log" |
      sed -E 's/<.*>//; s/\(.*\)//' | sort | uniq -c | sort -rn | head -n 12 | sed "s/^/[$tool] /"
  done
fi
if has multigpu; then  # two GPUs (nvidia-h100-x2): every op family on cuda:1, then the same under memcheck
  if [ "$(nvidia-smi --list-gpus | wc -l)" -lt 2 ]; then
    echo "multigpu: needs two GPUs, this machine has $(nvidia-smi --list-gpus | wc -l)"; status=1
  else
    timeout 600 python3 -m pytest -m gpu tests/test_multi_gpu.py -q -rfE -p no:cacheprovider || status=1
    timeout 600 compute-sanitizer --tool memcheck --print-limit 20 --error-exitcode 3 --log-file "$OUT/multigpu-memcheck.log" \
      python3 -m pytest -m gpu tests/test_multi_gpu.py -q -p no:cacheprovider || status=1
    grep -E "SUMMARY" "$OUT/multigpu-memcheck.log"
  fi
fi
if has train; then  # training layers: their GPU tests, the convergence run, the fwd+bwd benchmark
  python3 -m scalemm build --set train --jobs "$(nproc)" 2>&1 | tail -n 20 || status=1
  # In shards: the tests launch kernels outside the train set, and one pytest process compiled them one at a time
  # (20 of the 43 tests in 500 s on an H200, forty-sixth session).
  python3 scripts/run_gpu_tests.py --shards "$(nproc)" --timeout 900 --rerun-failed --log-dir /tmp/scalemm-train-shards \
    tests/test_train_gpu.py || status=1
  cp /tmp/scalemm-train-shards/shards.log "$OUT/train-test-shards.log" 2>/dev/null || true
  timeout 600 python3 scripts/train_convergence.py --out "$OUT" || status=1
  timeout 900 python3 perf/train_bench.py --out "$OUT" ${TRAIN_BENCH_ARGS:-} || status=1
fi
if has nvfp4; then
  timeout 300 python3 perf/nvfp4_explore.py ${NVFP4_ARGS:-} || status=1
fi
if has decode; then
  mkdir -p "$OUT/decode"
  timeout 420 python3 perf/nvfp4_explore.py --ms 1,8,16,64 --candidates skinny --grouped decode --out "$OUT/decode" || status=1
fi
if has loops; then
  timeout 300 python3 perf/nvfp4_explore.py --ms 1,8,16 --candidates loops --out "$OUT/loops" || status=1
fi
if has profile; then  # Nsight Compute on one decode GEMM per kernel (hardware counters: Firecracker machines)
  kernels=${PROFILE_KERNELS:-skinny lean cutlass bf16}
  python3 perf/profile_nvfp4.py --prebuild --kernel "${kernels// /,}" ${PROFILE_ARGS:-} 2>&1 | tail -n 2 || status=1
  for kernel in $kernels; do
    timeout 200 ncu --clock-control none --nvtx --nvtx-include "measure/" --section SpeedOfLight \
      --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy \
      --section LaunchStats --section ComputeWorkloadAnalysis --section InstructionStats python3 perf/profile_nvfp4.py --kernel $kernel ${PROFILE_ARGS:-} > "$OUT/ncu-$kernel.txt" 2>&1 \
      || status=1
    echo "== ncu $kernel (full report: $OUT/ncu-$kernel.txt)"
    grep -E "^  [a-zA-Z_].*\(|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Issued Ipc|No Eligible|Warp Cycles Per Issued|L1/TEX Hit|L2 Hit|Stall" "$OUT/ncu-$kernel.txt" | head -n 30
  done
  # where one kernel's warps stall (PROFILE_SOURCE, default skinny), per SASS instruction (stall samples by
  # reason): a report with source counters, then its source page as CSV (the section totals say only "long
  # scoreboard", not which load)
  src=${PROFILE_SOURCE:-skinny}
  timeout 200 ncu --clock-control none --nvtx --nvtx-include "measure/" --section SourceCounters \
    --section WarpStateStats -f -o "$OUT/ncu-$src-source" python3 perf/profile_nvfp4.py --kernel $src \
    ${PROFILE_ARGS:-} > /dev/null 2>&1 || status=1
  ncu -i "$OUT/ncu-$src-source.ncu-rep" --page source --print-source sass --csv > "$OUT/ncu-$src-sass.csv" 2>&1 \
    || echo "ncu could not print the source page (see $OUT/ncu-$src-sass.csv)"
fi
if has pack; then  # kernels built here (not carried), in parts under the 16 MiB per-file limit of $OUT:
  # `cat extra-kernels.tgz.part-* > .jitcache-pack/extra-NAME.tgz` makes a pack the next call unpacks (above)
  new=$(cd "$SCALEMM_CACHE_DIR" && find kernels -mindepth 1 -maxdepth 1 -type d -newer /tmp/scalemm-start ! -name '.*')
  if [ -n "$new" ]; then
    (cd "$SCALEMM_CACHE_DIR" && tar -czf - --transform 's,^,cache/,' $new) | split -b 15m - "$OUT/extra-kernels.tgz.part-"
    echo "packed $(echo "$new" | wc -l) new kernels"
  fi
fi
exit $status
