# Fiftieth session, call 8: the final code's GPU tests that its packs cover (the grouped quantizers after abi.h's
# change rebuilt every kernel; scalemm.swiglu; the training tests' torch.compile and MoE cases).
S=/tmp/site; bash scripts/install_site.sh $S >/dev/null 2>&1 || { echo install failed; exit 1; }
export PYTHONPATH=$S PYTHONUNBUFFERED=1 SCALEMM_CACHE_DIR=/tmp/pk; bash scripts/unpack_jitcache.sh /tmp/pk
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 200 python3 scripts/run_gpu_tests.py --shards 12 --timeout 180 --log-dir /tmp/qg tests/test_quantize_grouped_gpu.py tests/test_swiglu_gpu.py > $OUT/qg_swiglu_tests.log 2>&1; echo "rc=$?"; tail -n 2 $OUT/qg_swiglu_tests.log
