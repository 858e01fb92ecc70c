package gateway

import (
	"log/slog"
	"time"

	"vendorgate/gateway/accesslog"
	"vendorgate/gateway/plain"
)

// accessLogging is the access log's settings: whether each answer
// writes a line (finish, finishDocs), and the bound on the lines of
// answers with an error code (package accesslog), past whose rate the
// refusals are written as summaries, each summaryEvery (summarize) and
// when a dependency comes back or the gateway closes (flush).
type accessLogging struct {
	on           bool
	log          *slog.Logger
	refusals     *accesslog.Refusals
	summaryEvery time.Duration
}

// flush writes the summaries of the refusals counted since the last.
func (a *accessLogging) flush() { a.refusals.Flush(a.log) }

// summarize writes the summaries due: the refusals' once summaryEvery has
// passed since the last, and the plain listener's warnings (p.FlushWarnings);
// final (Close) writes them all.
func (a *accessLogging) summarize(p *plain.Handler, final bool) {
	if final || a.refusals.Due(a.summaryEvery) {
		a.flush()
	}
	p.FlushWarnings(final, a.summaryEvery)
}
