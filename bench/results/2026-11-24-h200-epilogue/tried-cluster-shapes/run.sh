#!/bin/bash
# Cluster shapes forced by an experiment-only env var: default vs S = 2 / 4.
OUT=${OUT:-/tmp/out}; R=$OUT/cs; mkdir -p $R
one() { # tag shape args...
  local tag=$1 shape=$2; shift 2
  export MLAKIT_EXPERIMENT_CS=$shape
  echo "## $shape $*" >> $R/$tag.txt
  timeout 60 .bin/mlakit-cs bench --pdl --settle-ms 300 "$@" 2>&1 | grep -E "^sm90|cluster shape" | sort -u >> $R/$tag.txt
}
for rep in 1 2; do
  for s in def 2,2 1,4; do one h16b32 $s --heads 16 --batch 32 --seq-len 4096 --backend sm90:5; done
  for s in def 8,2 4,4; do one h16b8 $s --heads 16 --batch 8 --seq-len 4096 --backend sm90:5; done
  for s in def 4,2 2,4; do one h128b8 $s --heads 128 --batch 8 --seq-len 4096 --backend sm90:2; done
  for s in def 16,2 8,4; do one h128b1 $s --heads 128 --batch 1 --seq-len 4096 --backend sm90:2; done
  for s in def 4,2 2,4; do one h64b8 $s --heads 64 --batch 8 --seq-len 4096 --backend sm90:2; done
  for s in def 2,2; do one h128b32 $s --heads 128 --batch 32 --seq-len 4096 --backend sm90:2; done
done
for f in $R/*.txt; do echo "== $f"; cut -c1-100 $f | grep -v "^$"; done
