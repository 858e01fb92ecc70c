package gateway

import (
	"log/slog"
	"time"

	"vendorgate/gateway/accesslog"
	"vendorgate/shared/apierr"
)

// refusalLog is an accesslog.Refusals under the names the listener files
// call it by (plainhttp.go's key warnings, lifecycle.go's last summary).
type refusalLog struct{ *accesslog.Refusals }

func newRefusalLog(perSecond int) *refusalLog {
	return &refusalLog{accesslog.NewRefusals(perSecond)}
}

func newSummaryLog(perSecond int, msg string, level slog.Level) *refusalLog {
	return &refusalLog{accesslog.NewSummary(perSecond, msg, level)}
}

func (r *refusalLog) admit(code apierr.Code, route string, status int, at time.Time) bool {
	return r.Admit(code, route, status, at)
}
func (r *refusalLog) flush(log *slog.Logger)          { r.Flush(log) }
func (r *refusalLog) due(interval time.Duration) bool { return r.Due(interval) }
