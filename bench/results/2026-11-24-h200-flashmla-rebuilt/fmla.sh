#!/bin/bash
# FlashMLA's dense decode (built from source with nvcc 13.0, /tmp/flashmla on the dev machine)
# against main's sm90, same card, same call: short and steady windows, nvidia-smi alongside.
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw.instant,clocks_event_reasons.active --format=csv,noheader -lms 50 > $OUT/smi.csv 2>&1 &
SMI=$!
ph() { echo "## $(date +%T.%N | cut -c1-12) $*"; }
main() {
for c in "128 128 8192" "128 64 4096" "128 8 4096" "128 1 4096" "16 128 8192"; do
  read -r h b l <<<"$c"; BK=sm90:0,sm90:2; [ $h = 16 ] && BK=sm90:3,sm90:5
  ph fmla38 $c short; timeout 120 .bin/fmla_bench38 $h $b $l 0.2 2>&1 | tail -4
  ph fmla38 $c steady; timeout 120 .bin/fmla_bench38 $h $b $l 4 2>&1 | grep "fmla h_q"
  ph mlakit $c short; timeout 120 .bin/mlakit bench --heads $h --batch $b --seq-len $l --pdl --no-verify --backend $BK 2>&1 | grep '^sm90'
  ph mlakit $c steady; timeout 120 .bin/mlakit bench --heads $h --batch $b --seq-len $l --pdl --no-verify --backend $BK --settle-ms 1000 --replays 200 2>&1 | grep '^sm90'
done
ph end
}
main 2>&1 | tee $OUT/run.txt
kill $SMI
python3 - $OUT <<'PY'
import csv,datetime,sys
out=sys.argv[1]
rows=[r for r in csv.reader(open(out+'/smi.csv')) if len(r)>3]
def t(s): return datetime.datetime.strptime(s.strip().split()[-1][:12],'%H:%M:%S.%f')
S=[(t(r[0]),r) for r in rows]
ph=[l for l in open(out+'/run.txt') if l.startswith('## ')]
for i in range(len(ph)-1):
  a=t(ph[i].split()[1]); b=t(ph[i+1].split()[1]); s=[r for x,r in S if a<x<b]
  s=s[len(s)//2:]
  if not s: continue
  c=sorted(int(r[1].split()[0]) for r in s); p=sorted(float(r[2].split()[0]) for r in s)
  print(f"{' '.join(ph[i].split()[2:]):28s} 2nd-half smi: {c[len(c)//2]} MHz {p[len(p)//2]:.0f} W (n={len(s)})")
PY
