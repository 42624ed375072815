# Fiftieth session, call 5: scalemm.swiglu's GPU tests, the training GPU tests, the MLP block with scalemm.swiglu
# (micro-step), and the kernels the tests built beyond the carried packs (to carry next time).
S=/tmp/site; bash scripts/install_site.sh $S >/dev/null 2>&1 || { echo install failed; exit 1; }
export PYTHONPATH=$S PYTHONUNBUFFERED=1 SCALEMM_CACHE_DIR=/tmp/pk; bash scripts/unpack_jitcache.sh /tmp/pk
nvidia-smi --query-gpu=name --format=csv,noheader
(cd tests && timeout 100 python3 -m pytest test_swiglu_gpu.py -q > $OUT/swiglu_tests.log 2>&1; echo "swiglu tests rc=$?"; tail -n 2 $OUT/swiglu_tests.log)
timeout 300 python3 scripts/run_gpu_tests.py --shards 16 --timeout 260 --log-dir /tmp/tr tests/test_train_gpu.py > $OUT/train_tests.log 2>&1; echo "train tests rc=$?"; tail -n 3 $OUT/train_tests.log
timeout 100 python3 perf/train_bench.py --only mlp --graphs --cache-weight --fuse-wgrad-accumulation --contenders scalemm_fp8 --out /tmp/mlp > $OUT/mlp_scalemm.log 2>&1; echo "mlp rc=$?"; grep "mlp," $OUT/mlp_scalemm.log; cp /tmp/mlp/train_bench.json $OUT/mlp_scalemm.json
new=$(cd /tmp/pk && find kernels -mindepth 1 -maxdepth 1 -type d -newer .unpacked); [ -n "$new" ] && tar czf $OUT/extra_tests.tgz -C /tmp/pk --transform 's,^,cache/,' $new && ls -la $OUT/extra_tests.tgz
