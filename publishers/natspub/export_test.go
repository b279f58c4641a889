package natspub

import "context"

// SetStreamLookup replaces how p checks that a stream captures a subject.
func SetStreamLookup(p *Publisher, f func(ctx context.Context, subject string) bool) {
	p.lookup = f
}

// BuildMsg is buildMsg, for the fuzz targets.
var BuildMsg = buildMsg
