// Package chaos records what happens in a fault-injection scenario and
// checks it against the promises of docs/guarantees.md.
//
// # What is recorded
//
//   - The ledger: the business rows that writers committed, each naming
//     the event its transaction emitted. It is the truth: an event exists
//     if and only if its business row does.
//   - Handler records: every replica's handler appends a Record when it
//     starts and when it returns, with a Recorder (one write(2) of one
//     line to an O_APPEND file per replica process), so a SIGKILL loses
//     nothing written before it.
//   - Transitions: a trigger on the outbox table (InstallTransitionLog)
//     logs each status change in the changing transaction, with the lock
//     token before and after, the lease it ended and the writing
//     session's application_name (the replica's name): the database's own
//     record of who claimed and who completed each event.
//   - The faults the scenario injected (kills, pauses, server restarts),
//     the final outbox rows, the server log's deadlocks and the replicas'
//     goroutines and heap at a clean exit.
//
// # What is checked
//
// Check is a pure function of those records; its Report names lost events
// (committed, never delivered), unexpected ones (delivered or emitted
// without a committed business row), duplicates with their cause,
// overlapping runs of one event (allowed only while the first run's
// replica was paused past its lease), fencing violations (a second SENT,
// a SENT not out of PROCESSING, written under another replica's token or
// by a statement begun after the lease, a row leaving SENT, a handler started after its
// event was SENT), final statuses, rows left
// PENDING or PROCESSING and the time to drain once the faults stopped.
// Report.Violations lists what breaks a promise; duplicates do not, since
// delivery is at least once.
//
// # The log relay (issue 27)
//
// CheckRelay judges a relay scenario (relay_*.go) from its own records:
// the ledger (LedgerEntry: event, key, version, xid, seq, committed by a
// writer that locked the key's row before emitting, so a key's commit
// order is its version order), the broker acks recorded by the test
// publisher wrapper (Recorder.WriteDelivery), the cursor log and the copy
// of the ticks (InstallCursorLog, written in the moving transaction), and
// the faults. Its RelayReport names lost and unexpected events, per-key
// order violations (the first ack of a version after the first ack of a
// higher one), cursor moves past an event before its ack, moves outside
// the lease, and every duplicate with its explanation: the token that
// published the earlier ack never moved the cursor past the event, and a
// kill of its replica, a loss of its lease (a take by another token in
// the cursor log) or a server outage came between the two acks. Which
// batch an event was in needs no hook in the relay: the event's tick is
// the first tick whose snapshot shows its xid finished, and a move from
// tick c to t (or up to batch_seq inside batch tick t) covers it when
// c < tick <= t.
//
// The scenarios that drive the replicas live in the integration tests
// (chaos*_test.go); docs/reliability.md publishes their figures.
package chaos
