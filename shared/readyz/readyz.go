// Package readyz evaluates named readiness checks the way the Kubernetes API
// server does: every check has a name, ?verbose lists each with its state,
// and ?exclude=NAME (repeatable) leaves a check out, so that a load balancer
// can ask "is this replica fit to serve" without asking "is every shared
// dependency up". An excluded check is not run; excluding a name that does
// not exist is a warning in the answer, not an error (as in Kubernetes), so
// a probe written for a newer release still works against an older one.
// Each side renders the Report in its own JSON body.
package readyz

import (
	"context"
	"errors"
	"fmt"

	"github.com/valyala/fasthttp"
)

// Check is one named readiness check. Run returns nil when ready; its
// error's text is the reason shown in the answer, so it must be safe to
// print (no secrets).
type Check struct {
	Name string
	Run  func(ctx context.Context) error
}

// Degraded wraps what a passing check wants the SRE to read: the check is
// ok, and err's text is shown as its reason (one backend of two down, say).
func Degraded(err error) error { return degraded{err} }

type degraded struct{ err error }

func (d degraded) Error() string { return d.err.Error() }
func (d degraded) Unwrap() error { return d.err }

// Status is a check's state in a Report.
type Status string

// The states of a check.
const (
	StatusOK       Status = "ok"
	StatusFailed   Status = "failed"
	StatusExcluded Status = "excluded"
)

// Result is one check's outcome.
type Result struct {
	Name   string `json:"name"`
	Status Status `json:"status"`
	Reason string `json:"reason,omitempty"`
}

// Query is what a /readyz request asks.
type Query struct {
	// Verbose lists every check, passing ones too.
	Verbose bool
	// Exclude names checks to leave out.
	Exclude []string
}

// ParseQuery reads ?verbose and every ?exclude= of args.
func ParseQuery(args *fasthttp.Args) Query {
	q := Query{Verbose: args.Has("verbose")}
	for _, v := range args.PeekMulti("exclude") {
		q.Exclude = append(q.Exclude, string(v))
	}
	return q
}

// Report is the outcome of a run.
type Report struct {
	// Results holds every check in order, excluded ones included.
	Results []Result
	// Failed names the failing checks, in order.
	Failed []string
	// Warnings name exclusions that matched no check.
	Warnings []string
}

// Ready reports whether no check that was run failed.
func (r Report) Ready() bool { return len(r.Failed) == 0 }

// Run runs the checks q does not exclude, in order.
func Run(ctx context.Context, checks []Check, q Query) Report {
	excluded := make(map[string]bool, len(q.Exclude))
	for _, name := range q.Exclude {
		excluded[name] = true
	}
	var r Report
	for _, c := range checks {
		if excluded[c.Name] {
			delete(excluded, c.Name)
			r.Results = append(r.Results, Result{Name: c.Name, Status: StatusExcluded})
			continue
		}
		err := c.Run(ctx)
		var d degraded
		if errors.As(err, &d) {
			r.Results = append(r.Results, Result{Name: c.Name, Status: StatusOK, Reason: d.Error()})
			continue
		}
		if err != nil {
			r.Results = append(r.Results, Result{Name: c.Name, Status: StatusFailed, Reason: err.Error()})
			r.Failed = append(r.Failed, c.Name)
			continue
		}
		r.Results = append(r.Results, Result{Name: c.Name, Status: StatusOK})
	}
	for _, name := range q.Exclude { // in the order asked, once each
		if excluded[name] {
			delete(excluded, name)
			r.Warnings = append(r.Warnings, fmt.Sprintf("cannot exclude %q: no check has that name", name))
		}
	}
	return r
}
