#!/bin/bash
# Recorded run, part 2: the reference grid (standard grid, s_q 1 and 2) for the given h_q on every
# tactic of sm90 and sm80, settled 300 ms per case (steady clock under the power cap), PDL on;
# with VAR=1 also the reference's variable-length rows. Usage: rec-grid.sh TAG HEADS...
OUT=${OUT:-/tmp/out}; R=$OUT/run; mkdir -p $R
tag=$1; shift
ref=bench/reference/flashmla_h200.csv
backends_for() {
  local b=sm90:0,sm90:1,sm90:2
  [[ $1 -le 16 ]] && b=$b,sm90:3,sm90:4,sm90:5
  echo "$b,sm80:0,sm80:1"
}
for h in "$@"; do
  timeout 400 .bin/mlakit bench --grid standard --heads $h --s-q 1,2 --pdl --settle-ms 300 \
    --backend "$(backends_for $h)" --reference $ref --json $R/grid-h$h.json > $R/grid-h$h.txt 2>&1
  echo "grid h$h rc $?"
done
if [[ ${VAR:-0} == 1 ]]; then
  for c in "128 1 64 4096" "16 1 128 8192" "128 2 32 8192"; do
    set -- $c
    timeout 100 .bin/mlakit bench --heads $1 --s-q $2 --batch $3 --seq-len $4 --var 1 --pdl --settle-ms 300 \
      --backend "$(backends_for $1)" --reference $ref --json $R/var-$1-$2-$3-$4.json >> $R/grid-var.txt 2>&1
  done
fi
tar czf $OUT/run-$tag.tgz -C $OUT run
grep -c " ok " $R/grid-h*.txt; grep -v " ok \|^device\|^backend\|^#" $R/grid-*.txt | head -20
