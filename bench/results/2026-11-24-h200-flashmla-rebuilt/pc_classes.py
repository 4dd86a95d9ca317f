import csv,sys,re,collections
def load(p):
    rows=list(csv.reader(open(p)))
    hi=[i for i,r in enumerate(rows) if r and r[0]=='Address'][0]
    h=rows[hi]; data=[r for r in rows[hi+1:] if len(r)==len(h)]
    return h,data
def num(x):
    try: return float(x.replace(',',''))
    except: return 0.0
def cls(ins, prev):
    i=ins.strip()
    op=re.sub(r'^@!?U?P\w+\s+','',i).split(' ')[0]
    if op.startswith('BRA') and prev and 'SYNCS.PHASECHK' in prev: return 'mbarrier wait (try_wait loop)'
    if 'SYNCS.PHASECHK' in op: return 'mbarrier wait (try_wait loop)'
    if op.startswith('WARPGROUP.DEPBAR') or op.startswith('WARPGROUP.ARRIVE'): return 'wgmma wait/fence'
    if op.startswith('HGMMA'): return 'wgmma issue'
    if op.startswith('BAR'): return 'named barrier'
    if op.startswith('MUFU'): return 'MUFU'
    if op.startswith(('FFMA','FMUL','FADD','FMNMX','FSETP','F2FP','FSEL','F2F')): return 'fp32 ALU (softmax)'
    if op.startswith(('STS','LDS','STSM','LDSM')): return 'shared ld/st'
    if op.startswith(('STG','LDG','ST.','LD.','LDL','STL','RED','ATOM')): return 'global/local ld/st'
    if op.startswith(('UTMA','UBLKCP','SYNCS.ARRIVE','SYNCS.EXCH')): return 'TMA / mbarrier arrive'
    if op.startswith('SHFL'): return 'shuffle'
    return 'other'
res={}
for name in ('fmla','pairs','main'):
    h,data=load(f'pc-{name}.csv')
    ci={c:j for j,c in enumerate(h)}
    agg=collections.Counter(); tot=0
    prev=''
    for r in data:
        n=num(r[ci['smsp__pcsamp_sample_count']]); tot+=n
        agg[cls(r[1],prev)]+=n; prev=r[1]
    res[name]=(tot,agg)
keys=sorted(set(k for t,a in res.values() for k in a), key=lambda k:-res['pairs'][1][k])
print(f"{'class':34s} " + " ".join(f"{n:>16s}" for n in res))
print(f"{'all samples':34s} " + " ".join(f"{res[n][0]:16.0f}" for n in res))
for k in keys:
    print(f"{k:34s} " + " ".join(f"{res[n][1][k]:9.0f} ({100*res[n][1][k]/res[n][0]:4.1f}%)" for n in res))
print()
for name in ('fmla','pairs'):
    h,data=load(f'pc-{name}.csv'); ci={c:j for j,c in enumerate(h)}
    oth=collections.Counter(); bars=collections.Counter(); prev=''
    for r in data:
        n=num(r[ci['smsp__pcsamp_sample_count']]); c=cls(r[1],prev)
        if c=='other': oth[re.sub(r'^@!?U?P\w+\s+','',r[1].strip()).split(' ')[0]]+=n
        if c.startswith('mbarrier'):
            src = prev if 'PHASECHK' in prev else r[1]
            m=re.search(r'\[([^\]]*)\]', src); bars[(m.group(1) if m else '?', r[0])]+=n
        prev=r[1]
    print(name, 'other top:', oth.most_common(8))
    print(name, 'mbarrier waits top:', [(k[0],int(v)) for k,v in bars.most_common(8)])
