package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/publishers/kafkapub"
	"github.com/pgoutbox/pgoutbox/publishers/natspub"
)

// natsURL is the NATS server of dispatch-nats: NATS_URL, else the local one.
func natsURL() string { return cmp.Or(os.Getenv("NATS_URL"), nats.DefaultURL) }

// dispatchNATS drains N events through natspub into a fresh JetStream
// stream on the local NATS server, and verifies that the stream holds N
// messages and the table N SENT rows.
func dispatchNATS(ctx context.Context, o Options) (Result, error) {
	nc, err := nats.Connect(natsURL(), nats.Timeout(2*time.Second))
	if err != nil {
		return Result{}, fmt.Errorf("no NATS at %s (set NATS_URL): %w", natsURL(), err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return Result{}, err
	}
	prefix := fmt.Sprintf("bench%d.", time.Now().UnixNano())
	name := "PGOUTBOX_" + prefix[:len(prefix)-1]
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{prefix + ">"}})
	if err != nil {
		return Result{}, err
	}
	defer func() { _ = js.DeleteStream(context.WithoutCancel(ctx), name) }()
	pub, err := natspub.New(js, natspub.Config{SubjectPrefix: prefix})
	if err != nil {
		return Result{}, err
	}
	res, err := dispatchTo(ctx, o, "dispatch-nats", pub)
	if err != nil {
		return res, err
	}
	info, err := stream.Info(ctx)
	if err == nil && info.State.Msgs != uint64(o.N) {
		err = fmt.Errorf("verify: the stream holds %d messages, want %d", info.State.Msgs, o.N)
	}
	res.Verified = res.Verified && err == nil
	return res, err
}

// dispatchKafka drains N events through kafkapub into an in-process kfake
// broker (one broker, three partitions: a loopback, not a real cluster).
func dispatchKafka(ctx context.Context, o Options) (Result, error) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, eventType))
	if err != nil {
		return Result{}, err
	}
	defer cluster.Close()
	pub, err := kafkapub.NewFromOpts(kafkapub.Config{}, kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		return Result{}, err
	}
	defer pub.Close()
	return dispatchTo(ctx, o, "dispatch-kafka", pub)
}

// dispatchTo drains N pre-inserted events through a dispatcher whose only
// destination is pub (no local handler).
func dispatchTo(ctx context.Context, o Options, mode string, pub outbox.Publisher) (Result, error) {
	db, err := backlogDB(ctx, o, 8)
	if err != nil {
		return Result{}, err
	}
	defer db.Close()
	d, err := dispatcher.New(db.pool, dispatcher.Config{
		BatchSize: o.Batch, Concurrency: o.Concurrency, PollInterval: o.Poll,
		Wakeup: dispatcher.WakeupDisabled, Logger: quietLogger, Publisher: pub,
	})
	if err != nil {
		return Result{}, err
	}
	elapsed, err := runUntil(ctx, d, uint64(o.N), func(s dispatcher.Stats) uint64 { return s.Sent + s.Failed })
	if err != nil {
		return Result{}, err
	}
	res := throughput(mode, o.N, elapsed)
	res.Params = map[string]any{"batch": o.Batch, "concurrency": o.Concurrency, "conns": 8, "claims": d.Stats().ClaimCycles}
	return res.verify(ctx, db, o.N, sentSQL)
}
