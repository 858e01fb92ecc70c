package docs

import (
	"bytes"
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"vendorgate/gateway/limit"
	"vendorgate/gateway/policy"
	"vendorgate/shared/apikey"
)

// HandlerOptions configure a Handler. Every field is required except Now.
type HandlerOptions struct {
	// Document is the OpenAPI document in YAML.
	Document []byte
	// PublicBaseURL is the gateway's public address, never a request's Host.
	PublicBaseURL string
	Prefixes      apikey.Prefixes
	MaxBodyBytes  int
	// Rate requests per Window from one client address, in process; past
	// it Serve refuses (config.Docs).
	Rate   int
	Window time.Duration
	// Now is the limiter's clock; time.Now when nil.
	Now func() time.Time
}

// Handler answers the documentation routes (/docs, /openapi.yaml and
// /openapi.json) from memory, before authentication: limited per client
// address, cacheable, 304 on a matching If-None-Match. Render checks them
// at start and on every reload, and the first request after renders them,
// so the page shows the limits in force.
type Handler struct {
	o    HandlerOptions
	rate policy.Rate
	lim  *limit.Local
	cur  atomic.Pointer[rendering]
}

// rendering is what the last Render was given, and from the first request
// that asks for it, what it renders: a gateway nobody reads the
// documentation of holds none of it (the page and the document's two
// forms are some 190 kB with their buffers' slack, most of a small
// gateway's own live heap).
type rendering struct {
	o    Options
	once sync.Once
	set  *Set
	err  error
}

// assets renders r once, at its first call.
func (r *rendering) assets() (*Set, error) {
	r.once.Do(func() { r.set, r.err = Render(r.o) })
	return r.set, r.err
}

// Route is one documentation route.
type Route struct {
	Path string
	pick func(*Set) *Asset
}

// Routes are the documentation routes, in the order they are registered.
func Routes() []Route {
	return []Route{
		{Path: "/docs", pick: func(s *Set) *Asset { return &s.HTML }},
		{Path: "/openapi.yaml", pick: func(s *Set) *Asset { return &s.YAML }},
		{Path: "/openapi.json", pick: func(s *Set) *Asset { return &s.JSON }},
	}
}

// FailedKeys are the failed-key thresholds the page states.
type FailedKeys struct {
	PerAddress, PerKey int
	Window             time.Duration
}

// cacheControl: documentation is the same for everyone and changes only on
// a reload; vendor answers stay no-store.
const cacheControl = "public, max-age=300"

// NewHandler returns a Handler; call Render before serving.
func NewHandler(o HandlerOptions) (*Handler, error) {
	if len(o.Document) == 0 {
		return nil, errors.New("docs: no document")
	}
	if o.Rate <= 0 || o.Window <= 0 {
		return nil, errors.New("docs: rate and window must be positive")
	}
	return &Handler{o: o, rate: policy.Rate{Name: "docs", Limit: o.Rate, Period: o.Window},
		lim: limit.NewLocal(limit.LocalOptions{Now: o.Now})}, nil
}

// Render readies the page and the document for the vendor limits in force
// and the failed-key thresholds, and swaps them in; on an error the
// previous rendering stays. It renders them to check them, and keeps
// only what it was given: the first request renders them again (the same
// bytes: rendering reads nothing else) and keeps them.
func (h *Handler) Render(limits []Policy, fk FailedKeys) error {
	o := Options{
		Document: h.o.Document, PublicBaseURL: h.o.PublicBaseURL, Prefixes: h.o.Prefixes, Limits: limits,
		FailedKeysPerAddress: fk.PerAddress, FailedKeysPerKey: fk.PerKey, FailedKeysWindow: fk.Window,
		Docs: Policy{Name: h.rate.Name, Applies: "/docs, /openapi.yaml, /openapi.json", Scope: "per client address",
			Quota: h.rate.Quota(), Rate: h.rate.Limit, Window: h.rate.Period},
		MaxBodyBytes: h.o.MaxBodyBytes,
	}
	if _, err := Render(o); err != nil {
		return err
	}
	h.cur.Store(&rendering{o: o})
	return nil
}

// Serve answers rt for a client at address client. When the address is
// past its limit it writes nothing and returns how long to wait: the
// caller answers 429 with its envelope. An error (the documentation could
// not be rendered) writes nothing either: the caller answers 500.
func (h *Handler) Serve(ctx *fasthttp.RequestCtx, rt Route, client netip.Addr) (retryAfter time.Duration, limited bool, err error) {
	var cs policy.Checks
	cs.Add(policy.Check{Key: "docs:" + client.String(), Rate: h.rate})
	dec, _ := h.lim.Allow(cs) // the in-process limiter never fails
	if !dec.Allowed {
		return dec.RetryAfter, true, nil
	}
	set, err := h.cur.Load().assets()
	if err != nil { // Render rendered the same options without one
		return 0, false, err
	}
	a := rt.pick(set)
	hd := &ctx.Response.Header
	hd.Set("Cache-Control", cacheControl)
	hd.Set("ETag", a.ETag)
	hd.Set("X-Content-Type-Options", "nosniff")
	if rt.Path == "/docs" {
		// The page needs nothing from anywhere: no script, no font, no image.
		hd.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		hd.Set("Referrer-Policy", "no-referrer")
	}
	if etagMatches(ctx.Request.Header.Peek(fasthttp.HeaderIfNoneMatch), a.ETag) {
		ctx.SetStatusCode(fasthttp.StatusNotModified)
	} else {
		ctx.SetContentType(a.ContentType)
		ctx.SetBody(a.Body)
	}
	return 0, false, nil
}

// etagMatches applies If-None-Match's weak comparison: "*" or any listed
// tag equal to etag, W/ ignored.
func etagMatches(header []byte, etag string) bool {
	for len(header) > 0 {
		var tag []byte
		i := bytes.IndexByte(header, ',')
		if i < 0 {
			tag, header = header, nil
		} else {
			tag, header = header[:i], header[i+1:]
		}
		tag = bytes.TrimSpace(tag)
		tag = bytes.TrimPrefix(tag, []byte("W/"))
		if string(tag) == "*" || string(tag) == etag {
			return true
		}
	}
	return false
}
