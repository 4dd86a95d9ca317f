import sys, statistics as st
stamps={0:[],1:[],3:[]}
for ln in open(sys.argv[1]):
    if ln.startswith('T '):
        _,r,i,c=ln.split(); r=int(r)
        if r in stamps: stamps[r].append((int(i),int(c)))
def pairs(seq):
    out=[];cur=None
    for i,c in seq:
        if i==0:
            if cur: out.append(cur)
            cur={0:c}
        elif cur is not None: cur[i]=c
    if cur: out.append(cur)
    return out
p0=pairs(stamps[0]); p1=pairs(stamps[1])
n=min(len(p0),len(p1))
print('pairs', len(p0), len(p1))
per=[p0[k+1][0]-p0[k][0] for k in range(2,n-2)]
print('period wg0 median', st.median(per))
for r,pp in ((0,p0),(1,p1)):
    ids=sorted({i for d in pp for i in d})
    row=[]
    for i in ids:
        v=[pp[k][i]-p0[k][0] for k in range(2,n-2) if i in pp[k]]
        if v: row.append(f'{i}:{int(st.median(v))}')
    print('wg',r,' '.join(row))
# watcher: landed stamps per block; block k of stage s -> pair k
w=stamps[3]
land={9:[],10:[],11:[],12:[]}
for i,c in w: land[i].append(c)
# pair k: stage0 block lands (9,10), stage1 (11,12); relative to wg0 pair top of pair k
for i in (9,10,11,12):
    v=[land[i][k]-p0[k][0] for k in range(2,min(n,len(land[i]))-2)]
    if v: print('landed id',i,'rel to pair top (median)',int(st.median(v)), 'rel to previous pair top', int(st.median([x+ (p0[k][0]-p0[k-1][0]) for k,x in zip(range(2,len(v)+2),v)])))
