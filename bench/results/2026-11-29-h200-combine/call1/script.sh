#!/bin/bash
# Session 31 call 1: (A) the in-step epilogue-reload branch against main at batch 1-64;
# (B) cluster against persistent for an e4m3 cache and q at batch 8 and 32, uniform and ragged;
# (C) a trace build's grid timeline at h_q 128 b 32 L 4096 (persistent, cluster, in-step).
set -u
mkdir -p /tmp/b $OUT/w
W=$OUT/w
for f in mlakit mlakit-er; do xz -dc .peers/ab/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $W/gpu.txt
B="--dtype fp8 --q-dtype fp8 --pdl --settle-ms 300 --verify-requests 1"
for h in 128 64; do
  timeout 100 /tmp/b/mlakit bench $B --heads $h --s-q 1 --batch 1,8,64 --seq-len 4096 \
    --backend sm90:0,sm90:19,sm90:2,sm90:21 --json $W/a_main_h$h.json > $W/a_main_h$h.txt 2>&1; echo "A main h$h rc $?"
  timeout 60 /tmp/b/mlakit-er bench $B --heads $h --s-q 1 --batch 1,8,64 --seq-len 4096 \
    --backend sm90:19,sm90:21 --json $W/a_er_h$h.json > $W/a_er_h$h.txt 2>&1; echo "A er h$h rc $?"
done
for hs in "128 1" "128 2" "64 1"; do
  read -r h s <<<"$hs"
  timeout 150 /tmp/b/mlakit bench $B --heads $h --s-q $s --batch 8,32 --seq-len 4096,32768 --var 0,1 \
    --backend sm90:0,sm90:2,sm90:21 --json $W/b_h${h}s$s.json > $W/b_h${h}s$s.txt 2>&1; echo "B h$h s$s rc $?"
done
for bk in; do
  timeout 30 /tmp/b/mlakit-trace bench --dtype fp8 --q-dtype fp8 --heads 128 --s-q 1 --batch 32 --seq-len 4096 --pdl \
    --backend $bk --no-verify > $W/c_${bk/:/_}.log 2>&1
  echo "== C $bk: $(grep -E '^sm' $W/c_${bk/:/_}.log | head -1)"
  python3 scripts/grid_timeline.py $W/c_${bk/:/_}.log > $W/c_${bk/:/_}.grid.txt 2>&1
  grep -E "main loop|epilogue|setup|stamped" $W/c_${bk/:/_}.grid.txt | head -8
done
tar czf $OUT/all.tgz -C $OUT w
python3 - <<'PY'
import json,os,glob
W=os.environ['OUT']+'/w'
def load(f):
    try: return json.load(open(f))['results']
    except Exception as e: print('no json',f,e); return []
print('A: h_q b | main 0 19 2 21 | er 19 21')
rows={}
for h in (128,64):
    for tag in ('main','er'):
        for r in load(f'{W}/a_{tag}_h{h}.json'):
            rows.setdefault((h,r['batch']),{})[f"{tag}{r['tactic']}"]=r['time_us']
for k in sorted(rows):
    v=rows[k]; f=lambda x: f"{v[x]:.1f}" if x in v else '-'
    print(k, f('main0'),f('main19'),f('main2'),f('main21'),'|',f('er19'),f('er21'))
print('B: h_q s_q b L var | 0 2 21 | best')
for f in sorted(glob.glob(f'{W}/b_*.json')):
    rows={}
    for r in load(f):
        rows.setdefault((r['h_q'],r['s_q'],r['batch'],r['seq_len'],r['var']),{})[r['tactic']]=(r['time_us'],r['check'])
    for k in sorted(rows):
        v=rows[k]; t={x:v[x][0] for x in v}
        print(k, ' '.join(f"{t.get(x,0):.1f}" for x in (0,2,21)), min(t,key=t.get), [v[x][1][:2] for x in v])
PY
