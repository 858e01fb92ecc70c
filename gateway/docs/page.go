package docs

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"vendorgate/gateway/policy"
	"vendorgate/shared/apierr"
	"vendorgate/shared/apikey"
	"vendorgate/shared/sandboxvalues"
)

// codeMeanings says what each error code means to a vendor and what to do.
// TestEveryCodeHasAMeaning keeps it complete.
var codeMeanings = map[apierr.Code]string{
	apierr.ValidationError:      "The request is not valid: error.fields names each field and what is wrong with it. Fix the request; do not retry it unchanged.",
	apierr.InvalidAPIKey:        "X-API-Key is missing, malformed, of another server, unknown or revoked. Check the key; ask for a new one if it was revoked.",
	apierr.APIKeyExpired:        "The key is past its expiry (90 days after it was issued). Ask for a new key.",
	apierr.AccountNotApproved:   "The account is not approved yet. Nothing works until it is.",
	apierr.AccountSuspended:     "The account is suspended: reading works, placing orders is refused.",
	apierr.ServiceNotEnabled:    "The order asks for a service the account does not have; GET /api/vendor/v1/me lists the enabled ones.",
	apierr.PermissionDenied:     "The key may not do this.",
	apierr.NotFound:             "No such path, no such order of yours, or the report cannot be downloaded (yet).",
	apierr.MethodNotAllowed:     "The path exists but not with this method; Allow lists the methods it takes.",
	apierr.IdempotencyConflict:  "This Idempotency-Key was used with another body; error.order_id is the order it placed.",
	apierr.InProgress:           "The first placement with this Idempotency-Key is still running; retry after Retry-After seconds.",
	apierr.PayloadTooLarge:      "The request body is over the size limit.",
	apierr.UnsupportedMediaType: "The body must be application/json.",
	apierr.MVRStateUnavailable:  "MVR checks for the driver's license state are unavailable; order without mvr or try later.",
	apierr.RateLimited:          "Over a rate limit (or too many failed keys from your address): wait Retry-After seconds.",
	apierr.InternalError:        "Our fault. Retry later; quote X-Request-Id if you contact us.",
	apierr.RateLimitUnavailable: "The rate limiter cannot decide right now, so the request is refused rather than let through; retry after Retry-After seconds.",
	apierr.PriceUnavailable:     "The order cannot be priced right now; retry after Retry-After seconds.",
	apierr.RequestFailed:        "The service behind the gateway failed: 502 a bad answer, 503 unavailable (with Retry-After), 504 too slow; 431 also uses it for request headers that are too large. Retry later; polling is safe.",
}

// page is the template's data.
type page struct {
	Title, Version, Summary string
	Intro                   []string
	BaseURL                 string
	Contact                 *openapi3.Contact
	Groups                  []group
	Schemas                 []schemaView
	Codes                   []codeView
	Envelope                string
	Limits                  []limitView
	FailedKeys              string
	Docs                    limitView
	Environments            []envView
	KeyExample              string
	SecretLen               int
	Sandbox                 []sandboxvalues.Value
	MaxBody                 string
	// Draft is the RateLimit draft revision the headers follow, and Keys
	// its parameter keys, as policy writes them.
	Draft string
	Keys  draftKeys
}

// draftKeys are the parameter keys of policy.Draft's fields.
type draftKeys struct{ Quota, Window, Remaining, Reset string }

var keys = draftKeys{policy.DraftQuota, policy.DraftWindow, policy.DraftRemaining, policy.DraftReset}

// policyField and stateField are the example RateLimit-Policy and
// RateLimit entries, written by the headers' own formatter.
func policyField(name string, quota int, window time.Duration) string {
	return string(policy.AppendPolicy(nil, name, quota, window))
}

func stateField(name string, remaining int, reset time.Duration) string {
	return string(policy.AppendState(nil, name, remaining, reset))
}

type group struct {
	Tag, Description string
	Ops              []opView
}

type opView struct {
	ID, Method, Path, Summary string
	Description               []string
	NeedsKey                  bool
	Params                    []paramView
	Body                      *bodyView
	Responses                 []respView
	Curl                      string
}

type paramView struct {
	Name, In, Type, Description string
	Required                    bool
}

type bodyView struct {
	ContentType, Schema, Example string
	// Link: Schema names a component (an anchor on the page).
	Link bool
}

type respView struct {
	Status, Description, ContentType, Schema string
	Link                                     bool
	Headers                                  []string
}

type schemaView struct {
	Name   string
	Fields []fieldView
}

type fieldView struct {
	Name, Type, Description string
	Required                bool
}

type codeView struct {
	Code, Status, Meaning string
}

type limitView struct {
	Policy, Applies, Scope, Header string
	Quota                          int
	Window, Sustained              string
	// Plain is the limit as said in a sentence: "120 a minute".
	Plain string
	// Admits is what it admits, worked through: at once, then at what
	// pace, so how many in the first window.
	Admits string
	// Example is a RateLimit field of this policy after a quarter of the
	// quota (Spent) was spent at once: r and t follow from q and the rate.
	Example       string
	Spent         int
	WindowSeconds int64
	// Algorithm is how it decides ("token bucket (GCRA)", "calendar
	// quota", "sliding window"); GCRA is true for the token bucket.
	Algorithm string
	GCRA      bool
	// InFlight: a cap of requests in flight at once (Plain and Admits say
	// so; no window, no header).
	InFlight bool
}

type envView struct {
	Name, Prefix, What string
}

func build(doc *openapi3.T, order []string, o Options, base string) (*page, error) {
	p := &page{Title: doc.Info.Title, Version: doc.Info.Version, Summary: doc.Info.Summary, BaseURL: base,
		Contact: doc.Info.Contact, Sandbox: sandboxvalues.Table(), SecretLen: 43, MaxBody: byteSize(o.MaxBodyBytes),
		Draft: policy.Draft, Keys: keys}
	p.Intro = paragraphs(doc.Info.Description)
	tagDesc := map[string]string{}
	for _, t := range doc.Tags {
		tagDesc[t.Name] = t.Description
		p.Groups = append(p.Groups, group{Tag: t.Name, Description: t.Description})
	}
	byTag := map[string]int{}
	for i, g := range p.Groups {
		byTag[g.Tag] = i
	}
	for _, path := range order {
		item := doc.Paths.Value(path)
		if item == nil {
			continue
		}
		for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
			op := item.GetOperation(m)
			if op == nil {
				continue
			}
			v := opOf(doc, path, m, op, base)
			tag := "Other"
			if len(op.Tags) > 0 {
				tag = op.Tags[0]
			}
			i, ok := byTag[tag]
			if !ok {
				i = len(p.Groups)
				byTag[tag] = i
				p.Groups = append(p.Groups, group{Tag: tag})
			}
			p.Groups[i].Ops = append(p.Groups[i].Ops, v)
		}
	}
	names := make([]string, 0, len(doc.Components.Schemas))
	for n := range doc.Components.Schemas {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		var fs []fieldView
		fields(doc.Components.Schemas[n].Value, "", &fs, 0)
		p.Schemas = append(p.Schemas, schemaView{Name: n, Fields: fs})
	}
	for _, c := range apierr.Codes() {
		m, ok := codeMeanings[c]
		if !ok {
			return nil, fmt.Errorf("docs: error code %s has no meaning written for it", c)
		}
		status := strconv.Itoa(c.Status())
		if c == apierr.RequestFailed {
			status = "502, 503, 504"
		}
		p.Codes = append(p.Codes, codeView{Code: string(c), Status: status, Meaning: m})
	}
	p.Envelope = `{
  "error": {
    "code": "validation_error",
    "message": "the request is not valid",
    "fields": {"driver.date_of_birth": "must be a date (YYYY-MM-DD)"}
  }
}`
	for _, l := range o.Limits {
		p.Limits = append(p.Limits, limitOf(l))
	}
	p.Docs = limitOf(o.Docs)
	p.FailedKeys = fmt.Sprintf("more than %d failed keys from one client address, or more than %d failed attempts with one key, within %s",
		o.FailedKeysPerAddress, o.FailedKeysPerKey, duration(o.FailedKeysWindow))
	p.Environments = []envView{
		{Name: apikey.Sandbox, Prefix: o.Prefixes.Sandbox, What: "Orders are worked by a simulated provider within seconds; the test values below choose the outcome. Nothing is billed."},
		{Name: apikey.Live, Prefix: o.Prefixes.Live, What: "Real checks, worked by our staff and providers; results can take up to the 48-hour deadline."},
	}
	p.KeyExample = o.Prefixes.Sandbox + "_" + strings.Repeat("x", 43)
	return p, nil
}

func limitOf(l Policy) limitView {
	if l.InFlight {
		return limitView{Policy: l.Name, Applies: l.Applies, Scope: l.Scope, Quota: l.Rate, Window: "none", InFlight: true,
			Sustained: fmt.Sprintf("%d in flight at once", l.Rate), Plain: fmt.Sprintf("at most %d in flight at once", l.Rate),
			Admits: fmt.Sprintf("%d requests in flight at once over every gateway; one more, while they last, is refused with 429 and Retry-After, and a place frees when an answer (a whole download) ends", l.Rate)}
	}
	switch l.Algorithm {
	case "quota":
		return quotaOf(l)
	case "window":
		return slidingOf(l)
	}
	v := gcraOf(l)
	v.Algorithm, v.GCRA = "token bucket (GCRA)", true
	return v
}

// quotaOf is a calendar quota: Rate in each window, counted from the
// window's start, whole again when it turns.
func quotaOf(l Policy) limitView {
	w := int64((l.Window + time.Second - 1) / time.Second)
	spent := max(l.Rate/4, 1)
	return limitView{Policy: l.Name, Applies: l.Applies, Scope: l.Scope, Quota: l.Quota, Window: l.Calendar,
		Spent: spent, Example: stateField(l.Name, l.Rate-spent, time.Duration(w)*time.Second),
		Sustained: fmt.Sprintf("%d per %s", l.Rate, l.Calendar), Plain: fmt.Sprintf("%d per %s", l.Rate, l.Calendar),
		Header: policyField(l.Name, l.Rate, l.Window), WindowSeconds: w, Algorithm: "calendar quota",
		Admits: fmt.Sprintf("at most %d in each %s, counted exactly across every gateway; once they are used, requests are refused until the window turns (Retry-After and %s say when), and the next window starts from zero (%s is the window's seconds, %s the seconds until it turns)",
			l.Rate, l.Calendar, keys.Reset, keys.Window, keys.Reset)}
}

// slidingOf is a sliding window: at most Rate in any Window.
func slidingOf(l Policy) limitView {
	w := int64((l.Window + time.Second - 1) / time.Second)
	span := duration(l.Window) // "1 minute" said "minute": 120 in any minute
	if n, unit, ok := strings.Cut(span, " "); ok && n == "1" {
		span = unit
	}
	spent := max(l.Rate/4, 1)
	return limitView{Policy: l.Name, Applies: l.Applies, Scope: l.Scope, Quota: l.Quota, Window: duration(l.Window),
		Spent: spent, Example: stateField(l.Name, l.Rate-spent, time.Duration(w)*time.Second),
		Sustained: fmt.Sprintf("%d in any %s", l.Rate, span), Plain: fmt.Sprintf("%d in any %s", l.Rate, span),
		Header: policyField(l.Name, l.Rate, l.Window), WindowSeconds: w, Algorithm: "sliding window",
		Admits: fmt.Sprintf("at most %d in any %s, however they fall, counted exactly across every gateway: each request counts for %s after it was admitted, so there is no burst at a window's edge (%s is the seconds until the last one counted leaves the window)",
			l.Rate, span, duration(l.Window), keys.Reset)}
}

// gcraOf is a token bucket.
func gcraOf(l Policy) limitView {
	w := int64((l.Window + time.Second - 1) / time.Second)
	v := limitView{Policy: l.Name, Applies: l.Applies, Scope: l.Scope, Quota: l.Quota, Window: duration(l.Window),
		Sustained: fmt.Sprintf("%d per %s", l.Rate, duration(l.Window)),
		Header:    policyField(l.Name, l.Quota, l.Window), WindowSeconds: w}
	v.Plain = fmt.Sprintf("%d per %s", l.Rate, duration(l.Window))
	if n, unit, ok := strings.Cut(duration(l.Window), " "); ok && n == "1" {
		v.Plain = fmt.Sprintf("%d a %s", l.Rate, unit)
	}
	if l.Rate <= 0 || l.Window <= 0 {
		return v
	}
	interval := l.Window / time.Duration(l.Rate) // one request back per interval
	first := duration(l.Window)
	if n, unit, _ := strings.Cut(first, " "); n == "1" {
		first = unit
	}
	if l.Cost > 1 { // tokens: a request takes Cost of them
		v.Plain += fmt.Sprintf(" tokens, %d a request", l.Cost)
		spent := max(l.Quota/l.Cost/4, 1)
		v.Spent = spent
		v.Admits = fmt.Sprintf("%d requests at once (%d tokens), then one every %s, so up to %d in the first %s",
			l.Quota/l.Cost, l.Quota, pace(interval*time.Duration(l.Cost)), (l.Quota+l.Rate)/l.Cost, first)
		whole := (time.Duration(spent*l.Cost)*interval + time.Second - 1) / time.Second
		v.Example = stateField(l.Name, l.Quota-spent*l.Cost, whole*time.Second)
		return v
	}
	v.Admits = fmt.Sprintf("%d at once, then one every %s, so up to %d in the first %s",
		l.Quota, pace(interval), l.Quota+l.Rate, first)
	spent := max(l.Quota/4, 1)
	v.Spent = spent
	whole := (time.Duration(spent)*interval + time.Second - 1) / time.Second
	v.Example = stateField(l.Name, l.Quota-spent, whole*time.Second)
	return v
}

// pace says an interval as people do: "0.5 s", "6 s", "2 minutes".
func pace(d time.Duration) string {
	if d < time.Minute || d%time.Minute != 0 {
		return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + " s"
	}
	return duration(d)
}
