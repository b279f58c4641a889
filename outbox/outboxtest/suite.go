package outboxtest

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/pgoutbox/outbox"
)

// Features says what the broker under test can do; the suite checks each
// capability that is claimed and skips none that is required of all.
type Features struct {
	// ServerDedupe: publishing the same event ID twice (within the
	// broker's window) delivers it once.
	ServerDedupe bool
	// KeyOrder: messages of one key, published in one batch to one
	// destination, are received in batch order.
	KeyOrder bool
	// CloudEvents: the publisher sends the envelope of package outbox, a
	// CloudEvent in binary content mode (outbox.AttrID and after), and the
	// harness fills Received.Attributes from the message's headers.
	CloudEvents bool
}

// Received is one message read back from the broker.
type Received struct {
	// Destination is where it arrived, as the Message named it (before any
	// prefix the publisher adds).
	Destination string
	// Key is the broker key (Kafka record key, or "" where the broker has
	// none).
	Key string
	// Event is the message decoded back into an event by the publisher's
	// own decoder.
	Event outbox.Event
	// Attributes are the CloudEvents attributes the message carries, read
	// from its headers by the harness itself (not by the publisher's
	// decoder): keyed by attribute name without the binding's prefix
	// ("id", "type", "datacontenttype", …), values decoded as the binding
	// says. Needed only with Features.CloudEvents.
	Attributes map[string]string
}

// Harness connects the suite to one publisher implementation.
type Harness struct {
	// NewPublisher returns the publisher under test. It is called once per
	// sub-test; clean-up goes through t.Cleanup.
	NewPublisher func(t *testing.T) outbox.Publisher
	// NewDestination returns a fresh destination that accepts messages,
	// unique to the calling test.
	NewDestination func(t *testing.T) string
	// MissingDestination returns a destination that does not exist (no
	// such topic, no stream captures the subject). A publish to it must
	// fail with a retryable error: a destination created after its first
	// events were emitted is an outage, not a reason to dead-letter them.
	MissingDestination func(t *testing.T) string
	// Receive waits until n messages have arrived at dest and returns what
	// arrived, in arrival order (more than n if more arrived). When fewer
	// arrive, it returns what it has once nothing new has arrived for
	// Quiet, or when ctx ends: the dedupe check asks for one message more
	// than it published and expects that wait to end empty-handed.
	Receive func(ctx context.Context, t *testing.T, dest string, n int) []Received
	// Quiet is how long Receive waits for one more message before it gives
	// up. Defaults to 1s; the harness reads it from here.
	Quiet time.Duration
}

// marker is put in payloads and header values; no error may contain it.
const marker = "SECRET-PAYLOAD-MARKER"

// RunPublisherSuite runs every conformance check against the harness.
func RunPublisherSuite(t *testing.T, h Harness, f Features) {
	t.Helper()
	if h.Quiet == 0 {
		h.Quiet = time.Second
	}
	t.Run("BatchArrivesIntact", func(t *testing.T) { testBatchIntact(t, h) })
	t.Run("CloudEvents", func(t *testing.T) {
		if !f.CloudEvents {
			t.Skip("the publisher does not send the CloudEvents envelope (Features.CloudEvents is false)")
		}
		testCloudEvents(t, h)
	})
	t.Run("CancelledContext", func(t *testing.T) { testCancelled(t, h) })
	t.Run("Dedupe", func(t *testing.T) {
		if !f.ServerDedupe {
			t.Skip("the broker does not deduplicate (Features.ServerDedupe is false)")
		}
		testDedupe(t, h)
	})
	t.Run("KeyOrder", func(t *testing.T) {
		if !f.KeyOrder {
			t.Skip("the broker does not keep key order (Features.KeyOrder is false)")
		}
		testKeyOrder(t, h)
	})
	t.Run("HeaderRule", func(t *testing.T) { testHeaderRule(t, h) })
	t.Run("PerEventOutcomes", func(t *testing.T) { testPerEvent(t, h) })
}

// NewEvent returns a fully populated event with a fresh ID, as the
// dispatcher would hand it to a publisher.
func NewEvent(i int) outbox.Event {
	return outbox.Event{
		ID:             uuid.Must(uuid.NewV7()),
		Type:           "conformance.tested",
		AggregateType:  "widget",
		AggregateID:    fmt.Sprintf("widget-%d", i),
		PartitionKey:   fmt.Sprintf("key-%d", i%7),
		IdempotencyKey: fmt.Sprintf("idem-%d", i),
		ContentType:    outbox.ContentTypeJSON,
		Headers:        map[string]string{"x-index": fmt.Sprint(i), "x-secret": marker},
		Payload:        []byte(fmt.Sprintf(`{"i":%d,"secret":%q}`, i, marker)),
		Attempt:        1,
		CreatedAt:      time.Now().UTC().Truncate(time.Microsecond),
	}
}

func messages(dest string, events []outbox.Event) []outbox.Message {
	msgs := make([]outbox.Message, len(events))
	for i, e := range events {
		msgs[i] = outbox.Message{Destination: dest, Event: e}
	}
	return msgs
}

func publish(t *testing.T, p outbox.Publisher, ctx context.Context, msgs []outbox.Message) []error {
	t.Helper()
	errs := p.Publish(ctx, msgs)
	if len(errs) != len(msgs) {
		t.Fatalf("Publish returned %d results for %d messages", len(errs), len(msgs))
	}
	return errs
}

func receive(t *testing.T, h Harness, dest string, n int) []Received {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	got := h.Receive(ctx, t, dest, n)
	if len(got) < n {
		t.Fatalf("received %d of %d messages at %q", len(got), n, dest)
	}
	return got
}

func testBatchIntact(t *testing.T, h Harness) {
	p, dest := h.NewPublisher(t), h.NewDestination(t)
	events := make([]outbox.Event, 1000)
	for i := range events {
		events[i] = NewEvent(i)
	}
	for i, err := range publish(t, p, context.Background(), messages(dest, events)) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	got := receive(t, h, dest, len(events))
	byID := make(map[uuid.UUID]Received, len(got))
	for _, r := range got {
		byID[r.Event.ID] = r
	}
	for _, want := range events {
		r, ok := byID[want.ID]
		if !ok {
			t.Fatalf("event %s never arrived", want.ID)
		}
		checkIntact(t, dest, want, r)
	}
	if len(byID) != len(events) {
		t.Fatalf("received %d distinct events, want %d", len(byID), len(events))
	}
}

func checkIntact(t *testing.T, dest string, want outbox.Event, r Received) {
	t.Helper()
	got := r.Event
	switch {
	case r.Destination != dest:
		t.Fatalf("event %s arrived at %q, want %q", want.ID, r.Destination, dest)
	case got.Type != want.Type || got.AggregateType != want.AggregateType || got.AggregateID != want.AggregateID:
		t.Fatalf("event %s: type/aggregate = %q/%q/%q, want %q/%q/%q", want.ID,
			got.Type, got.AggregateType, got.AggregateID, want.Type, want.AggregateType, want.AggregateID)
	case got.PartitionKey != want.PartitionKey || got.IdempotencyKey != want.IdempotencyKey:
		t.Fatalf("event %s: keys = %q/%q, want %q/%q", want.ID, got.PartitionKey, got.IdempotencyKey,
			want.PartitionKey, want.IdempotencyKey)
	case got.ContentType != want.ContentType:
		t.Fatalf("event %s: content type = %q, want %q", want.ID, got.ContentType, want.ContentType)
	case !bytes.Equal(got.Payload, want.Payload):
		t.Fatalf("event %s: payload differs (%d bytes, want %d)", want.ID, len(got.Payload), len(want.Payload))
	}
	for k, v := range want.Headers {
		if got.Headers[k] != v {
			t.Fatalf("event %s: header %q = %q, want %q", want.ID, k, got.Headers[k], v)
		}
	}
	if r.Key != "" && r.Key != want.PartitionKey {
		t.Fatalf("event %s: broker key = %q, want the partition key %q", want.ID, r.Key, want.PartitionKey)
	}
}

func testPerEvent(t *testing.T, h Harness) {
	p, good, bad := h.NewPublisher(t), h.NewDestination(t), h.MissingDestination(t)
	events := make([]outbox.Event, 10)
	msgs := make([]outbox.Message, len(events))
	for i := range events {
		events[i] = NewEvent(i)
		msgs[i] = outbox.Message{Destination: good, Event: events[i]}
		if i%3 == 1 {
			msgs[i].Destination = bad
		}
	}
	errs := publish(t, p, context.Background(), msgs)
	wantGood := 0
	for i, err := range errs {
		if msgs[i].Destination == good {
			wantGood++
			if err != nil {
				t.Fatalf("message %d to a good destination failed: %v", i, err)
			}
			continue
		}
		if err == nil {
			t.Fatalf("message %d to a missing destination reported success", i)
		}
		if outbox.IsPermanent(err) {
			t.Fatalf("message %d: a missing destination is an outage and must be retryable, got permanent %v", i, err)
		}
		checkClean(t, err)
	}
	got := receive(t, h, good, wantGood)
	if len(got) != wantGood {
		t.Fatalf("received %d messages at the good destination, want %d", len(got), wantGood)
	}
}

func testCancelled(t *testing.T, h Harness) {
	p, dest := h.NewPublisher(t), h.NewDestination(t)
	events := make([]outbox.Event, 1000)
	for i := range events {
		events[i] = NewEvent(i)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	errs := publish(t, p, ctx, messages(dest, events))
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Publish with a cancelled context took %s", took)
	}
	for i, err := range errs {
		if err == nil {
			continue // confirmed before it noticed: allowed
		}
		if outbox.IsPermanent(err) {
			t.Fatalf("message %d: cancellation must be retryable, got permanent %v", i, err)
		}
		checkClean(t, err)
	}
}

func testDedupe(t *testing.T, h Harness) {
	p, dest := h.NewPublisher(t), h.NewDestination(t)
	events := []outbox.Event{NewEvent(1), NewEvent(2)}
	for round := range 2 {
		for i, err := range publish(t, p, context.Background(), messages(dest, events)) {
			if err != nil {
				t.Fatalf("round %d, message %d: a duplicate must report success, got %v", round, i, err)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.Quiet+30*time.Second)
	defer cancel()
	got := h.Receive(ctx, t, dest, len(events)+1) // waits out the quiet time for a duplicate
	if len(got) != len(events) {
		t.Fatalf("received %d messages for %d events published twice: the broker did not deduplicate", len(got), len(events))
	}
}

func testKeyOrder(t *testing.T, h Harness) {
	p, dest := h.NewPublisher(t), h.NewDestination(t)
	events := make([]outbox.Event, 200)
	for i := range events {
		events[i] = NewEvent(i)
		events[i].PartitionKey = fmt.Sprintf("k%d", i%4)
	}
	for i, err := range publish(t, p, context.Background(), messages(dest, events)) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	got := receive(t, h, dest, len(events))
	last := map[string]int{}
	for _, r := range got {
		idx := indexOf(events, r.Event.ID)
		if prev, ok := last[r.Event.PartitionKey]; ok && idx < prev {
			t.Fatalf("key %q: event %d arrived after event %d", r.Event.PartitionKey, idx, prev)
		}
		last[r.Event.PartitionKey] = idx
	}
}

func indexOf(events []outbox.Event, id uuid.UUID) int {
	for i, e := range events {
		if e.ID == id {
			return i
		}
	}
	return -1
}

// checkClean fails the test when an error text carries payload or header
// values.
func checkClean(t *testing.T, err error) {
	t.Helper()
	if strings.Contains(err.Error(), marker) {
		t.Fatalf("error text contains payload or header bytes: %v", err)
	}
}

// testCloudEvents checks the envelope as a CloudEvents consumer reads it:
// the required attributes, and each field of the event under its
// attribute, with nothing else of ours in the way.
func testCloudEvents(t *testing.T, h Harness) {
	p, dest := h.NewPublisher(t), h.NewDestination(t)
	full, sparse := NewEvent(1), NewEvent(2)
	full.Attempt, full.Type, full.AggregateID = 3, "conformance.tested fully", "widget 1 ✓"
	sparse = outbox.Event{ID: sparse.ID, Type: sparse.Type, Payload: sparse.Payload}
	events := []outbox.Event{full, sparse}
	for i, err := range publish(t, p, context.Background(), messages(dest, events)) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	got := receive(t, h, dest, len(events))
	for _, want := range events {
		r, ok := find(got, want)
		if !ok {
			t.Fatalf("event %s never arrived", want.ID)
		}
		if r.Attributes[outbox.AttrSource] == "" {
			t.Errorf("event %s: no source attribute", want.ID)
		}
		wantAttrs := map[string]string{
			outbox.AttrSpecVersion:     outbox.CloudEventsSpecVersion,
			outbox.AttrID:              want.ID.String(),
			outbox.AttrType:            want.Type,
			outbox.AttrSubject:         want.AggregateID,
			outbox.AttrDataContentType: want.ContentType,
			outbox.AttrPartitionKey:    want.PartitionKey,
			outbox.AttrAggregateType:   want.AggregateType,
			outbox.AttrIdempotencyKey:  want.IdempotencyKey,
			outbox.AttrAttempt:         "",
			outbox.AttrTime:            "",
		}
		if want.Attempt > 0 {
			wantAttrs[outbox.AttrAttempt] = fmt.Sprint(want.Attempt)
		}
		if !want.CreatedAt.IsZero() {
			wantAttrs[outbox.AttrTime] = want.CreatedAt.UTC().Format(time.RFC3339Nano)
		}
		for name, v := range wantAttrs {
			if got := r.Attributes[name]; got != v {
				t.Errorf("event %s: attribute %s = %q, want %q", want.ID, name, got, v)
			}
		}
	}
}
