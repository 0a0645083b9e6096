#!/usr/bin/env python3
"""The idealised allocator the corpus is compared with, and what it would cost in driver calls.

    python3 tools/corpus/ideal.py crates/genesis-mem/corpus/*.trace.gz

Per stream, blocks (rounded to 512 bytes) go best fit (smallest, then lowest address) into
coalesced free address space, or at the end of the stream's address space when nothing fits;
physical memory is counted in 2 MiB pages, a page being mapped exactly while some live block
covers it. Prints peak mapped / peak live for each trace, and how a page that becomes needed
is served if pages stay mapped until needed elsewhere: from the same place ("inplace"), by
moving an idle page ("move", an unmap and a map), or by creating one ("create").
Needs `sortedcontainers` (pip).
"""
import gzip
import sys
from sortedcontainers import SortedList
P=2<<20
def run(path):
    ev=[]
    with gzip.open(path,'rt') as f:
        for l in f:
            if l[0]=='#': continue
            p=l.split()
            ev.append((p[0],int(p[1]),int(p[2]) if p[0]=='a' else 0, int(p[3]) if p[0]=='a' and len(p)>3 else 0))
    # per stream VA arena: free list by (size,addr) and by addr; end pointer
    arenas={}
    pages={}  # page index -> refcount of live blocks
    mappedset=set(); freepool=set(); stats={'create':0,'move':0,'inplace':0}
    live={}; cur=0; peak=0; mapped=0; peakm=0
    for e in ev:
        if e[0]=='a':
            _,i,sz,st=e
            size=(sz+511)//512*512
            A=arenas.setdefault(st,{'bysize':SortedList(),'byaddr':{}, 'end':st*(1<<44)})
            k=A['bysize'].bisect_left((size,-1))
            if k<len(A['bysize']):
                fs,fa=A['bysize'][k]; A['bysize'].remove((fs,fa)); del A['byaddr'][fa]
                be=A.setdefault('byend',{}); del be[fa+fs]
                addr=fa
                if fs>size:
                    A['bysize'].add((fs-size,fa+size)); A['byaddr'][fa+size]=fs-size; be[fa+fs]=fs-size
            else:
                addr=A['end']; A['end']+=size
            live[i]=(addr,size,st,sz)
            for pg in range(addr//P,(addr+size-1)//P+1):
                c=pages.get(pg,0)
                if c==0:
                    mapped+=1
                    if pg in freepool: freepool.discard(pg); stats['inplace']+=1
                    elif freepool: freepool.pop(); stats['move']+=1
                    else: stats['create']+=1
                pages[pg]=c+1
            cur+=sz; peak=max(peak,cur); peakm=max(peakm,mapped)
        else:
            i=e[1]
            if i not in live: continue
            addr,size,st,sz=live.pop(i); cur-=sz
            for pg in range(addr//P,(addr+size-1)//P+1):
                pages[pg]-=1
                if pages[pg]==0: mapped-=1; del pages[pg]; freepool.add(pg)
            A=arenas[st]
            # coalesce: find neighbors
            # prev: need addr->end map; keep byend
            be=A.setdefault('byend',{})
            s,n=addr,size
            if s in be:
                ps=be.pop(s); pa=s-ps; A['bysize'].remove((ps,pa)); del A['byaddr'][pa]; s=pa; n+=ps
            if s+n in A['byaddr']:
                ns=A['byaddr'].pop(s+n); A['bysize'].remove((ns,s+n)); del be[s+n+ns]; n+=ns
            A['bysize'].add((n,s)); A['byaddr'][s]=n; be[s+n]=n
    return peakm*P/peak, stats
for p in sys.argv[1:]:
    r,st=run(p); print(f"{p.split('/')[-1][:40]:40s} ideal {r:.4f} {st}")
