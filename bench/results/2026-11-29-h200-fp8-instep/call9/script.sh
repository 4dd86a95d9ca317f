#!/bin/bash
# Session 30 call 9: the whole GPU suite at 9427e10 (the in-step tile committed), then auto
# against the previous defaults on ragged lengths (--var 1, against tactic 0) and variable query
# lengths (--var-q 1, s_q 4, against tactic 1), e4m3 q and cache, settled.
set -u
mkdir -p /tmp/b $OUT/w
W=$OUT/w
for f in mlakit mlakit_gpu_tests; do xz -dc .peers/ab/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $W/gpu.txt
timeout 330 /tmp/b/mlakit_gpu_tests > $W/suite.txt 2>&1
echo "suite rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED \]|SKIPPED \]|test suites ran" $W/suite.txt | head -20
B="--dtype fp8 --q-dtype fp8 --pdl --settle-ms 300 --verify-requests 1"
timeout 60 /tmp/b/mlakit bench $B --heads 128 --s-q 1 --batch 64,128 --seq-len 4096,8192 --var 1 \
  --backend auto,sm90:0 --json $W/var.json > $W/var.txt 2>&1; echo "var rc $?"
timeout 60 /tmp/b/mlakit bench $B --heads 64,128 --s-q 4 --var-q 1 --batch 64,128 --seq-len 4096 \
  --backend auto,sm90:1 --json $W/varq.json > $W/varq.txt 2>&1; echo "varq rc $?"
tar czf $OUT/all.tgz -C $OUT w
python3 - <<'PY'
import json,os
W=os.environ['OUT']+'/w'
for f in ('var','varq'):
    try: d=json.load(open(f'{W}/{f}.json'))
    except Exception as e: print(f, 'no json', e); continue
    rows={}
    for r in d['results']:
        k=(r['h_q'],r['s_q'],r['batch'],r['seq_len'])
        rows.setdefault(k,[]).append((r['backend'],r.get('tactic'),round(r['time_us'],1),r.get('check','')[:10]))
    for k in sorted(rows): print(f,k,rows[k])
PY
