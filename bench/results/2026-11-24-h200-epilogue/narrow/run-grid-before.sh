#!/bin/bash
# Narrow-tile epilogue, finer grid stamps (trace build).
OUT=${OUT:-/tmp/out}; R=$OUT/n; mkdir -p $R
for c in "16 1 32 4096 sm90:5" "16 1 128 8192 sm90:3" "16 1 64 4096 sm90:3" "16 1 8 4096 sm90:5" "32 1 32 4096 sm90:5"; do
  read -r h sq b len bk <<<"$c"
  tag=h$h-s$sq-b$b-L$len-${bk/:/_}
  timeout 120 .bin/mlakit-trace bench --heads $h --s-q $sq --batch $b --seq-len $len --pdl --backend $bk --no-verify > $R/$tag.log 2>&1
  python3 .bin/grid_timeline.py $R/$tag.log > $R/$tag.summary
  gzip $R/$tag.log
done
tar czf $OUT/n.tgz -C $OUT n
for f in $R/*.summary; do echo "== $f"; grep -E "span|first data ->|last block ->|barrier ->|narrow" $f; done
