#!/bin/bash
# Session 31 call 7: the in-step tile's fp32 partials as whole-sector stores (lanes l, l ^ 4 swap
# halves; one per-lane base address, so no spilled offsets are reloaded in the loop; dim0
# unsigned) against main (f0bc19d's kernels), e4m3 cache and q.
set -u
mkdir -p /tmp/b $OUT/w
W=$OUT/w
for f in mlakit-base mlakit-sec; do xz -dc .peers/ab/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $W/gpu.txt
B="--dtype fp8 --q-dtype fp8 --pdl --settle-ms 300 --verify-requests 2"
for v in base sec; do
  timeout 150 /tmp/b/mlakit-$v bench $B --heads 128,64 --s-q 1 --batch 1,8,32,64 --seq-len 4096 \
    --backend sm90:0,sm90:19,sm90:21 --json $W/$v.json > $W/$v.txt 2>&1; echo "$v rc $?"
  timeout 60 /tmp/b/mlakit-$v bench $B --heads 128 --s-q 1 --batch 32 --seq-len 8192 --var 0,1 \
    --backend sm90:0,sm90:19 --json $W/${v}_l8.json > $W/${v}_l8.txt 2>&1; echo "$v l8 rc $?"
done
tar czf $OUT/all.tgz -C $OUT w
python3 - <<'PY'
import json,os
W=os.environ['OUT']+'/w'
rows={}
for v in ('base','sec'):
    for f in (v, v+'_l8'):
        try: d=json.load(open(f'{W}/{f}.json'))['results']
        except Exception as e: print('no json',f,e); continue
        for r in d:
            k=(r['h_q'],r['batch'],r['seq_len'],int(r['var']),r['tactic'])
            rows.setdefault(k,{})[v]=(r['time_us'],r['check'][:2])
print('h_q b L var tactic | base sec | base/sec')
for k in sorted(rows):
    x=rows[k]; a=x.get('base',(0,''))[0]; b=x.get('sec',(0,''))[0]
    print(k, f'{a:.1f} {b:.1f} |', f'{a/b:.3f}' if a and b else '-', set(c for _,c in x.values()))
PY
