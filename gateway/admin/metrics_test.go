package admin

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestRequestCountsEveryStatus counts requests of every status of every
// class on two routes and three methods, each status a different number of
// times, from concurrent callers (so that two requests make a class's
// first children at once), and reads each count and each histogram's
// sample count back from the registry: a request counted under another
// route, method or status fails it.
func TestRequestCountsEveryStatus(t *testing.T) {
	m := NewMetrics([]string{"/a", "/b"})
	methods := [][]byte{[]byte("GET"), []byte("POST"), []byte("DELETE")}
	times := func(route, mi, status int) int { return 1 + (route+mi+status)%3 }
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for route := range 2 {
				for mi, method := range methods {
					for status := 100; status < 600; status++ {
						for range times(route, mi, status) {
							m.Request(route, method, status, time.Millisecond)
						}
					}
				}
			}
			if w == 0 {
				m.Request(1, methods[0], 700, time.Millisecond) // out of range: counted as 599
			}
		})
	}
	wg.Wait()
	labels := []string{"GET", "POST", "other"}
	otel := []string{"GET", "POST", "_OTHER"}
	for route, name := range []string{"/a", "/b"} {
		for mi := range methods {
			for status := 100; status < 600; status++ {
				code := strconv.Itoa(status)
				want := 4 * times(route, mi, status)
				if route == 1 && mi == 0 && status == 599 {
					want++
				}
				if got := counted(t, m.requests.WithLabelValues(name, labels[mi], code)); got != float64(want) {
					t.Fatalf("%s %s %d: counted %v, want %d", name, labels[mi], status, got, want)
				}
				errType := ""
				if status >= 500 {
					errType = code
				}
				h := m.HTTPServerDuration.WithLabelValues(name, otel[mi], code, errType)
				if n := sampleCount(t, h); n != uint64(want) {
					t.Fatalf("%s %s %d: %d durations observed, want %d", name, labels[mi], status, n, want)
				}
			}
		}
	}
}

// sampleCount is how many values histogram child o observed.
func sampleCount(t *testing.T, o prometheus.Observer) uint64 {
	t.Helper()
	var pb dto.Metric
	if err := o.(prometheus.Metric).Write(&pb); err != nil {
		t.Fatal(err)
	}
	return pb.GetHistogram().GetSampleCount()
}

// counted is counter c's value.
func counted(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var pb dto.Metric
	if err := c.Write(&pb); err != nil {
		t.Fatal(err)
	}
	return pb.GetCounter().GetValue()
}
