#!/bin/bash
# Samples SM clock, power and throttle reasons while each load runs; phases logged with times.
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvcc -O2 -o .bin/gemm .bin/gemm.cu -lcublas > $OUT/gemm-build.txt 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,power.limit,temperature.gpu,clocks_event_reasons.active --format=csv -lms 100 > $OUT/smi.csv 2>&1 &
SMI=$!
ph() { echo "$(date +%H:%M:%S.%N | cut -c1-12) $*" >> $OUT/phases.txt; }
sleep 1.5
ph gemm; .bin/gemm 4 > $OUT/gemm.txt 2>&1; ph idle; sleep 1.5
for b in mlakit mlakit-abl; do
  ph $b h128; timeout 60 .bin/$b bench --heads 128 --batch 128 --seq-len 8192 --pdl --backend sm90:0 --replays 6000 --warmup 20 --no-verify > $OUT/$b-h128.txt 2>&1; ph idle; sleep 1.5
done
ph pairs-abl h128; timeout 60 .bin/mlakit-abl bench --heads 128 --batch 128 --seq-len 8192 --pdl --backend sm90:6 --replays 6000 --warmup 20 --no-verify > $OUT/pairs-abl-h128.txt 2>&1; ph idle; sleep 1.5
ph mlakit h16; timeout 60 .bin/mlakit bench --heads 16 --batch 128 --seq-len 8192 --pdl --backend sm90:3 --replays 10000 --warmup 20 --no-verify > $OUT/mlakit-h16.txt 2>&1; ph idle; sleep 1.5
ph mlakit h128b8; timeout 60 .bin/mlakit bench --heads 128 --batch 8 --seq-len 4096 --pdl --backend sm90:2 --replays 20000 --warmup 20 --no-verify > $OUT/mlakit-h128b8.txt 2>&1; ph end; sleep 1
kill $SMI
python3 - "$OUT" <<'PY'
import sys,csv,datetime
out=sys.argv[1]
ph=[l.split(None,1) for l in open(out+'/phases.txt')]
rows=list(csv.reader(open(out+'/smi.csv')))[1:]
def t(s): return datetime.datetime.strptime(s.strip().split()[-1][:12],'%H:%M:%S.%f')
samples=[(t(r[0]),r) for r in rows if len(r)>6]
for i,(ts,name) in enumerate(ph[:-1]):
  a=datetime.datetime.strptime(ts[:12],'%H:%M:%S.%f'); b=datetime.datetime.strptime(ph[i+1][0][:12],'%H:%M:%S.%f')
  s=[r for (x,r) in samples if a<x<b]
  s=s[len(s)//4:]  # skip ramp
  if not s: continue
  clk=sorted(float(r[1].split()[0]) for r in s); pw=sorted(float(r[3].split()[0]) for r in s)
  reasons=sorted(set(r[6].strip() for r in s))
  print(f"{name.strip():20s} n={len(s):3d} sm MHz median {clk[len(clk)//2]:6.0f} (min {clk[0]:.0f} max {clk[-1]:.0f})  power W median {pw[len(pw)//2]:6.1f} max {pw[-1]:.1f}  reasons {reasons}")
PY
grep -h "sm90\|gemm" $OUT/*.txt | grep -v "^#" | head -20
