package kafkapub

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/pgoutbox/pgoutbox/outbox"
)

// maxTopicLen is Kafka's limit on topic names.
const maxTopicLen = 249

// permanentCauses are the Kafka errors that retrying the same record to the
// same topic cannot fix. Everything else is retryable.
var permanentCauses = []error{
	kerr.UnknownTopicOrPartition,
	kerr.UnknownTopicID,
	kerr.MessageTooLarge,
	kerr.RecordListTooLarge,
	kerr.InvalidRecord,
	kerr.InvalidTopicException,
	kerr.TopicAuthorizationFailed,
	kerr.ClusterAuthorizationFailed,
}

// classify wraps a produce error for topic: with outbox.Permanent when it
// is one of permanentCauses, as a plain retryable error otherwise. The text
// names the topic and the Kafka error, never record bytes.
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
	return wrapped
}

// unconfirmed is the retryable error for a record whose acknowledgement did
// not arrive before ctx ended.
func unconfirmed(ctx context.Context, topic string) error {
	return fmt.Errorf("kafkapub: produce to topic %q: not acknowledged before the context ended: %w",
		topic, context.Cause(ctx))
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
