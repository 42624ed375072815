# Fiftieth session, call 7: the simplified swiglu.cuh (one pack per thread, no unroll / bound macros) on the GPU:
# its tests and perf/swiglu_bench.py again.
S=/tmp/site; bash scripts/install_site.sh $S >/dev/null 2>&1 || { echo install failed; exit 1; }
export PYTHONPATH=$S PYTHONUNBUFFERED=1 SCALEMM_CACHE_DIR=/tmp/pk; bash scripts/unpack_jitcache.sh /tmp/pk
nvidia-smi --query-gpu=name --format=csv,noheader
(cd tests && timeout 100 python3 -m pytest test_swiglu_gpu.py -q > $OUT/swiglu_tests.log 2>&1; echo "swiglu tests rc=$?"; tail -n 2 $OUT/swiglu_tests.log)
timeout 100 python3 perf/swiglu_bench.py --out $OUT/swiglu 2>&1 | tail -n 8
