package admin

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// BlockedKeys bounds.
const (
	// DefaultBlockedLimit is the most blocked keys a page holds when
	// BlockedParams.Limit is 0.
	DefaultBlockedLimit = 100
	// MaxBlockedLimit is the largest BlockedParams.Limit.
	MaxBlockedLimit = 1000
	// BlockedScanLimit is the most keys one BlockedKeys call examines
	// (keys with a dead letter not skipped, blocked or not). A call that
	// reaches it returns the blocked keys it found so far, perhaps none,
	// with a Next cursor to go on from.
	BlockedScanLimit = 10_000
	// WaitingCountLimit is the most waiting events BlockedKeys counts
	// behind one head: past it, BlockedKey.Waiting is WaitingCountLimit
	// and BlockedKey.WaitingCapped is true.
	WaitingCountLimit = 1000
)

// BlockedParams selects a page of blocked keys.
type BlockedParams struct {
	// After continues after this key: a previous page's Next. Empty
	// starts at the first key.
	After string
	// Limit is the most blocked keys in the page, 1 to [MaxBlockedLimit].
	// Defaults to [DefaultBlockedLimit]. With ByType it counts blocked
	// pairs, and a page holds every blocked pair of its last key, so it
	// may hold a few more.
	Limit int
	// ByType lists what blocks dispatchers with OrderScope
	// ScopeKeyAndType: each (key, event type) pair whose head, the unsent
	// event of the pair with the lowest seq that is not a skipped FAILED
	// one, is FAILED, one BlockedKey per pair, in key and then type
	// order. It reads each key's first WaitingCountLimit + 1 blockers
	// (any type): a pair whose head lies behind more than that many events
	// of its key is not seen, and a pair's Waiting counts the events
	// behind its head among those read (WaitingCapped then reports that
	// the key has more). Defaults to false: one head per key, across
	// every type (OrderScope ScopeKey).
	ByType bool
}

// BlockedKey is an order key whose head, the unsent event of the key with
// the lowest seq that is not a skipped FAILED one, is FAILED: under
// dispatcher head policy BlockKey no later event of the key is handed
// out until an operator replays or skips that head. With
// BlockedParams.ByType it is a pair of a key and an event type (Type),
// whose head is the pair's such event.
type BlockedKey struct {
	// Key is the order key: the events' partition key, else their
	// aggregate id.
	Key string `json:"key"`
	// HeadID is the id of the FAILED event at the head of the key.
	HeadID uuid.UUID `json:"head_id"`
	// HeadSeq is the head's seq.
	HeadSeq int64 `json:"head_seq"`
	// Type is the head's event type.
	Type string `json:"type"`
	// Code is the head's last error code.
	Code outbox.Code `json:"code,omitempty"`
	// FailedAt is when the head became FAILED.
	FailedAt *time.Time `json:"failed_at,omitempty"`
	// Waiting counts the events of the key behind the head that still
	// block it (PENDING, PROCESSING, or FAILED and not skipped: in the
	// outbox table or the dead letters), up to [WaitingCountLimit].
	Waiting int `json:"waiting"`
	// WaitingCapped reports that more than WaitingCountLimit events wait:
	// Waiting is then WaitingCountLimit.
	WaitingCapped bool `json:"waiting_capped"`
}

// BlockedPage is one page of BlockedKeys.
type BlockedPage struct {
	// Keys are the page's blocked keys, in key order (the database's
	// collation).
	Keys []BlockedKey `json:"keys"`
	// Next continues after this page (BlockedParams.After); empty when
	// the walk reached the last key. A page that stopped at its Limit
	// or at [BlockedScanLimit] has a Next, which may lead to an empty
	// page.
	Next string `json:"next"`
	// Scanned is how many keys with a dead letter the page examined,
	// blocked or not.
	Scanned int `json:"scanned"`
	// KeyOrderOff reports that the table has no valid order index, so
	// blocked keys were not looked for (see Counts.KeyOrderOff): no key is
	// blocked, the page is empty and nothing was read.
	KeyOrderOff bool `json:"key_order_off,omitempty"`
}

// BlockedKeys returns a page of the keys whose head is FAILED and not
// skipped: the keys that a dispatcher with Ordering PerKey and head
// policy BlockKey does not move (see docs/ordering.md); with p.ByType,
// the (key, event type) pairs that such dispatchers with OrderScope
// ScopeKeyAndType do not move. Under head policy
// SkipFailed, or without PerKey, the same FAILED rows block nothing; the
// page lists them all the same, since the table does not know the
// dispatchers' policy.
//
// Only a key with a dead letter (a FAILED event) not skipped can be
// blocked, so it walks the dead letters' order index one key at a time
// in key order, from p.After, reading each key's first unskipped dead
// letter and probing the outbox table's order index for an event of the
// key with a lower seq (the key's head is then PENDING or PROCESSING, not
// FAILED): a page costs in proportion to the keys with a dead letter it
// examines, at most [BlockedScanLimit], however many events are PENDING
// or SENT. Keys examined between blocked ones cost as much as blocked
// ones; the empty key "" (never stored by Emit) is never listed. A FAILED
// row still in the outbox table (a stray, Counts.Unmoved) counts as a
// blocker behind a head, but does not make its key listed until the
// retention pass moves it. It reads without locks, one snapshot per
// page. Bad params give an [*outbox.InputError].
//
// On a table without its order index (schema version 12 without
// migrations.Config.KeyOrder: no dispatcher orders per key) no key is
// blocked: the page is empty with KeyOrderOff set, after one catalog
// query, and no key is probed (without the index each probe would scan
// the table).
func (a *Admin) BlockedKeys(ctx context.Context, p BlockedParams) (BlockedPage, error) {
	if err := checkText("After", p.After); err != nil {
		return BlockedPage{}, err
	}
	limit, err := checkLimit(p.Limit, DefaultBlockedLimit, MaxBlockedLimit)
	if err != nil {
		return BlockedPage{}, err
	}
	if off, err := a.keyOrderOff(ctx); err != nil || off {
		return BlockedPage{Keys: []BlockedKey{}, KeyOrderOff: off}, err
	}
	sql := a.sql.blocked
	if p.ByType {
		sql = a.sql.blockedByType
	}
	rows, err := a.db.Query(ctx, sql, p.After, BlockedScanLimit, limit, WaitingCountLimit)
	if err != nil {
		return BlockedPage{}, errtext.Wrap(err, "admin: blocked keys %s", a.table)
	}
	page := BlockedPage{Keys: []BlockedKey{}}
	var k BlockedKey
	var blocked, more bool
	var found int
	targets := []any{&page.Scanned, &found, &blocked, &k.Key, &k.HeadID, &k.HeadSeq, &k.Type, &k.Code, &k.FailedAt, &k.Waiting}
	if p.ByType {
		targets = append(targets, &more)
	}
	_, err = pgx.ForEachRow(rows, targets, func() error {
		if blocked {
			k.WaitingCapped = k.Waiting > WaitingCountLimit || more
			k.Waiting = min(k.Waiting, WaitingCountLimit)
			page.Keys = append(page.Keys, k)
		}
		page.Next = k.Key
		return nil
	})
	if err != nil {
		return BlockedPage{}, errtext.Wrap(err, "admin: blocked keys %s", a.table)
	}
	if page.Scanned < BlockedScanLimit && found < limit {
		page.Next = "" // the walk ran out of keys
	}
	return page, nil
}
