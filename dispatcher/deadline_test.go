package dispatcher_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// No handler starts once its event's local lease deadline has passed, even
// when the timer that marks the lease lost has not run yet (a paused
// process): the event waiting for a handler slot behind a long handler is
// let go unstarted, its row stays PROCESSING until recovery returns it, and
// it is delivered then.
func TestNoHandlerStartsPastLocalDeadline(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	ids := insertEvents(t, db, "x", 2)
	log := newCallLog()
	started, unblock := make(chan uuid.UUID, 2), make(chan struct{})
	clock := &testClock{}
	cfg := baseConfig(db)
	cfg.Concurrency = 1
	// No real timer fires within the test (the deadline timer after 48m,
	// the heartbeat after 20m): only the test clock passes the deadline.
	cfg.LeaseDuration = time.Hour
	cfg.RecoverEvery = 1
	dispatcher.SetClock(&cfg, clock.Now)
	d, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	require.NoError(t, d.Handle("x", func(_ context.Context, e outbox.Event) error {
		log.enter(e.ID)
		defer log.exit(e.ID)
		started <- e.ID
		<-unblock
		return nil
	}))
	runDispatcher(t, d)
	release := sync.OnceFunc(func() { close(unblock) })
	t.Cleanup(release) // before the stop, should the test fail
	first := <-started
	second := ids[0]
	if first == second {
		second = ids[1]
	}
	require.Equal(t, 2, d.Stats().InFlight, "both events held, in one batch")

	clock.advance(cfg.LeaseDuration) // the process resumes after a pause past the local deadline
	release()
	waitFor(t, "the first event completed and the second let go", func() bool {
		return d.Stats().InFlight == 0
	})
	require.Zero(t, log.count(second), "the handler of an event past its local deadline must not start")
	require.Equal(t, row{Status: outbox.StatusProcessing}, readRow(t, db, second), "left for its lease to expire")

	expireLease(t, db, second)
	waitFor(t, "the second event recovered and SENT", func() bool {
		return readRow(t, db, second).Status == outbox.StatusSent
	})
	require.Equal(t, row{Status: outbox.StatusSent, Attempts: 1, Recoveries: 1, Code: "worker_lost"}, readRow(t, db, second))
	require.Equal(t, 1, log.count(second))
}

// No publish call carries an event past its local lease deadline: an event
// whose handler succeeded before the deadline and that waited for the rest
// of its batch is not published after it; its outcome is reported lost
// (outbox.ErrLockLost) and its row stays PROCESSING for recovery. An event
// without a handler is published as soon as its batch arrives, before the
// pause. (begin, which both paths go through, reads the deadline too; see
// TestNoHandlerStartsPastLocalDeadline.)
func TestNoPublishPastLocalDeadline(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	slow := insertEvents(t, db, "slow", 1)[0]       // a handler, not published
	handled := insertEvents(t, db, "handled", 1)[0] // a handler, then published
	pubOnly := insertEvents(t, db, "pub", 1)[0]     // published, no handler
	pub := &recordingPublisher{}
	errs := &errorLog{}
	clock := &testClock{}
	cfg := baseConfig(db)
	cfg.LeaseDuration = time.Hour // as above: only the test clock passes the deadline
	dispatcher.SetClock(&cfg, clock.Now)
	cfg.Publisher = pub
	cfg.RouteFunc = func(e outbox.Event) string {
		if e.Type == "slow" {
			return ""
		}
		return "topic"
	}
	cfg.OnError = errs.add
	slowStarted, unblock, handledDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	d, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	require.NoError(t, d.Handle("slow", func(context.Context, outbox.Event) error {
		close(slowStarted)
		<-unblock
		return nil
	}))
	require.NoError(t, d.Handle("handled", func(context.Context, outbox.Event) error {
		defer close(handledDone)
		return nil
	}))
	runDispatcher(t, d)
	release := sync.OnceFunc(func() { close(unblock) })
	t.Cleanup(release) // before the stop, should the test fail
	<-slowStarted
	<-handledDone
	waitFor(t, "the publish-only event published at once and SENT", func() bool {
		return readRow(t, db, pubOnly).Status == outbox.StatusSent
	})
	// The row is SENT when the completer's statement commits; the event is
	// let go just after.
	waitFor(t, "the slow and the handled events held, the publish-only one let go", func() bool {
		return d.Stats().InFlight == 2
	})

	clock.advance(cfg.LeaseDuration) // the process resumes after a pause past the local deadline
	release()
	waitFor(t, "the slow event completed and the others let go", func() bool {
		return d.Stats().InFlight == 0
	})
	published := pub.published()
	require.Len(t, published, 1, "nothing may be published past the local deadline")
	require.Equal(t, pubOnly, published[0].Event.ID)
	require.Equal(t, row{Status: outbox.StatusSent, Attempts: 1}, readRow(t, db, slow))
	require.Equal(t, row{Status: outbox.StatusProcessing}, readRow(t, db, handled))
	lost := errs.matching(outbox.ErrLockLost)
	require.Len(t, lost, 1)
	require.ErrorContains(t, lost[0], handled.String())
	require.Equal(t, uint64(1), d.Stats().LockLost)
}
