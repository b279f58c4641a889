package natspub

import (
	"cmp"
	"strings"
	"time"

	"github.com/pgoutbox/pgoutbox/outbox"
)

// Defaults and bounds of [Config]. The bounds are inclusive.
const (
	// DefaultMaxPending is the default of Config.MaxPending.
	DefaultMaxPending = 512
	// DefaultAckTimeout is the default of Config.AckTimeout.
	DefaultAckTimeout = 5 * time.Second
	// MinAckTimeout is the smallest Config.AckTimeout accepted.
	MinAckTimeout = 10 * time.Millisecond
	// MaxAckTimeout is the largest Config.AckTimeout accepted.
	MaxAckTimeout = 10 * time.Minute
	// MaxSubjectPrefixLen is the longest Config.SubjectPrefix accepted, in
	// bytes.
	MaxSubjectPrefixLen = 255
)

// maxPendingLimit is the largest Config.MaxPending accepted, maxSourceLen
// the longest Config.Source, in bytes.
const (
	maxPendingLimit = 65536
	maxSourceLen    = 1024
)

// Config tunes a [Publisher]. The zero value is valid and means every
// default.
type Config struct {
	// SubjectPrefix is prepended, byte for byte, to every
	// Message.Destination to form the NATS subject: with "orders." the
	// destination "order.created" (the dispatcher's default router uses the
	// event type) is published on "orders.order.created". It must be a
	// valid start of a subject: at most 255 bytes, no white space, no
	// wildcard token ("*" or ">"), no empty token, so it normally ends with
	// a dot. Defaults to "" (the destination is the subject).
	SubjectPrefix string

	// Source is the CloudEvents source attribute of every message (header
	// ce-source): a URI reference naming the producing service, e.g.
	// "/orders-service" or "urn:acme:orders". At most 1024 bytes that
	// follow the header rule for values (see package outbox). Defaults to
	// outbox.DefaultSource ("/pgoutbox").
	Source string

	// MaxPending is how many messages one Publish call keeps in flight
	// without a PubAck: the batch is pipelined through this window. The
	// jetstream.JetStream has a cap of its own shared by all callers
	// (jetstream.WithPublishAsyncMaxPending, 4000 by default); when it is
	// full, Publish waits for acks rather than failing. 1 to 65536.
	// Defaults to 512.
	MaxPending int

	// KeyOrder makes Publish keep the order of each outbox.OrderKey
	// within a call, as outbox.KeyOrderedPublisher promises: it sends a
	// key's next message only once the stream acknowledged the previous
	// one, and after a key's first failure reports the rest of the key
	// with outbox.ErrNotAttempted, unsent. Keys, and messages without a
	// key, still share the MaxPending window. Set it with a dispatcher
	// whose Ordering is PerKey, which then sends a key's run of events in
	// one call instead of one event per call. It costs a round trip per
	// message of a key that a call holds more than once. Defaults to
	// false: every message is pipelined, and a failed message does not
	// hold back the later ones of its key.
	KeyOrder bool

	// AckTimeout is how long Publish waits for the PubAck of one message
	// after sending it; a message not confirmed by then gets a retryable
	// error. It also bounds Publish when ctx has no deadline: every call
	// returns at most AckTimeout after its last send. 10ms to 10 minutes.
	// Defaults to 5 seconds.
	AckTimeout time.Duration
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	c.Source = cmp.Or(c.Source, outbox.DefaultSource)
	c.MaxPending = cmp.Or(c.MaxPending, DefaultMaxPending)
	c.AckTimeout = cmp.Or(c.AckTimeout, DefaultAckTimeout)
	return c
}

// validate reports the first out-of-range field as an *outbox.ConfigError.
func (c Config) validate() error {
	switch {
	case c.MaxPending < 1 || c.MaxPending > maxPendingLimit:
		return &outbox.ConfigError{Field: "MaxPending", Reason: "must be between 1 and 65536"}
	case c.AckTimeout < MinAckTimeout || c.AckTimeout > MaxAckTimeout:
		return &outbox.ConfigError{Field: "AckTimeout", Reason: "must be between 10ms and 10m"}
	}
	if len(c.Source) > maxSourceLen {
		return &outbox.ConfigError{Field: "Source", Reason: "must be at most 1024 bytes"}
	}
	if reason := outbox.HeaderValueProblem(c.Source); reason != "" {
		return &outbox.ConfigError{Field: "Source", Reason: reason}
	}
	if reason := checkPrefix(c.SubjectPrefix); reason != "" {
		return &outbox.ConfigError{Field: "SubjectPrefix", Reason: reason}
	}
	return nil
}

// checkPrefix returns why p cannot start a subject, or "".
func checkPrefix(p string) string {
	if len(p) > MaxSubjectPrefixLen {
		return "must be at most 255 bytes"
	}
	if p == "" {
		return ""
	}
	// A prefix is the tokens before the destination, plus a final token
	// that the destination may continue ("orders." or "orders.v1-").
	tokens := strings.Split(p, ".")
	for i, tok := range tokens {
		last := i == len(tokens)-1
		if tok == "" && !last {
			return "must not contain an empty token"
		}
		if bad := badToken(tok); bad != "" {
			return "must not contain " + bad
		}
	}
	return ""
}

// badToken names what makes tok unfit to be (part of) a subject token, or
// returns "".
func badToken(tok string) string {
	if tok == "*" || tok == ">" {
		return "a wildcard token"
	}
	if strings.ContainsAny(tok, " \t\r\n\f\v\x00") {
		return "white space or NUL"
	}
	return ""
}

// checkSubject returns why s is not a subject a message can be published
// on, or "".
func checkSubject(s string) string {
	if s == "" {
		return "is empty"
	}
	for tok := range strings.SplitSeq(s, ".") {
		if tok == "" {
			return "has an empty token"
		}
		if bad := badToken(tok); bad != "" {
			return "contains " + bad
		}
	}
	return ""
}
