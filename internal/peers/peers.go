package peers

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"sync"
	"time"
)

// Anyone who may NOTIFY on the channel can send a hello, so what one
// costs is bounded: at most MaxPeers other dispatchers are kept (a hello
// of a new one beyond that is ignored until some are forgotten), and a
// hello's interval counts as at most MaxHelloEvery (the hello interval of
// the longest LeaseDuration) when deciding how long it is remembered.
const (
	MaxPeers      = 256           // other dispatchers a Set keeps at the most
	MaxHelloEvery = time.Hour / 3 // the longest hello interval SilentAfter counts
)

// Prefix starts the payload of a hello; the emitter's wake-ups carry an
// empty payload.
const Prefix = "pgoutbox-hello "

// Hello is what a dispatcher says about itself, as JSON after Prefix.
type Hello struct {
	Table      string `json:"table"`
	ID         string `json:"id"` // random, one per dispatcher: owners may repeat
	Owner      string `json:"owner"`
	Ordering   string `json:"ordering"`
	HeadPolicy string `json:"head_policy"`
	OrderScope string `json:"order_scope"`
	EveryMS    int64  `json:"every_ms"` // its hello interval
	Answer     bool   `json:"answer,omitempty"`
}

// Set is what this dispatcher heard from the other dispatchers of its
// table, under its own lock. The zero Set is ready to use.
type Set struct {
	mu    sync.Mutex
	id    string
	peers map[string]*Peer // by hello ID
	heard uint64           // hellos heard from others
}

// Peer is one other dispatcher.
type Peer struct {
	Hello       Hello     // its first hello
	Since, Last time.Time // when it was first and last heard (local time)
	Conflict    bool      // its mode differs from this dispatcher's
}

// Instance returns this dispatcher's random hello ID.
func (p *Set) Instance() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.id == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		p.id = hex.EncodeToString(b[:])
	}
	return p.id
}

// Note records h, heard at now, and returns its peer and whether it was
// new (first heard, or heard again after it was forgotten). A new one
// beyond MaxPeers is not recorded, and not new.
func (p *Set) Note(h Hello, conflict bool, now time.Time) (Peer, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.heard++
	if p.peers == nil {
		p.peers = make(map[string]*Peer)
	}
	known, ok := p.peers[h.ID]
	if !ok && len(p.peers) >= MaxPeers {
		return Peer{}, false // the set is full: Forget makes room
	}
	if !ok {
		known = &Peer{Hello: h, Since: now, Conflict: conflict}
		p.peers[h.ID] = known
	}
	known.Last = now
	return *known, !ok
}

// Forget forgets the replicas not heard for three of their hello
// intervals (at least one second) at now: stopped, or cut off from this
// one. It returns those of another mode, for the caller to log once the
// lock is let go: a log handler may call Stats or Health, which take it.
func (p *Set) Forget(now time.Time) []Peer {
	p.mu.Lock()
	defer p.mu.Unlock()
	var gone []Peer
	for id, q := range p.peers {
		if now.Sub(q.Last) > SilentAfter(q.Hello) {
			delete(p.peers, id)
			if q.Conflict {
				gone = append(gone, *q)
			}
		}
	}
	return gone
}

// SilentAfter is how long a replica may go unheard before it is
// forgotten: three of its hello intervals (at most MaxHelloEvery), at
// least one second.
func SilentAfter(h Hello) time.Duration {
	every := time.Duration(min(max(h.EveryMS, 0), MaxHelloEvery.Milliseconds())) * time.Millisecond
	return max(3*every, time.Second)
}

// Conflicts returns the replicas of another mode heard within their
// SilentAfter at now, oldest first, and how many hellos were heard in all.
func (p *Set) Conflicts(now time.Time) ([]Conflict, uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Conflict
	for _, q := range p.peers {
		if q.Conflict && now.Sub(q.Last) <= SilentAfter(q.Hello) {
			out = append(out, Conflict{Owner: q.Hello.Owner, Ordering: q.Hello.Ordering, HeadPolicy: q.Hello.HeadPolicy,
				OrderScope: q.Hello.OrderScope, Since: q.Since, LastHeard: q.Last})
		}
	}
	slices.SortFunc(out, func(a, b Conflict) int {
		return cmp.Or(a.Since.Compare(b.Since), cmp.Compare(a.Owner, b.Owner))
	})
	return out, p.heard
}

// Conflict is another dispatcher of the table with another ordering mode;
// the dispatcher's public ModeConflict has the same fields (and converts
// from it).
type Conflict struct {
	Owner                            string    // its Config.Owner
	Ordering, HeadPolicy, OrderScope string    // its configuration, as its hello named it
	Since, LastHeard                 time.Time // when it was first and last heard (local time)
}
