package telemetrytest

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// TracerProvider keeps the spans its tracers start, as recording spans.
// Every span gets the span id 0102030405060708 and its parent's trace id,
// or RootTraceID when it has no parent: every span context is valid.
// It is safe for concurrent use; read a span's fields once it has ended.
type TracerProvider struct {
	noop.TracerProvider
	mu    sync.Mutex
	spans []*Span
}

// RootTraceID is the trace id of the spans a TracerProvider starts
// without a parent.
var RootTraceID = trace.TraceID{0xff, 0xee}

// Span is a span a TracerProvider started.
type Span struct {
	noop.Span
	Name   string
	Kind   trace.SpanKind
	Parent trace.SpanContext // zero for a new root
	SC     trace.SpanContext
	Status codes.Code
	Ended  bool
	Errors []error
	Attrs  []attribute.KeyValue
	Links  []trace.Link
}

// SpanContext returns the span's context.
func (s *Span) SpanContext() trace.SpanContext { return s.SC }

// IsRecording is true: the span keeps what it is given.
func (s *Span) IsRecording() bool { return true }

// SetStatus keeps the status code.
func (s *Span) SetStatus(c codes.Code, _ string) { s.Status = c }

// End marks the span ended.
func (s *Span) End(...trace.SpanEndOption) { s.Ended = true }

// RecordError keeps err.
func (s *Span) RecordError(err error, _ ...trace.EventOption) { s.Errors = append(s.Errors, err) }

// SetAttributes keeps the attributes.
func (s *Span) SetAttributes(kv ...attribute.KeyValue) { s.Attrs = append(s.Attrs, kv...) }

// AddLink keeps the link.
func (s *Span) AddLink(l trace.Link) { s.Links = append(s.Links, l) }

// Tracer returns a tracer of the provider.
func (p *TracerProvider) Tracer(string, ...trace.TracerOption) trace.Tracer { return tracer{p: p} }

// Spans returns the spans started so far.
func (p *TracerProvider) Spans() []*Span {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*Span(nil), p.spans...)
}

// Named returns the spans of that name.
func (p *TracerProvider) Named(name string) []*Span {
	var out []*Span
	for _, s := range p.Spans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

type tracer struct {
	noop.Tracer
	p *TracerProvider
}

func (t tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	cfg := trace.NewSpanStartConfig(opts...)
	parent := trace.SpanContextFromContext(ctx)
	if cfg.NewRoot() {
		parent = trace.SpanContext{}
	}
	traceID := parent.TraceID()
	if !parent.IsValid() {
		traceID = RootTraceID
	}
	s := &Span{Name: name, Kind: cfg.SpanKind(), Parent: parent, Links: cfg.Links(), Attrs: cfg.Attributes(),
		SC: trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: traceID, SpanID: trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8}, TraceFlags: trace.FlagsSampled,
		})}
	t.p.mu.Lock()
	t.p.spans = append(t.p.spans, s)
	t.p.mu.Unlock()
	return trace.ContextWithSpan(ctx, s), s
}
