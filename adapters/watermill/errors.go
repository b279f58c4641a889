package pgwatermill

import (
	"errors"
	"strings"
)

// ErrNoTx is returned by Publish when it has no transaction to write in:
// the Publisher was made by [NewPublisher] with a nil pool, and no
// message's context carries a transaction ([WithTx]). Nothing is written.
var ErrNoTx = errors.New("pgwatermill: no transaction: put one in the message's context with WithTx, " +
	"use NewTxPublisher, or give NewPublisher a pool")

// ErrMixedTx is returned by Publish when the messages of one call carry
// different transactions in their contexts ([WithTx]), on different
// connections: one call is one Emit in one transaction. Nothing is
// written.
var ErrMixedTx = errors.New("pgwatermill: the messages of one Publish call carry different transactions")

// ErrClosed is returned by Publish after the Publisher's Close, and by
// Subscribe after the Subscriber's Close.
var ErrClosed = errors.New("pgwatermill: closed")

// ErrNacked is the error the Subscriber's handler gives the dispatcher
// for a message that was Nacked: an ordinary failure, so the event is
// retried on the dispatcher's backoff, spending an attempt, and becomes
// FAILED when its attempts are spent.
var ErrNacked = errors.New("pgwatermill: message nacked")

// originError is an error of this adapter about one of pgoutbox's: it
// reads "<context>: <err>", context starting with "pgwatermill" and err's
// text without its "pgoutbox: ", so the text names one origin; it unwraps
// to err.
type originError struct {
	context string
	err     error
}

func (e *originError) Error() string {
	return e.context + ": " + strings.TrimPrefix(e.err.Error(), "pgoutbox: ")
}

func (e *originError) Unwrap() error { return e.err }
