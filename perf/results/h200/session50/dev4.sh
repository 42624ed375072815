S=/tmp/site; bash scripts/install_site.sh $S >/dev/null 2>&1 || { echo install failed; exit 1; }
export PYTHONPATH=$S PYTHONUNBUFFERED=1 SCALEMM_CACHE_DIR=/tmp/pk; mkdir -p /tmp/pk; touch /tmp/pk/.unpacked
t0=$(date +%s); python3 -m scalemm build --set train --jobs 16 2>&1 | tail -n 2; echo "build $(( $(date +%s) - t0 )) s"
new=$(cd /tmp/pk && find kernels -mindepth 1 -maxdepth 1 -type d | sort); n=$(echo "$new" | wc -l); h=$(( n / 2 ))
tar czf $OUT/train_a.tgz -C /tmp/pk --transform 's,^,cache/,' $(echo "$new" | head -n $h); tar czf $OUT/train_b.tgz -C /tmp/pk --transform 's,^,cache/,' $(echo "$new" | tail -n +$(( h + 1 ))); ls -la $OUT/*.tgz
cd tests && timeout 100 python3 -m pytest test_swiglu_gpu.py -q 2>&1 | tail -n 3; cd ..
timeout 100 python3 perf/swiglu_bench.py --out $OUT/swiglu 2>&1 | tail -n 8
M="--only moe --graphs --cache-weight --fuse-wgrad-accumulation --contenders scalemm_fp8"
for act in scalemm torch; do timeout 100 python3 perf/train_bench.py $M --activation $act --out /tmp/moe_$act > $OUT/moe_$act.log 2>&1; echo "moe $act rc=$?"; cp /tmp/moe_$act/train_bench.json $OUT/moe_$act.json; grep "experts," $OUT/moe_$act.log; done
