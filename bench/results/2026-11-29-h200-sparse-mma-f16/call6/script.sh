#!/bin/bash
# Session 27 call 6: D (the fp16 mma kernel) against the split kernel's cluster schedule (12) and
# the narrow kernel (9) where the order changes hands: h_q 64 and 128 at 8-64 of the mma kernel's
# tiles, h_q 32 from 128 rows as requests; topk 2048 (and 512 for h_q 64/128 at 128-256 tiles).
set -u
mkdir -p /tmp/b /tmp/j
xz -dc .peers/ab/mlakit-D.xz > /tmp/b/mlakit-D && chmod +x /tmp/b/mlakit-D
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $OUT/gpu.txt
cd /tmp/j
B="--dtype fp8-blockwise --q-dtype bf16 --seq-len 8192 --pdl --settle-ms 200 --replays 20 --verify-requests 1"
timeout 200 /tmp/b/mlakit-D bench $B --topk 2048 --heads 64,128 --s-q 1,2 --batch 2,4,8,16 --backend sm90:13,sm90:12,auto --json w2048.json > w2048.txt 2>&1
timeout 120 /tmp/b/mlakit-D bench $B --topk 512 --heads 64,128 --s-q 1 --batch 16,32 --backend sm90:13,sm90:12,auto --json w512.json > w512.txt 2>&1
timeout 120 /tmp/b/mlakit-D bench $B --topk 2048 --heads 32 --s-q 1,2 --batch 64,128 --backend sm90:13,sm90:9,auto --json n2048.json > n2048.txt 2>&1
python3 - <<'PY' > $OUT/summary.txt
import json
for f in ("w2048", "w512", "n2048"):
  T = {}
  for r in json.load(open(f + ".json"))["results"]:
    k = "auto" if r["backend"].startswith("auto") else r["tactic"]
    T.setdefault((r["h_q"], r["s_q"], r["batch"], r["topk"]), {})[k] = (r["time_us"], r["tactic"], r["check"])
  print(f"== {f}: (h_q, s_q, batch, topk) | 13 | other | auto (its tactic) | other / 13")
  for key, d in sorted(T.items()):
    other = [k for k in d if k not in (13, "auto")]
    o = d[other[0]] if other else None
    a = d.get("auto"); m = d.get(13)
    print(key, m and f"{m[0]:.1f}", o and f"{o[0]:.1f} ({o[1]})", a and f"{a[0]:.1f} ({a[1]})", m and o and f"{o[0] / m[0]:.3f}", m and m[2])
PY
tar cf $OUT/raw.tar *.json *.txt
cat $OUT/summary.txt
