#!/bin/bash
# Session 31 call 2: where the persistent schedule's time goes at h_q 128 b 32 L 4096 (e4m3):
# a trace build's grid timeline for tactics 0, 2, 19, 21; kernel durations from nsys if present.
set -u
mkdir -p /tmp/b $OUT/w
W=$OUT/w
for f in mlakit mlakit-trace; do xz -dc .peers/ab/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $W/gpu.txt
for bk in sm90:0 sm90:2 sm90:19 sm90:21; do
  timeout 30 /tmp/b/mlakit-trace bench --dtype fp8 --q-dtype fp8 --heads 128 --s-q 1 --batch 32 --seq-len 4096 --pdl \
    --backend $bk --no-verify > $W/c_${bk/:/_}.log 2>&1
  echo "== $bk: $(grep -E '^sm' $W/c_${bk/:/_}.log | head -1)"
  python3 scripts/grid_timeline.py $W/c_${bk/:/_}.log > $W/c_${bk/:/_}.grid.txt 2>&1
  cat $W/c_${bk/:/_}.grid.txt | head -30
done
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
echo "nsys: $NSYS"
if [ -n "$NSYS" ]; then
  for bk in sm90:0 sm90:21; do
    timeout 90 $NSYS profile -o $W/n_${bk/:/_} --force-overwrite true -t cuda --cuda-graph-trace=node \
      /tmp/b/mlakit bench --dtype fp8 --q-dtype fp8 --heads 128 --s-q 1 --batch 32 --seq-len 4096 --pdl \
      --backend $bk --no-verify > $W/n_${bk/:/_}.log 2>&1
    timeout 60 $NSYS stats -r cuda_gpu_kern_sum $W/n_${bk/:/_}.nsys-rep > $W/n_${bk/:/_}.stats.txt 2>&1
    grep -E "Time|decode|combine|plan|Kernel" $W/n_${bk/:/_}.stats.txt | cut -c1-220 | head -12
  done
  rm -f $W/*.nsys-rep $W/*.sqlite
fi
tar czf $OUT/all.tgz -C $OUT w
