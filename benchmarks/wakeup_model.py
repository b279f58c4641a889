# Model of the dispatcher's wake-up rules (issue 16, point 3): commit -> claim
# latency and claims per event for the old rule (a 20ms WakeupCooldown between
# every two wake-up claims, one trailing claim) and the new one (dispatcher/
# waker.go), on uniform single-event commits with the emitter's 20ms
# NotifyInterval. It depends on no machine load: run python3
# benchmarks/wakeup_model.py. D is the claim round trip; a claim takes the
# events committed before it starts, up to BatchSize (100), 2 Claimers.
import heapq, sys, statistics
def run(rule, rate, dur=10.0, D=0.001, commit=0.001, note=0.0002, interval=0.020, cd=0.020, batch=100, claimers=2):
    n=int(rate*dur); emits=[i/rate for i in range(n)]
    commits=[e+commit for e in emits]
    notif=[]; last=-1e9
    for i,e in enumerate(emits):
        if e-last>=interval: last=e; notif.append(commits[i]+note)
    q=[]; seq=[0]
    def push(t,kind,data=None):
        seq[0]+=1; heapq.heappush(q,(t,seq[0],kind,data))
    for t in notif: push(t,'trig')
    t=1.0
    while t<dur+2: push(t,'poll'); t+=1.0
    claimed=[None]*n; nxt=[0]  # events claimed in order of commit (uniform -> index order)
    st=dict(inflight=0,wanted=False,backlog=False,cooling=False,lastWake=-1e9,
            last=-1e9,hot=-1e9,next=None,pending=False,found=[])
    def start(now):
        st['inflight']+=1; st['wanted']=False
        got=[]
        while nxt[0]<n and commits[nxt[0]]<=now and len(got)<batch:
            got.append(nxt[0]); nxt[0]+=1
        push(now+D,'done',got)
    def fill(now):
        while st['inflight']<claimers and (st['wanted'] or st['backlog']):
            start(now)
            if st['backlog'] and not st['wanted']: break
    def wake(now): st['wanted']=True; fill(now)
    # new waker
    def busy(now):
        st['found']=[(a,k) for a,k in st['found'] if a>now-cd]
        return sum(k for a,k in st['found'])>=batch//2
    def gap(now): return cd if busy(now) else 0
    def sched(now,at): st['next']=at; push(at,'timer',at)
    def due(now,infl,g):
        if infl: st['pending']=True; return False
        at=st['last']+g
        if now<at: sched(now,at); return False
        st['last']=now
        if st['last']<st['hot']+cd:
            gg=gap(now) or cd/5; sched(now,now+gg)
        return True
    claims=0
    while q:
        now,_,kind,data=heapq.heappop(q)
        if now>dur+3: break
        if kind=='poll': wake(now)
        elif kind=='trig':
            if rule=='old':
                if st['cooling']: pass
                else:
                    w=cd-(now-st['lastWake'])
                    if w>0: st['cooling']=True; push(now+w,'cooled')
                    else:
                        st['lastWake']=now; st['cooling']=True; push(now+cd,'cooled'); wake(now)
            else:
                st['hot']=now
                if due(now,st['inflight']>0,gap(now)): wake(now)
        elif kind=='cooled':
            st['cooling']=False; st['lastWake']=now; wake(now)
        elif kind=='timer':
            if st['next'] is None or data!=st['next']: continue
            st['next']=None
            if due(now,st['inflight']>0,0): wake(now)
        elif kind=='done':
            claims+=1; st['inflight']-=1
            for i in data: claimed[i]=now
            st['backlog']=len(data)==batch
            if st['backlog'] or st['wanted']: fill(now)
            if rule=='new':
                if data: st['found'].append((now,len(data)))
                if st['pending'] and st['inflight']==0:
                    st['pending']=False
                    if due(now,False,gap(now)): wake(now)
    lat=sorted((claimed[i]-commits[i])*1000 for i in range(n))
    return lat[n//2], lat[int(n*0.99)], claims/n
for D in (0.001,0.003):
  for rate in (100,1000,5000):
    for rule in ('old','new'):
        p50,p99,cpe=run(rule,rate,D=D)
        print(f"D={D*1000:.0f}ms rate={rate} {rule}: p50={p50:.1f}ms p99={p99:.1f}ms claims/event={cpe:.3f}")
