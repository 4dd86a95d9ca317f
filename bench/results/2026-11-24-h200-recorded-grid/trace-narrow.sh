#!/bin/bash
# Narrow tile per-block trace (CTA 0) and grid timeline: 16 rows (h_q 16 s_q 1) against 32 rows
# (h_q 16 s_q 2, h_q 32 s_q 1), b 128 L 8192 and b 32 L 4096.
OUT=${OUT:-/tmp/out}; R=$OUT/tr; mkdir -p $R
for c in "16 1 128 8192 sm90:5" "16 2 128 8192 sm90:5" "32 1 128 8192 sm90:5" "16 1 128 8192 sm90:3" "16 2 128 8192 sm90:3" "16 1 32 4096 sm90:5" "16 2 32 4096 sm90:5"; do
  read -r h sq b len bk <<<"$c"
  tag=h$h-s$sq-b$b-L$len-${bk/:/_}
  timeout 100 .bin/mlakit-trace bench --heads $h --s-q $sq --batch $b --seq-len $len --pdl --backend $bk --no-verify > $R/$tag.log 2>&1
  python3 .bin/grid_timeline.py $R/$tag.log > $R/$tag.grid
  gzip $R/$tag.log
done
tar czf $OUT/tr.tgz -C $OUT tr
for f in $R/*.grid; do echo "== $f"; grep -E "span|first data ->|main loop|last block ->|barrier ->" $f; done
