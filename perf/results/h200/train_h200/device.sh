#!/bin/bash
# Issue 13's training bars on an H200, in one or two device calls: install, then STAGES of
#   build   python -m scalemm build --set train (the training kernels, 16 jobs)
#   layers  the expert layers alone, micro-step (--only moe-layers --graphs --cache-weight --fuse-wgrad-accumulation)
#   moe     the expert block, micro-step (same flags)
#   mlp     the Llama-3-8B MLP block, micro-step (same flags), torchao's Float8Linear beside it
#   compile the MLP block with every contender under torch.compile (torchao's Float8Linear is meant to be compiled)
#   compile_step  the same, one optimizer step's work per call (every contender quantizes its weights every call)
#   step    both blocks, one optimizer step's work per call (--graphs, weights quantized every call)
#   tests   tests/test_train_gpu.py (convergence included)
#   curves  scripts/train_convergence.py (the loss curves' plot)
#   nvfp4   tests/test_nvfp4_gemm_gpu.py -k "$NVFP4_K" (default: the W4A16 tokens-on-A defaults)
#   pack    the kernels built on this machine (not in the carried cache) as $OUT/new_kernels.tgz, to carry next time
# Results under $OUT (default /tmp/out). The JIT cache stays in .jitcache between warm calls.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SITE=/tmp/scalemm-site
if [ ! -d "$SITE/scalemm" ] || [ "${REINSTALL:-1}" = 1 ]; then
  bash scripts/install_site.sh "$SITE" || exit 1
fi
# A JIT cache prebuilt elsewhere (same nvcc) may travel as .jitcache-pack/cache.tgz and extra-*.tgz: unpacked into
# .jitcache on a fresh machine (scripts/unpack_jitcache.sh).
[ -d .jitcache ] || bash scripts/unpack_jitcache.sh .jitcache
export PYTHONPATH=$SITE PYTHONUNBUFFERED=1 SCALEMM_CACHE_DIR=$PWD/.jitcache
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
micro="--graphs --cache-weight --fuse-wgrad-accumulation"
for stage in ${STAGES:-build layers moe mlp}; do
  t0=$(date +%s)
  case $stage in
    build)  python3 -m scalemm build --set train --jobs "$(nproc)" 2>&1 | tail -n 3;;
    layers) python3 perf/train_bench.py --only moe-layers $micro --out "$OUT/layers" 2>&1 | tee "$OUT/layers.log" | grep -v '^ \|^{\|^}';;
    moe)    python3 perf/train_bench.py --only moe $micro --out "$OUT/moe" 2>&1 | tee "$OUT/moe.log" | grep -v '^ \|^{\|^}';;
    mlp)    python3 perf/train_bench.py --only mlp $micro --out "$OUT/mlp" 2>&1 | tee "$OUT/mlp.log" | grep -v '^ \|^{\|^}';;
    compile) python3 perf/train_bench.py --only mlp --compile $micro --contenders 'tensorwise|rowwise' --out "$OUT/compile" 2>&1 | tee "$OUT/compile.log" | grep -v '^ \|^{\|^}';;
    compile_step) python3 perf/train_bench.py --only mlp --compile --graphs --contenders 'tensorwise|rowwise' --out "$OUT/compile_step" 2>&1 | tee "$OUT/compile_step.log" | grep -v '^ \|^{\|^}';;
    step)   python3 perf/train_bench.py --graphs --contenders "${STEP_CONTENDERS:-fp8}" --out "$OUT/step" 2>&1 | tee "$OUT/step.log" | grep -v '^ \|^{\|^}';;
    tests)  python3 scripts/run_gpu_tests.py --shards "$(nproc)" --timeout "${TESTS_TIMEOUT:-500}" --rerun-failed --log-dir /tmp/shards \
              tests/test_train_gpu.py > "$OUT/tests.log" 2>&1  # call 2 ran one pytest process: see README.txt
            echo "tests rc=$?"; tail -n 8 "$OUT/tests.log"; cp /tmp/shards/shards.log "$OUT/" 2>/dev/null;;
    nvfp4)  python3 scripts/run_gpu_tests.py --shards "$(nproc)" --timeout "${NVFP4_TIMEOUT:-400}" --rerun-failed --log-dir /tmp/nshards \
              tests/test_nvfp4_gemm_gpu.py -k "${NVFP4_K:-w4a16_tokens_on_a_is_the_default}" > "$OUT/nvfp4_tests.log" 2>&1
            echo "nvfp4 tests rc=$?"; tail -n 6 "$OUT/nvfp4_tests.log";;
    pack)   new=$(cd .jitcache && find kernels -mindepth 1 -maxdepth 1 -type d -newer .unpacked 2>/dev/null)
            if [ -n "$new" ]; then tar czf "$OUT/new_kernels.tgz" -C .jitcache --transform 's,^,cache/,' $new
              echo "packed $(echo "$new" | wc -l) new kernels: $(du -h "$OUT/new_kernels.tgz" | cut -f1)"; fi;;
    curves) timeout 300 python3 scripts/train_convergence.py --out "$OUT/curves" 2>&1 | tail -n 15;;
  esac
  echo "== stage $stage: $(( $(date +%s) - t0 )) s"
done
