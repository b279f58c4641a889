package dispatcher

import (
	"context"

	"github.com/pgoutbox/pgoutbox/internal/retention"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// retain runs the retention job (internal/retention) until runCtx or quit
// ends or Stop is called; a pass cut short ends with its current batch
// cancelled.
func retain(job *retention.Job, l *life, runCtx, quit context.Context) {
	ctx, cancel := l.UntilStop(quit)
	defer cancel()
	defer context.AfterFunc(runCtx, cancel)()
	job.Run(ctx)
}

// newRetention returns the retention job of d, counting in Stats what it
// does.
func newRetention(d *Dispatcher) *retention.Job {
	c := &d.report.Counters
	return retention.New(retention.Config{
		Pool: d.pool, Table: d.cfg.Table, RetainSent: d.cfg.RetainSent, RetainFailed: d.cfg.RetainFailed,
		RetentionInterval: d.cfg.RetentionInterval, KeepSent: d.cfg.KeepSent, DeleteSent: d.cfg.DeleteSent,
		RetentionBatchSize: d.cfg.RetentionBatchSize, OpTimeout: opTimeout(d.cfg.LeaseDuration), Now: d.clock.Now,
		Logger: d.cfg.Logger, ErrorFunc: d.report.Error,
		PassFunc:    func() { c.RetentionPasses.Add(1) },
		SkippedFunc: func() { c.RetentionSkipped.Add(1) },
		DeletedFunc: func(status outbox.Status, n int64) {
			if status == outbox.StatusFailed {
				c.RetentionFailed.Add(uint64(n))
				return
			}
			c.RetentionSent.Add(uint64(n))
		},
		BatchFunc: d.cfg.onRetentionBatch,
	})
}
