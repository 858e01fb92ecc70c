package gateway

import "testing"

// TestRouteLabels: each route's label is its pattern at its own index, and
// the documentation routes follow "unmatched" at theirs.
func TestRouteLabels(t *testing.T) {
	labels := routeLabels()
	if len(labels) != routeUnmatched+1+len(docRoutes) {
		t.Fatalf("%d labels: %q", len(labels), labels)
	}
	for i, r := range routes {
		if r.index != i || labels[r.index] != r.pattern {
			t.Fatalf("route %d (%s) has index %d, label %q", i, r.pattern, r.index, labels[r.index])
		}
	}
	if labels[routeUnmatched] != "unmatched" {
		t.Fatalf("label %d is %q", routeUnmatched, labels[routeUnmatched])
	}
	for _, d := range docRoutes {
		if labels[d.index] != d.path || routeLabelOf(d.index) != d.path {
			t.Fatalf("docs route %s at %d is labelled %q", d.path, d.index, labels[d.index])
		}
	}
}
