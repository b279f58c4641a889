package integration_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/testdb"
)

// The network scenarios (issue 13): the replicas reach PostgreSQL through
// a toxiproxy proxy each, run in this process, whose links the test
// slows, resets, refuses and black-holes; and through PgBouncer in
// transaction mode while they are killed.

// chaosNet is one toxiproxy proxy per replica slot, in front of the
// scenario's cluster.
type chaosNet struct {
	proxies []*toxiproxy.Proxy
}

// startChaosNet starts a proxy for each replica slot of h and routes the
// replicas through them. The proxies stop when the test ends.
func startChaosNet(h *chaosHarness) *chaosNet {
	t := h.t
	zerolog.SetGlobalLevel(zerolog.Disabled) // some toxics log every chunk to the global logger
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	upstream := net.JoinHostPort("127.0.0.1", strconv.Itoa(h.cluster.Port))
	n := &chaosNet{}
	urls := make([]string, h.sc.replicas)
	for i := range h.sc.replicas {
		p := toxiproxy.NewProxy(server, fmt.Sprintf("r%d", i+1), "127.0.0.1:0", upstream)
		require.NoError(t, p.Start())
		t.Cleanup(p.Stop)
		u, err := url.Parse(h.cluster.URL)
		require.NoError(t, err)
		u.Host = p.Listen // the port it took
		urls[i] = u.String()
		n.proxies = append(n.proxies, p)
	}
	h.replicaURL = func(slot int) string { return urls[slot] }
	return n
}

// netFault is one kind of network fault: what it does to a proxy for a
// while, and how long that while is, in leases.
type netFault struct {
	kind     string // its name in the figures
	min, max float64
	inject   func(p *toxiproxy.Proxy, d time.Duration) error
}

// netFaults are the faults TestChaosNetwork picks from.
var netFaults = []netFault{
	{kind: "latency spells", min: 1, max: 3, inject: func(p *toxiproxy.Proxy, d time.Duration) error {
		latency := 20 + rand.IntN(180)
		return withToxics(p, d, "latency", fmt.Sprintf(`{"latency": %d, "jitter": %d}`, latency, latency/2))
	}},
	{kind: "connection resets", min: 0.2, max: 1, inject: func(p *toxiproxy.Proxy, d time.Duration) error {
		return withToxics(p, d, "reset_peer", `{"timeout": 0}`)
	}},
	{kind: "refused connections", min: 0.5, max: 2, inject: func(p *toxiproxy.Proxy, d time.Duration) error {
		p.Stop() // closes its connections and its port
		time.Sleep(d)
		return p.Start()
	}},
	{kind: "black holes", min: 2, max: 3, inject: func(p *toxiproxy.Proxy, d time.Duration) error {
		return withToxics(p, d, "timeout", `{"timeout": 0}`) // nothing passes, nothing closes
	}},
	{kind: "bandwidth limits", min: 1, max: 2, inject: func(p *toxiproxy.Proxy, d time.Duration) error {
		return withToxics(p, d, "bandwidth", `{"rate": 2}`) // KB/s
	}},
	{kind: "sliced packets", min: 1, max: 2, inject: func(p *toxiproxy.Proxy, d time.Duration) error {
		return withToxics(p, d, "slicer", `{"average_size": 8, "size_variation": 4, "delay": 200}`) // delay in µs
	}},
}

// withToxics adds a toxic of kind with attrs to both directions of p,
// waits d and removes them.
func withToxics(p *toxiproxy.Proxy, d time.Duration, kind, attrs string) error {
	streams := []string{"upstream", "downstream"}
	for _, stream := range streams {
		body := fmt.Sprintf(`{"name": %q, "type": %q, "stream": %q, "toxicity": 1, "attributes": %s}`,
			kind+"_"+stream, kind, stream, attrs)
		if _, err := p.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
			return err
		}
	}
	time.Sleep(d)
	for _, stream := range streams {
		if err := p.Toxics.RemoveToxic(context.Background(), kind+"_"+stream); err != nil {
			return err
		}
	}
	return nil
}

// TestChaosNetwork: each of 3 replicas reaches PostgreSQL through a
// toxiproxy proxy of its own; every 0.3-1.5s one random replica's link
// gets a random fault: latency with jitter, connection resets, refused
// connections, a black hole longer than the lease, a bandwidth limit or
// sliced packets, in both directions. 2 writers commit directly. A black
// hole leaves the replica's statements hanging until its own timeouts;
// its leases expire, the others recover its events, and its late
// outcomes must be fenced off. Each fault is recorded as an outage, to
// which the checker attributes the duplicates it causes.
func TestChaosNetwork(t *testing.T) {
	t.Parallel()
	var n *chaosNet
	runChaos(t, chaosScenario{
		name: "network", replicas: 3, writers: 2, lease: time.Second,
		setup: func(h *chaosHarness) { n = startChaosNet(h) },
		inject: func(ctx context.Context, h *chaosHarness) {
			atRandomIntervals(ctx, 300*time.Millisecond, 1500*time.Millisecond, func() {
				f := netFaults[rand.IntN(len(netFaults))]
				d := time.Duration((f.min + rand.Float64()*(f.max-f.min)) * float64(h.sc.lease))
				p := n.proxies[rand.IntN(len(n.proxies))]
				h.outage(f.kind, func() error { return f.inject(p, d) })
			})
		},
	})
}

// TestChaosPgBouncer: the kill schedule (SIGKILL of a random replica of 3
// every 0.5-3s, restarted) with the replicas' pools going through
// PgBouncer in transaction mode, in the exec mode docs/operations.md
// recommends behind it, and their listeners connected to PostgreSQL
// directly (dispatcher.Config.ListenerConnConfig). 2 writers commit
// directly. Skipped when pgbouncer is not installed.
func TestChaosPgBouncer(t *testing.T) {
	t.Parallel()
	runChaos(t, chaosScenario{
		name: "pgbouncer", replicas: 3, writers: 2, lease: time.Second,
		setup: func(h *chaosHarness) {
			b, skip := testdb.StartBouncerFor(h.t, h.cluster.URL)
			if b == nil {
				h.t.Skip(skip)
			}
			mode := "cache_describe"
			if b.Prepared {
				mode = "cache_statement"
			}
			via := b.URL + "&default_query_exec_mode=" + mode
			h.replicaURL = func(int) string { return via }
			h.listenerURL = h.cluster.URL
			h.t.Logf("replicas through PgBouncer %s in transaction mode, exec mode %s", b.Version, mode)
		},
		inject: killReplicas,
	})
}
