package backend

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"vendorgate/backend/billing"
	"vendorgate/backend/store"
	"vendorgate/shared/testpg"
	"vendorgate/shared/wire"
)

// receiver is an OpenMeter-compatible ingest endpoint that fails, loses
// its answers and holds requests as its script says, and dedupes what it
// took by event id, as OpenMeter does.
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	script   []string       // what the next requests get: fail, lost, hold; then ok
	took     map[string]int // event id -> times taken
	events   map[string]billing.CloudEvent
	requests int
	bad      []string // what a request got wrong
	arrived  chan struct{}
	release  chan struct{}
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{took: map[string]int{}, events: map[string]billing.CloudEvent{}, arrived: make(chan struct{}, 100), release: make(chan struct{})}
	r.Server = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(func() {
		select {
		case <-r.release:
		default:
			close(r.release)
		}
		r.Close()
	})
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	r.requests++
	step := "ok"
	if len(r.script) > 0 {
		step, r.script = r.script[0], r.script[1:]
	}
	if req.Method != http.MethodPost || req.URL.Path != "/api/v1/events" || req.Header.Get("Content-Type") != "application/cloudevents-batch+json" ||
		req.Header.Get("Authorization") != "Bearer export-token" {
		r.bad = append(r.bad, req.Method+" "+req.URL.Path+" "+req.Header.Get("Content-Type"))
	}
	r.mu.Unlock()
	r.arrived <- struct{}{}
	switch step {
	case "fail":
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
		return
	case "hold":
		<-r.release
	}
	var batch []billing.CloudEvent
	if err := json.Unmarshal(body, &batch); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	for _, e := range batch {
		r.took[e.ID]++
		r.events[e.ID] = e
	}
	if strings.Contains(string(body), "Lee") || strings.Contains(string(body), "1980-02-03") || strings.Contains(string(body), "D123") {
		r.bad = append(r.bad, "driver data in "+string(body))
	}
	r.mu.Unlock()
	if step == "lost" {
		http.Error(w, "taken, but the answer is lost", http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (r *receiver) play(steps ...string) {
	r.mu.Lock()
	r.script = append(r.script, steps...)
	r.mu.Unlock()
}

func (r *receiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests
}

func exportTo(r *receiver) func(*Options) {
	return func(o *Options) {
		x := &o.Config.BillingExport
		x.URL, x.Token = r.URL+"/api/v1/events", "export-token"
		x.Interval = time.Hour // the test runs the exporter itself
		x.BatchSize, x.BackoffMin, x.BackoffMax = 3, time.Second, 4*time.Second
	}
}

// billableIDs are the event ids of the orders' billable services.
func billableIDs(orders []wire.Order) []string {
	var out []string
	for _, o := range orders {
		for _, s := range o.Services {
			if s.Status == wire.StatusCompleted || (s.Status == wire.StatusFailed && deref(s.Reason) == wire.ReasonNoRecord) {
				out = append(out, store.BillingEventID(o.OrderID, s.Service))
			}
		}
	}
	sort.Strings(out)
	return out
}

// TestBillingExportEveryServiceOnce: against a receiver that fails twice,
// then takes a batch but loses its answer, with a backend restart between,
// every billable service arrives, each id at least once, the lost batch's
// twice, and the receiver's dedupe by id gives exactly the billable
// services; a failed batch waits for its backoff.
func TestBillingExportEveryServiceOnce(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		rcv := newReceiver(t)
		exportEveryServiceOnce(t, rcv, start(t, exportTo(rcv)), func(h *harness) { h.restart() })
	})
	t.Run("postgres", func(t *testing.T) {
		url := testpg.Start(t).CreateDB(t, "export")
		rcv := newReceiver(t)
		h := start(t, exportTo(rcv), func(o *Options) { o.Store = openPostgres(t, url) })
		exportEveryServiceOnce(t, rcv, h, func(h *harness) {
			h.stop() // closes the store it owns
			h.o.Store = openPostgres(t, url)
			h.restart()
		})
	})
}

func exportEveryServiceOnce(t *testing.T, rcv *receiver, h *harness, restart func(*harness)) {
	v := h.newVendor("sandbox", allServices...)
	var ids []string
	for _, lic := range []string{"D1230000", "D1230001", "D1230005", "D1230004"} {
		ids = append(ids, h.mustPlace(v, lic).OrderID)
	}
	want := billableIDs(h.settle(v, ids...))
	if len(want) != 11 {
		t.Fatalf("billable services %d, want 11 (4 + 4 with a no_record mvr + 0 failed + 3 with a held psp): %v", len(want), want)
	}
	run := func() int { return h.b.bg.exporter.Run() }

	unsent := func() string {
		t.Helper()
		for _, l := range strings.Split(string(h.do("GET", h.admin+"/metrics", nil, "").body), "\n") {
			if strings.HasPrefix(l, "vendorgate_backend_billing_outbox_unsent ") {
				return strings.TrimPrefix(l, "vendorgate_backend_billing_outbox_unsent ")
			}
		}
		t.Fatal("no vendorgate_backend_billing_outbox_unsent in /metrics")
		return ""
	}
	if u := unsent(); u != "0" {
		t.Errorf("outbox before any run: %s unsent, want 0", u)
	}
	rcv.play("fail", "fail", "lost")
	if n := run(); n != 0 || rcv.count() != 1 {
		t.Fatalf("a failing receiver: sent %d in %d requests, want 0 in 1", n, rcv.count())
	}
	if u := unsent(); u != "11" {
		t.Errorf("outbox after a failed run: %s unsent, want 11", u)
	}
	if n := run(); n != 0 || rcv.count() != 1 {
		t.Fatalf("before the backoff ended: sent %d, %d requests, want 0 and no new request", n, rcv.count())
	}
	h.clock.Advance(4 * time.Second)
	if n := run(); n != 0 || rcv.count() != 2 {
		t.Fatalf("second failure: sent %d, %d requests", n, rcv.count())
	}
	h.clock.Advance(4 * time.Second)
	if n := run(); n != 0 || rcv.count() != 3 {
		t.Fatalf("answer lost: sent %d, %d requests", n, rcv.count())
	}
	restart(h) // the outbox is in the database: nothing is lost
	h.clock.Advance(4 * time.Second)
	if n := run(); n != len(want) {
		t.Fatalf("after the restart sent %d, want %d", n, len(want))
	}
	if u := unsent(); u != "0" {
		t.Errorf("outbox once all were taken: %s unsent, want 0", u)
	}
	before := rcv.count()
	if n := run(); n != 0 || rcv.count() != before {
		t.Errorf("nothing left: sent %d more in %d requests", n, rcv.count()-before)
	}

	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	var got []string
	twice := 0
	for id, n := range rcv.took {
		got = append(got, id)
		if n == 2 {
			twice++
		} else if n != 1 {
			t.Errorf("%s taken %d times", id, n)
		}
	}
	sort.Strings(got)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("the receiver's events by id:\n%v\nwant the billable services\n%v", got, want)
	}
	if twice != 3 {
		t.Errorf("%d events arrived twice, want the lost batch's 3", twice)
	}
	if len(rcv.bad) > 0 {
		t.Errorf("requests not as OpenMeter takes them: %q", rcv.bad)
	}
	e := rcv.events[store.BillingEventID(ids[1], wire.MVR)]
	if e.SpecVersion != "1.0" || e.Source != "vendorgate-backend" || e.Type != "vendorgate.service.billable" || e.Subject != v ||
		e.Time.IsZero() || e.Data != (billing.EventData{OrderID: ids[1], Service: wire.MVR, Outcome: wire.ReasonNoRecord, Environment: "sandbox"}) {
		t.Errorf("the no_record mvr's event = %+v", e)
	}
}

// TestBillingExportNeverHoldsAnOrder: while the receiver holds the
// exporter's request, orders are placed and worked as ever.
func TestBillingExportNeverHoldsAnOrder(t *testing.T) {
	rcv := newReceiver(t)
	h := start(t, exportTo(rcv))
	v := h.newVendor("sandbox", "mvr")
	first := h.mustPlace(v, "D1230000", "mvr").OrderID
	h.settle(v, first)
	rcv.play("hold")
	done := make(chan int)
	go func() { done <- h.b.bg.exporter.Run() }()
	<-rcv.arrived // the exporter waits on the receiver now
	second := h.mustPlace(v, "D1230000", "mvr").OrderID
	if o := h.settle(v, second); o[0].Services[0].Status != wire.StatusCompleted {
		t.Errorf("an order placed while the exporter waits: %+v", o[0])
	}
	select {
	case n := <-done:
		t.Fatalf("the exporter finished (%d) while its request was held", n)
	default:
	}
	close(rcv.release)
	if n := <-done; n != 1 {
		t.Errorf("sent %d, want the first order's service", n)
	}
	if n := h.b.bg.exporter.Run(); n != 1 {
		t.Errorf("next run sent %d, want the second order's service", n)
	}
}
