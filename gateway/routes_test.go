package gateway

import (
	"testing"
	"time"

	"vendorgate/gateway/docs"
	"vendorgate/gateway/openapi"
)

// TestRouteLabels: registering the routes gives each its own label, its
// pattern (or the documentation route's path), after "unmatched".
func TestRouteLabels(t *testing.T) {
	h, err := docs.NewHandler(docs.HandlerOptions{Document: openapi.Document, Rate: 1, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	g := &Gateway{docs: h}
	g.newRouter()
	want := []string{"unmatched"}
	for _, r := range routes {
		want = append(want, r.pattern)
	}
	for _, d := range docs.Routes() {
		want = append(want, d.Path)
	}
	if len(g.labels) != len(want) {
		t.Fatalf("labels %q, want %q", g.labels, want)
	}
	for i := range want {
		if g.labels[i] != want[i] || g.labels.of(i) != want[i] {
			t.Fatalf("label %d is %q, want %q", i, g.labels[i], want[i])
		}
	}
	if g.labels.of(-1) != "unmatched" || g.labels.of(len(want)) != "unmatched" {
		t.Fatal("an index past the labels is not unmatched")
	}
}
