package run

import (
	"fmt"

	"go.opentelemetry.io/otel/trace"

	"github.com/pgoutbox/pgoutbox/internal/held"
	"github.com/pgoutbox/pgoutbox/internal/report"
)

// endHandlerSpan ends a handler call's span with the call's result: a
// failure (a panic included, but no snooze but the one past MaxSnoozes)
// sets its status to error.
func endHandlerSpan(span trace.Span, res held.Result) {
	var failure error
	if res.Err != nil && !res.Snooze && !res.Release {
		failure = res.Err
	}
	report.EndHandlerSpan(span, failure, res.Code)
}

// endHandlerCall records a handler call's duration and ends its span,
// recovering a panic of the instruments': the result stands.
func (r *Runner) endHandlerCall(it *held.Item, span trace.Span, res held.Result) {
	defer func() {
		if p := recover(); p != nil {
			r.report.Panic("instrumentation", it.Event.Type, it.Event.ID, fmt.Errorf("ending the handler's span: %v", p))
		}
	}()
	r.report.Metrics().Handled(it.Event.Type, it.StartedAt(), res.Ran, res.Code)
	endHandlerSpan(span, res)
}
