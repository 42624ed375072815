# Fiftieth session, call 6: the training GPU tests that run examples/moe.py (now on scalemm.swiglu), and a second
# run of the expert block micro-step with both activations, NVFP4 included.
S=/tmp/site; bash scripts/install_site.sh $S >/dev/null 2>&1 || { echo install failed; exit 1; }
export PYTHONPATH=$S PYTHONUNBUFFERED=1 SCALEMM_CACHE_DIR=/tmp/pk; bash scripts/unpack_jitcache.sh /tmp/pk
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 200 python3 scripts/run_gpu_tests.py --shards 8 --timeout 180 --log-dir /tmp/tr tests/test_train_gpu.py -k "moe or sync" > $OUT/train_moe_tests.log 2>&1; echo "train moe tests rc=$?"; tail -n 3 $OUT/train_moe_tests.log
M="--only moe --graphs --cache-weight --fuse-wgrad-accumulation --contenders scalemm"
for act in scalemm torch; do timeout 120 python3 perf/train_bench.py $M --activation $act --out /tmp/moe_$act > $OUT/moe_$act.log 2>&1; echo "moe $act rc=$?"; cp /tmp/moe_$act/train_bench.json $OUT/moe_$act.json; grep "experts," $OUT/moe_$act.log; done
