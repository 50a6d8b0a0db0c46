# The region of a low-tier chunk that suppression needs scored (bench/README.md, stop 77).
# Reads a dump from a temporary build of universal.c (not kept): int32 n_pos, n_neighbors, neighbors
# [n_pos x n_neighbors], n_sets, set_start [n_sets + 1], set_pos [n_pos]; then per low-tier chunk int64 ta, tb,
# n candidates, n loose pairs, n projections, then float32 (t, f, score) per candidate, int32 (set, t) per
# pair past the loose bound, int32 (f, t) per projected column.
import numpy as np
b=open('/tmp/cand_dump2.bin','rb').read()
F,NN=np.frombuffer(b[:8],np.int32); off=8
nb=np.frombuffer(b[off:off+4*F*NN],np.int32).reshape(F,NN); off+=4*F*NN
NS=int(np.frombuffer(b[off:off+4],np.int32)[0]); off+=4
ss=np.frombuffer(b[off:off+4*(NS+1)],np.int32); off+=4*(NS+1)
sp=np.frombuffer(b[off:off+4*F],np.int32); off+=4*F
rev=[[] for _ in range(F)]
for f in range(F):
    for h in nb[f]:
        if h>=0: rev[h].append(f)
NB=20; TH=9.0
A=np.zeros(6)
while off < len(b):
    ta,tb,n,nl,npj=np.frombuffer(b[off:off+40],np.int64); off+=40
    r=np.frombuffer(b[off:off+12*n],np.float32).reshape(n,3); off+=12*n
    lp=np.frombuffer(b[off:off+8*nl],np.int32).reshape(nl,2); off+=8*nl
    pj=np.frombuffer(b[off:off+8*npj],np.int32).reshape(npj,2); off+=8*npj
    t=r[:,0].astype(np.int64); f=r[:,1].astype(np.int64); s=r[:,2]
    t0=ta-NB-2; T=tb-ta+2*NB+6
    D=np.zeros((F,T),bool)
    for k in np.nonzero(s>TH)[0]:
        for x in rev[f[k]]:
            D[x, max(0,t[k]-t0-NB):t[k]-t0+NB+1]=True
    inD=D[f,t-t0]
    Y=np.nonzero(~inD)[0]
    need=~D
    for k in Y:
        for h in nb[f[k]]:
            if h>=0: need[h, max(0,t[k]-t0-NB):t[k]-t0+NB+1]=True
    # set-level need
    setneed=np.zeros((NS,T),bool)
    for q in range(NS):
        setneed[q]=need[sp[ss[q]:ss[q+1]]].any(0)
    ln=setneed[lp[:,0],lp[:,1]-t0].sum()
    pn=need[pj[:,0],pj[:,1]-t0].sum()
    A+=[nl,ln,npj,pn,n,need[f,t-t0].sum()]
print('loose pairs %d needed %.3f | projections %d needed %.3f | cands %d needed %.3f'%(A[0],A[1]/A[0],A[2],A[3]/A[2],A[4],A[5]/A[4]))
