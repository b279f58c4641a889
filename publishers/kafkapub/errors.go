package kafkapub

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgoutbox/pgoutbox/outbox"
)

// originError is an error of this adapter about one of pgoutbox's: it
// reads "<context>: <err>", context "kafkapub" (or starting with it) and err's
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

// maxTopicLen is Kafka's limit on topic names.
const maxTopicLen = 249

// permanentCauses are the Kafka errors that retrying the same record to the
// same topic cannot fix. Everything else is retryable, outages above all:
// an unknown topic or topic ID (the topic is not created yet), a broker
// that cannot be reached, a timeout. The batchCauses among them are
// permanent only for a record that met them alone.
var permanentCauses = append([]error{
	kerr.InvalidTopicException,
	kerr.TopicAuthorizationFailed,
	kerr.ClusterAuthorizationFailed,
}, batchCauses...)

// batchCauses are the errors with which a broker rejects a whole record
// batch because of what is in it: the batch, or one record in it, is too
// large (the client also fails a record larger than its own batch limit
// with MessageTooLarge), or a record in it is invalid, for example keyless
// on a compacted topic. franz-go then fails every record buffered for that
// partition, from every Publish call, with the same error, so it names no
// record. Other errors that fail a partition's records together (a corrupt
// batch, an invalid timestamp) are retryable, so they dead-letter no one.
var batchCauses = []error{
	kerr.MessageTooLarge,
	kerr.RecordListTooLarge,
	kerr.InvalidRecord,
}

// unavailableCauses are the errors that say the cluster could not be
// reached or did not answer, rather than anything about the record: the
// client gave up on records no broker acknowledged within
// kgo.RecordDeliveryTimeout or kgo.RecordRetries (checked with the cluster
// stopped: "records have timed out before they were able to be produced,
// last err: unable to dial: ... connection refused"), the client is closed,
// or a broker reported that it, or the partition's leader, is not
// available. A dial or network error (*net.OpError) counts too, and so
// does context.DeadlineExceeded: franz-go fails a record with its
// context's error, and the only context it sees is the Publish call's, so
// the whole call ran out of time with the record unacknowledged (with
// every broker down it retries until then; checked on a stopped kfake
// cluster, where either this or unconfirmed reports it, whichever comes
// first).
var unavailableCauses = []error{
	context.DeadlineExceeded,
	kgo.ErrRecordTimeout,
	kgo.ErrRecordRetries,
	kgo.ErrClientClosed,
	kerr.BrokerNotAvailable,
	kerr.LeaderNotAvailable,
	kerr.NotLeaderForPartition,
	kerr.NetworkException,
	kerr.RequestTimedOut,
	kerr.NotEnoughReplicas,
	kerr.NotEnoughReplicasAfterAppend,
}

// unavailable reports whether err is one of unavailableCauses or a network
// error.
func unavailable(err error) bool {
	var netErr *net.OpError
	if errors.As(err, &netErr) {
		return true
	}
	for _, cause := range unavailableCauses {
		if errors.Is(err, cause) {
			return true
		}
	}
	return false
}

// classify wraps a produce error for topic: with outbox.Permanent when it
// is one of permanentCauses, with outbox.Unavailable when the cluster could
// not be reached (see unavailableCauses), as a plain retryable error
// otherwise. The text names the topic and the Kafka error, never record
// bytes. Publish classifies an error of batchCauses only for a record
// produced alone.
func classify(topic string, err error) error {
	if err == nil {
		return nil
	}
	wrapped := fmt.Errorf("kafkapub: produce to topic %q: %w", topic, err)
	for _, cause := range permanentCauses {
		if errors.Is(err, cause) {
			return outbox.Permanent(wrapped)
		}
	}
	if unavailable(err) {
		return outbox.Unavailable(wrapped)
	}
	return wrapped
}

// inRejectedBatch reports whether err is one of batchCauses: the record may
// be the cause, or only have been buffered on the same partition.
func inRejectedBatch(err error) bool {
	for _, cause := range batchCauses {
		if errors.Is(err, cause) {
			return true
		}
	}
	return false
}

// notAlone is the retryable error for a record whose batch was rejected
// with err and that was not acknowledged alone before ctx ended.
func notAlone(ctx context.Context, topic string, err error) error {
	return fmt.Errorf("kafkapub: produce to topic %q: batch rejected (%w); not acknowledged alone before the context ended: %w",
		topic, err, context.Cause(ctx))
}

// unconfirmed is the retryable error for a record whose acknowledgement did
// not arrive before ctx ended. When ctx's deadline passed it is
// unavailable too: with every broker down franz-go keeps retrying the
// record until then, and reports nothing else (checked on a stopped kfake
// cluster); a caller's cancellation says nothing of the cluster.
func unconfirmed(ctx context.Context, topic string) error {
	err := fmt.Errorf("kafkapub: produce to topic %q: not acknowledged before the context ended: %w",
		topic, context.Cause(ctx))
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return outbox.Unavailable(err)
	}
	return err
}

// checkTopic rejects, before anything is sent, a topic name that Kafka would
// refuse. The error is permanent and wraps kerr.InvalidTopicException.
func checkTopic(topic string) error {
	var reason string
	switch {
	case topic == "":
		reason = "is empty"
	case len(topic) > maxTopicLen:
		reason = "is longer than 249 bytes"
	case topic == "." || topic == "..":
		reason = `may not be "." or ".."`
	case !legalTopicChars(topic):
		reason = "has characters other than ASCII letters, digits, '.', '_' and '-'"
	default:
		return nil
	}
	// The name is not quoted: it may be the one thing that is malformed.
	return outbox.Permanent(fmt.Errorf("kafkapub: topic name %s: %w", reason, kerr.InvalidTopicException))
}

// legalTopicChars reports whether s uses only the characters Kafka accepts
// in topic names.
func legalTopicChars(s string) bool {
	for i := range len(s) {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '.' || c == '_' || c == '-'
		if !ok {
			return false
		}
	}
	return true
}
