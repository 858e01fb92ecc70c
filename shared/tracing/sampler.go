package tracing

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// MaxTraceState bounds what is kept of a trusted caller's tracestate, in
// characters of the header (members and their commas): W3C trace context
// asks to propagate at least 512. Past it, members longer than 128
// characters are dropped first, then members from the end, as the
// specification orders. A 32-member tracestate of 6.6 KB would otherwise
// ride on every span of the trace and every call below.
const MaxTraceState = 512

// maxTraceStateMember is the member length W3C trace context drops first.
const maxTraceStateMember = 128

// Extract is the trace context a request carries (W3C traceparent and
// tracestate in h), for its server span. trusted says whether the caller
// may decide for us: a trusted caller's sampling decision and tracestate
// (bounded: MaxTraceState) are followed; anyone else's trace id is
// continued, but the span is sampled by our own ratio (Sampler) and its
// tracestate dropped. The gateway trusts its trusted_proxies, the backend
// the gateway (the caller with the internal token).
func Extract(h Header, trusted bool) context.Context {
	c := Propagator.Extract(context.Background(), Carrier{H: h})
	if trusted && trace.SpanContextFromContext(c).IsValid() {
		c = context.WithValue(c, trustedParentKey{}, true)
	}
	return c
}

type trustedParentKey struct{}

func trustedParent(c context.Context) bool {
	ok, _ := c.Value(trustedParentKey{}).(bool)
	return ok
}

// Sampler is the OTEL_TRACES_SAMPLER decision, made so that no caller
// decides what we trace (see Extract):
//   - under a span of ours, a span follows its parent, so a trace is whole;
//   - under a trusted caller's span, it follows the caller's decision when
//     parent-based (parentbased_*), and keeps its tracestate, bounded;
//   - under an untrusted caller's span, it continues the trace id but is
//     sampled at the ratio by a random draw (the caller chooses its trace
//     id: a draw on it, as traceidratio makes, would be the caller's
//     choice), with no tracestate;
//   - with no parent, at the ratio on the trace id (ours).
type Sampler struct {
	ratio       float64
	parentBased bool
	bound       uint64 // a 63-bit draw below it samples
	root        sdktrace.Sampler
}

// NewSampler samples ratio (0 to 1) of the traces started here or by an
// untrusted caller; parentBased follows a trusted caller's decision.
func NewSampler(ratio float64, parentBased bool) Sampler {
	ratio = min(max(ratio, 0), 1)
	s := Sampler{ratio: ratio, parentBased: parentBased, root: sdktrace.TraceIDRatioBased(ratio)}
	switch {
	case ratio >= 1:
		s.bound = 1 << 63
	case ratio > 0:
		s.bound = uint64(ratio * (1 << 63))
	}
	return s
}

// SamplerFromEnv is the sampler OTEL_TRACES_SAMPLER and
// OTEL_TRACES_SAMPLER_ARG name, as the OpenTelemetry SDK reads them:
// always_on, always_off, traceidratio, parentbased_always_on (the default),
// parentbased_always_off, parentbased_traceidratio (the ratio defaults to
// 1). Another sampler or a ratio out of 0-1 is an error, not a silent
// default.
func SamplerFromEnv(lookup func(string) (string, bool)) (Sampler, error) {
	get := func(k string) string { v, _ := lookup(k); return strings.TrimSpace(v) }
	name := strings.ToLower(get("OTEL_TRACES_SAMPLER"))
	ratio := 1.0
	switch name {
	case "traceidratio", "parentbased_traceidratio":
		if arg := get("OTEL_TRACES_SAMPLER_ARG"); arg != "" {
			v, err := strconv.ParseFloat(arg, 64)
			if err != nil || v < 0 || v > 1 {
				return Sampler{}, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG %q: want a ratio from 0 to 1", arg)
			}
			ratio = v
		}
	case "always_off", "parentbased_always_off":
		ratio = 0
	case "", "always_on", "parentbased_always_on":
	default:
		return Sampler{}, fmt.Errorf("OTEL_TRACES_SAMPLER %q: want always_on, always_off, traceidratio, "+
			"parentbased_always_on, parentbased_always_off or parentbased_traceidratio", name)
	}
	return NewSampler(ratio, name == "" || strings.HasPrefix(name, "parentbased_")), nil
}

// ShouldSample is sdktrace.Sampler's.
func (s Sampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	psc := trace.SpanContextFromContext(p.ParentContext)
	switch {
	case !psc.IsValid():
		return sdktrace.SamplingResult{Decision: s.root.ShouldSample(p).Decision}
	case !psc.IsRemote():
		return follow(psc.IsSampled(), psc.TraceState())
	case trustedParent(p.ParentContext):
		ts := BoundTraceState(psc.TraceState())
		if s.parentBased {
			return follow(psc.IsSampled(), ts)
		}
		return sdktrace.SamplingResult{Decision: s.root.ShouldSample(p).Decision, Tracestate: ts}
	}
	return follow(rand.Uint64()>>1 < s.bound, trace.TraceState{})
}

func follow(sampled bool, ts trace.TraceState) sdktrace.SamplingResult {
	if sampled {
		return sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample, Tracestate: ts}
	}
	return sdktrace.SamplingResult{Decision: sdktrace.Drop, Tracestate: ts}
}

// Description is sdktrace.Sampler's.
func (s Sampler) Description() string {
	return fmt.Sprintf("vendorgate{ratio=%g,parentbased=%v,trusted callers only}", s.ratio, s.parentBased)
}

// BoundTraceState is ts cut to MaxTraceState characters as W3C trace
// context orders: members over 128 characters first, then from the end.
// Within the bound it is ts itself.
func BoundTraceState(ts trace.TraceState) trace.TraceState {
	if ts.Len() == 0 {
		return ts
	}
	size := -1 // n members take n-1 commas
	ts.Walk(func(k, v string) bool {
		size += len(k) + 1 + len(v) + 1
		return true
	})
	if size <= MaxTraceState {
		return ts
	}
	var b strings.Builder
	ts.Walk(func(k, v string) bool {
		n := len(k) + 1 + len(v)
		if n > maxTraceStateMember {
			return true
		}
		if b.Len() > 0 {
			n++
		}
		if b.Len()+n > MaxTraceState {
			return false
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(v)
		return true
	})
	out, err := trace.ParseTraceState(b.String())
	if err != nil { // members of a parsed tracestate: cannot fail
		return trace.TraceState{}
	}
	return out
}
