#!/bin/bash
# Standard-grid cases the reference CSV lacks (h_q 32 at s_q 1, 2, 4; s_q 4 at h_q 16, 64, 128):
# every tactic of sm90 and sm80, PDL on, unsettled and unverified (speed only: is sm90 at least as
# fast as sm80 on each case). Usage: rec-cover.sh
OUT=${OUT:-/tmp/out}; R=$OUT/run; mkdir -p $R
all_sm90=sm90:0,sm90:1,sm90:2,sm90:3,sm90:4,sm90:5,sm80:0,sm80:1
wide=sm90:0,sm90:1,sm90:2,sm80:0,sm80:1
timeout 280 .bin/mlakit bench --grid standard --heads 32 --s-q 1 --pdl --no-verify --backend $all_sm90 --json $R/cover-h32-s1.json > $R/cover-h32-s1.txt 2>&1; echo "h32 s1 rc $?"
timeout 150 .bin/mlakit bench --grid standard --heads 32 --s-q 2,4 --pdl --no-verify --backend $wide --json $R/cover-h32-s24.json > $R/cover-h32-s24.txt 2>&1; echo "h32 s2,4 rc $?"
timeout 150 .bin/mlakit bench --grid standard --heads 16,64,128 --s-q 4 --pdl --no-verify --backend $wide --json $R/cover-s4.json > $R/cover-s4.txt 2>&1; echo "s4 rc $?"
tar czf $OUT/cover.tgz -C $OUT run
