package docs

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"vendorgate/gateway/openapi"
	"vendorgate/shared/apikey"
)

// TestHandlerRendersAtFirstRequest: Render checks the page and
// keeps none of it; the first request renders it, the same bytes and ETag
// as rendered at once; a reload drops what was rendered, and the next
// request shows the new limits; a Render that fails keeps the last
// rendering.
func TestHandlerRendersAtFirstRequest(t *testing.T) {
	h, err := NewHandler(HandlerOptions{Document: openapi.Document, PublicBaseURL: "https://api.example.com", Prefixes: apikey.DefaultPrefixes(),
		MaxBodyBytes: 1 << 20, Rate: 100, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	fk := FailedKeys{PerAddress: 100, PerKey: 10, Window: 10 * time.Minute}
	serve := func(want []Policy) []byte {
		t.Helper()
		if set := h.cur.Load().set; set != nil {
			t.Fatal("rendered before a request asked")
		}
		var ctx fasthttp.RequestCtx
		ctx.Request.SetRequestURI("/docs")
		if _, limited, err := h.Serve(&ctx, Routes()[0], netip.MustParseAddr("192.0.2.1")); limited || err != nil {
			t.Fatalf("served: limited %v, %v", limited, err)
		}
		o := h.cur.Load().o
		o.Limits = want
		at, err := Render(o)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(ctx.Response.Body(), at.HTML.Body) || string(ctx.Response.Header.Peek("ETag")) != at.HTML.ETag {
			t.Fatalf("served %d bytes, ETag %s; rendered at once %d bytes, ETag %s", len(ctx.Response.Body()),
				ctx.Response.Header.Peek("ETag"), len(at.HTML.Body), at.HTML.ETag)
		}
		return ctx.Response.Body()
	}
	first := []Policy{{Name: "reads", Applies: "reads", Scope: "per vendor", Quota: 120, Rate: 120, Window: time.Minute}}
	if err := h.Render(first, fk); err != nil {
		t.Fatal(err)
	}
	before := serve(first)
	second := []Policy{{Name: "reads", Applies: "reads", Scope: "per vendor", Quota: 240, Rate: 240, Window: time.Minute}}
	if err := h.Render(second, fk); err != nil { // a reload
		t.Fatal(err)
	}
	if bytes.Equal(serve(second), before) {
		t.Fatal("the reload's limits did not change the document")
	}
	h.o.PublicBaseURL = "" // Render refuses it
	kept := h.cur.Load()
	if err := h.Render(first, fk); err == nil || h.cur.Load() != kept {
		t.Fatalf("a failed Render: %v, the last rendering kept: %v", err, h.cur.Load() == kept)
	}
}
