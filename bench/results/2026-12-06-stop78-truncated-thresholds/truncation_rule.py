import numpy as np, sys
from scipy.stats import truncnorm
from scipy.optimize import minimize
d=sys.argv[1]; th=8.0; floor=6.0
a=np.load(d+'/.stages/match/amplitudes.npy'); c=np.load(d+'/.stages/match/spike_templates.npy')
U=np.load(d+'/.stages/cluster/U.npy'); lt=np.load(d+'/.stages/cluster/low_tier.npy')
ak=np.sqrt((U.astype(np.float64)**2).sum(axis=(1,2)))
out=[]
for k in range(len(ak)):
    aa=a[c==k].astype(np.float64)
    if lt[k] or len(aa)<30: continue
    med=np.median(aa)
    if not (med<1.25*th and med<0.85*ak[k] and ak[k]<2*th): continue
    x=aa[aa<3*th]
    def nll(p):
        mu,s=p
        return -truncnorm.logpdf(x,(th-mu)/s,np.inf,loc=mu,scale=s).sum()
    r=minimize(nll,[med,1.5],method='L-BFGS-B',bounds=[(0,3*th),(1.0,3.0)])
    mu,s=r.x
    t=max(floor,min(th,mu-s))
    print('k',k,'n',len(aa),'a_k %.2f med %.2f mu %.2f s %.2f -> %.2f'%(ak[k],med,mu,s,t),file=sys.stderr)
    if t<th: out.append('%d:%.3f'%(k,t))
print(','.join(out))
