package integration_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/integration/internal/chaos"
)

// The scenarios of the dispatcher's modes (issue 13): a poison event
// that kills its replica at every start, at-most-once delivery and
// DeleteSent under the kill schedule. docs/reliability.md explains what
// each proves.

const (
	// chaosPoison is the payload of a poison event (JSON).
	chaosPoison = `"poison"`
	// chaosMaxRecoveries is the replicas' MaxRecoveries (the default): a
	// poison event starts at most chaosMaxRecoveries+1 times.
	chaosMaxRecoveries = 3
)

// killSelf SIGKILLs this process: a poison event's handler, after its
// start record.
func killSelf() {
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}

// restartDead restarts, until the returned stop is called, every replica
// that died by itself (a poison event's handler killed it), when the
// scenario has poison events; else it does nothing.
func (h *chaosHarness) restartDead(ctx context.Context) (stop func()) {
	if h.sc.poisonEvery == 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range h.sc.replicas { // one watcher per slot: a restart takes a while
		wg.Go(func() {
			for ctx.Err() == nil {
				h.mu.Lock()
				r := h.slots[i]
				h.mu.Unlock()
				if exited(r.c.cmd.Process.Pid) {
					h.replace(i, r, h.lastRecordAt(r), "poison self-kills")
				}
				sleepCtx(ctx, 20*time.Millisecond)
			}
		})
	}
	return func() {
		cancel()
		wg.Wait()
	}
}

// lastRecordAt is when the dead replica r wrote its last record: its
// poison event's start, just before it killed itself; it wrote nothing
// after. (The time its death is seen may be much later on a loaded
// machine, and a run cut then would seem to overlap its next run.)
func (h *chaosHarness) lastRecordAt(r *chaosReplica) time.Time {
	recs, err := chaos.ReadRecords(filepath.Join(h.dir, r.name+".log"))
	require.NoError(h.t, err)
	var last time.Time
	for _, rec := range recs {
		if rec.At.After(last) {
			last = rec.At
		}
	}
	if last.IsZero() {
		last = time.Now()
	}
	return last
}

// exited reports whether the child process pid has exited (a zombie not
// yet reaped, on Linux).
func exited(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// "pid (comm) state ...": comm may hold spaces and parentheses.
	rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
	return strings.HasPrefix(strings.TrimSpace(rest), "Z")
}

// TestChaosPoisonEvent: each writer's 4th event, then one in 500, is a
// poison event whose handler SIGKILLs its own replica (of 3) at every
// start, after its start record; the dead replica is restarted. Other events are claimed in the
// same batches (100 events, 100 handlers). Each poison event must end
// FAILED worker_lost after at most MaxRecoveries+1 starts, never SENT;
// every other event must be SENT, never dead-lettered. An innocent
// charged more recoveries than its runs (its claim's start mark, then one
// charge per further poison death beside it while it was marked: see
// suspects in docs/guarantees.md) is counted, not failed.
func TestChaosPoisonEvent(t *testing.T) {
	t.Parallel()
	rep := runChaos(t, chaosScenario{
		name: "poison", replicas: 3, writers: 2, lease: time.Second, poisonEvery: 500,
		inject: func(ctx context.Context, _ *chaosHarness) { <-ctx.Done() },
	})
	require.Positive(t, rep.Poisoned, "no poison event committed: the scenario did not happen")
}

// TestChaosAtMostOnceKills: the kill scenario (a random replica of 3
// SIGKILLed every 0.5-3s, restarted) with Delivery AtMostOnce. No event
// may start twice; an event whose attempt a kill cut (or that its killed
// claimer had marked started) ends FAILED worker_lost; every other one
// is SENT.
func TestChaosAtMostOnceKills(t *testing.T) {
	t.Parallel()
	rep := runChaos(t, chaosScenario{
		name: "at-most-once", replicas: 3, writers: 2, lease: time.Second, delivery: dispatcher.AtMostOnce,
		inject: killReplicas,
	})
	require.Empty(t, rep.Duplicates, "at-most-once ran an event twice:\n%s", rep)
}

// TestChaosDeleteSentKills: the kill scenario with DeleteSent. Delivery
// is read from the transition log (a delete is the success) and the
// records: every delete follows a run of the deleting replica that ended,
// is fenced like a SENT, and nothing starts or claims an event after its
// delete; no row is left SENT.
func TestChaosDeleteSentKills(t *testing.T) {
	t.Parallel()
	rep := runChaos(t, chaosScenario{
		name: "delete-sent", replicas: 3, writers: 2, lease: time.Second, deleteSent: true,
		inject: killReplicas,
	})
	require.Positive(t, rep.Deleted, "no row was deleted: the scenario did not happen")
	require.NotContains(t, rep.Statuses, "SENT")
}
