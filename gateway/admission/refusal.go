package admission

import (
	"strconv"
	"time"

	"vendorgate/gateway/inflight"
	"vendorgate/gateway/limit"
	"vendorgate/gateway/policy"
	"vendorgate/gateway/window"
)

// Refusal names the limit that refused a request: its kind, its row (a
// policy's name, or the in-flight cap's setting), what it allows and when
// the request may be tried again.
type Refusal struct {
	Kind Kind
	// Name is the refusing row: a policy's name, or in_flight.requests /
	// in_flight.downloads for an in-flight cap.
	Name string
	// Policy is the row's index in its table (-1 for an in-flight cap).
	Policy int
	// Rate is the refusing policy's rate (windows and GCRA limits).
	Rate policy.Rate
	// Cap is the cap of an in-flight cap or a concurrency policy.
	Cap int
	// InFlight is which in-flight cap refused (inflight.Admitted for the
	// other kinds).
	InFlight   inflight.Refusal
	RetryAfter time.Duration
}

// Message is the refusal's text for the 429 envelope: the limit's name,
// what it allows and when to retry, as "orders-day: 1000 a day; retry in
// 22h 21m". It allocates (a refusal is rare; an admission never builds
// it).
func (r *Refusal) Message() string {
	b := make([]byte, 0, 96)
	b = append(b, r.Name...)
	b = append(b, ": "...)
	switch r.Kind {
	case InFlight:
		b = strconv.AppendInt(b, int64(r.Cap), 10)
		what := " request"
		if r.InFlight == inflight.OverDownloads {
			what = " download"
		}
		b = append(b, what...)
		if r.Cap != 1 {
			b = append(b, 's')
		}
		b = append(b, " in flight at once at this gateway"...)
	case Slots:
		b = strconv.AppendInt(b, int64(r.Cap), 10)
		b = append(b, " in flight at once"...)
	default:
		b = strconv.AppendInt(b, int64(r.Rate.Limit), 10)
		b = appendPer(b, r.Rate)
	}
	b = append(b, "; retry in "...)
	b = appendWait(b, r.RetryAfter)
	return string(b)
}

// appendPer appends what span a rate's limit is counted over: " a day",
// " a month", " every 7 days", " a minute", " every 10m".
func appendPer(b []byte, r policy.Rate) []byte {
	if r.Kind == policy.Quota {
		switch {
		case r.Calendar.Month:
			return append(b, " a month"...)
		case r.Calendar.Days <= 1:
			return append(b, " a day"...)
		}
		b = append(b, " every "...)
		b = strconv.AppendInt(b, int64(r.Calendar.Days), 10)
		return append(b, " days"...)
	}
	switch r.Period {
	case time.Second:
		return append(b, " a second"...)
	case time.Minute:
		return append(b, " a minute"...)
	case time.Hour:
		return append(b, " an hour"...)
	case 24 * time.Hour:
		return append(b, " a day"...)
	}
	b = append(b, " every "...)
	return appendWait(b, r.Period)
}

// appendWait appends d in whole seconds rounded up (as Retry-After says
// it), shown in its two largest units, the smaller rounded down: "22h
// 21m", "1m 5s", "40s".
func appendWait(b []byte, d time.Duration) []byte {
	s := max(int64((d+time.Second-1)/time.Second), 1)
	h, m, sec := s/3600, s%3600/60, s%60
	unit := func(b []byte, n int64, u byte) []byte {
		return append(strconv.AppendInt(b, n, 10), u)
	}
	switch {
	case h > 0:
		b = unit(b, h, 'h')
		if m > 0 {
			b = unit(append(b, ' '), m, 'm')
		}
	case m > 0:
		b = unit(b, m, 'm')
		if sec > 0 {
			b = unit(append(b, ' '), sec, 's')
		}
	default:
		b = unit(b, sec, 's')
	}
	return b
}

// windowRefusal names the enforced window that refused: the one whose
// wait is the decision's.
func windowRefusal(cs *policy.Checks, d *window.Decision) Refusal {
	at := -1
	for i := 0; i < cs.Count; i++ {
		r := &d.Results[i]
		if r.Allowed || cs.List[i].Rate.Shadow {
			continue
		}
		if at < 0 || r.RetryAfter > d.Results[at].RetryAfter {
			at = i
		}
	}
	return checkRefusal(Windows, cs, at, d.RetryAfter)
}

// rateRefusal names the enforced GCRA limit that refused: the one whose
// wait is the decision's, or, when a denial remembered in process
// answered (no bucket consulted), the first enforced one not consulted.
func rateRefusal(cs *policy.Checks, d *limit.Decision) Refusal {
	at, unknown := -1, -1
	for i := 0; i < cs.Count; i++ {
		r := &d.Results[i]
		if cs.List[i].Rate.Shadow || r.Allowed {
			continue
		}
		if !r.Known {
			if unknown < 0 {
				unknown = i
			}
			continue
		}
		if at < 0 || r.RetryAfter > d.Results[at].RetryAfter {
			at = i
		}
	}
	if at < 0 {
		at = unknown
	}
	return checkRefusal(Rates, cs, at, d.RetryAfter)
}

func checkRefusal(k Kind, cs *policy.Checks, at int, retry time.Duration) Refusal {
	if at < 0 { // no check refused: cannot happen for a decision refused
		return Refusal{Kind: k, Policy: -1, RetryAfter: retry}
	}
	c := &cs.List[at]
	return Refusal{Kind: k, Name: c.Rate.Name, Policy: c.Policy, Rate: c.Rate, RetryAfter: retry}
}

// inFlightRefusal names the in-flight cap that refused. A slot frees when
// an answer ends, which no clock tells: the shortest wait, a second.
func inFlightRefusal(r inflight.Refusal, caps inflight.Caps) Refusal {
	f := Refusal{Kind: InFlight, Name: "in_flight.requests", Policy: -1, Cap: int(caps.Requests), InFlight: r, RetryAfter: time.Second}
	if r == inflight.OverDownloads {
		f.Name, f.Cap = "in_flight.downloads", int(caps.Downloads)
	}
	return f
}

// slotRefusal names the concurrency policy that refused (a second's wait,
// as an in-flight cap's).
func slotRefusal(name string, row, cap int) Refusal {
	return Refusal{Kind: Slots, Name: name, Policy: row, Cap: cap, RetryAfter: time.Second}
}
