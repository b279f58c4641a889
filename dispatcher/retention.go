package dispatcher

import (
	"context"

	"github.com/pgoutbox/pgoutbox/internal/retention"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// retain runs the retention job (internal/retention) until runCtx or quit
// ends or Stop is called; a pass cut short ends with its current batch
// cancelled.
func (d *Dispatcher) retain(runCtx, quit context.Context) {
	ctx, cancel := d.life.untilStop(quit)
	defer cancel()
	defer context.AfterFunc(runCtx, cancel)()
	d.retention().Run(ctx)
}

// retention returns the retention job of this dispatcher, counting in
// Stats what it does.
func (d *Dispatcher) retention() *retention.Job {
	return retention.New(retention.Config{
		Pool: d.pool, Table: d.cfg.Table, RetainSent: d.cfg.RetainSent, RetainFailed: d.cfg.RetainFailed,
		RetentionInterval: d.cfg.RetentionInterval, KeepSent: d.cfg.KeepSent, DeleteSent: d.cfg.DeleteSent,
		RetentionBatchSize: d.cfg.RetentionBatchSize, OpTimeout: opTimeout(d.cfg.LeaseDuration), Now: d.clock.Now,
		Logger: d.cfg.Logger, ErrorFunc: d.report.Error,
		PassFunc:    func() { d.report.Counters.RetentionPasses.Add(1) },
		SkippedFunc: func() { d.report.Counters.RetentionSkipped.Add(1) },
		DeletedFunc: d.retentionDeleted, BatchFunc: d.cfg.onRetentionBatch,
	})
}

// retentionDeleted counts n rows of status deleted by the retention job.
func (d *Dispatcher) retentionDeleted(status outbox.Status, n int64) {
	if status == outbox.StatusFailed {
		d.report.Counters.RetentionFailed.Add(uint64(n))
		return
	}
	d.report.Counters.RetentionSent.Add(uint64(n))
}
