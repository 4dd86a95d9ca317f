import sys, statistics
def sp(v):
    v=sorted(v); q=lambda f: v[min(len(v)-1,int(f*len(v)))]
    return f"min {v[0]:7.2f} p10 {q(.1):7.2f} med {statistics.median(v):7.2f} p90 {q(.9):7.2f} max {v[-1]:7.2f}"
G=[];C=[]
for l in open(sys.argv[1]):
    f=l.split()
    if l.startswith("G "): G.append([int(x) for x in f[3:]])
    if l.startswith("C "): C.append([int(x) for x in f[3:]])
if not G: print("no stamps"); sys.exit()
ref=1 if any(g[1] for g in G) else 6
t0=statistics.median([g[ref] for g in G if g[ref]])
print(f"decode CTAs {len(G)}, combine CTAs {len(C)}; us from median setup-done")
for e,n in [(0,'entry'),(6,'wait released'),(1,'setup done'),(2,'first data'),(3,'loop done'),(4,'epilogue done'),(5,'exit')]:
    v=[(g[e]-t0)/1e3 for g in G if g[e]]
    if v: print(f"  D {n:14s} {sp(v)}")
for a,b,n in [(6,1,'plan'),(1,2,'setup->first data'),(6,2,'wait->first data'),(2,3,'main loop'),(3,4,'epilogue')]:
    v=[(g[b]-g[a])/1e3 for g in G if g[a] and g[b]]
    if v: print(f"  D {n:18s} {sp(v)}")
dend=max(g[5] for g in G)
for e,n in [(0,'entry'),(1,'wait released'),(3,'lse done'),(2,'exit')]:
    v=[(c[e]-t0)/1e3 for c in C if c[e]]
    if v: print(f"  C {n:14s} {sp(v)}")
if C: print(f"  last decode exit {(dend-t0)/1e3:.2f}; last combine exit {(max(c[2] for c in C)-t0)/1e3:.2f}")
