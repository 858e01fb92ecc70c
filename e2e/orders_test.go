package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

type order struct {
	OrderID     string          `json:"order_id"`
	Status      string          `json:"status"`
	Final       bool            `json:"final"`
	SafetyScore json.RawMessage `json:"safety_score"`
	MCNumber    string          `json:"mc_number"`
	Services    []struct {
		Service string  `json:"service"`
		Status  string  `json:"status"`
		Reason  *string `json:"reason"`
		FileURL *string `json:"file_url"`
		Result  *struct {
			Found   bool              `json:"found"`
			Reviews []json.RawMessage `json:"reviews"`
		} `json:"result"`
	} `json:"services"`
	Poll struct {
		URL          string `json:"url"`
		AfterSeconds int    `json:"after_seconds"`
	} `json:"poll"`
}

func (o order) service(name string) (status, reason string) {
	for _, s := range o.Services {
		if s.Service == name {
			r := ""
			if s.Reason != nil {
				r = *s.Reason
			}
			return s.Status, r
		}
	}
	return "", ""
}

func orderBody(license string, services ...string) []byte {
	return fmt.Appendf(nil, `{"mc_number":"mc-0012345","external_reference":"po-77","driver":{"first_name":"Ann","last_name":"Lee","date_of_birth":"1980-02-03","license_number":%q,"license_state":"TX"},"services":["%s"]}`,
		license, strings.Join(services, `","`))
}

// place places an order through the gateway and returns it.
func (s *stack) place(key, license string, services ...string) order {
	s.t.Helper()
	r := s.do("POST", s.gwURLs[0]+"/api/vendor/v1/orders", key, orderBody(license, services...),
		map[string]string{"Idempotency-Key": "idem-" + license + "-" + strings.Join(services, "-")})
	if r.status != 202 {
		s.t.Fatalf("place order %s = %d %s", license, r.status, r.body)
	}
	var o order
	decode(s.t, string(r.body), &o)
	return o
}

// poll reads the order through the gateway until cond holds or the time is up.
func (s *stack) poll(key, id string, within time.Duration, cond func(order) bool) order {
	s.t.Helper()
	deadline := time.Now().Add(within)
	var o order
	for {
		r := s.do("GET", s.gwURLs[0]+"/api/vendor/v1/orders/"+id, key, nil, nil)
		if r.status != 200 && r.status != 202 {
			s.t.Fatalf("poll %s = %d %s", id, r.status, r.body)
		}
		o = order{}
		decode(s.t, string(r.body), &o)
		if (r.status == 200) != o.Final {
			s.t.Fatalf("status %d with final=%v", r.status, o.Final)
		}
		if r.status == 202 && r.header.Get("Retry-After") == "" {
			s.t.Fatalf("202 without Retry-After")
		}
		if r.header.Get("Location") == "" || r.header.Get("Cache-Control") != "no-store" {
			s.t.Fatalf("poll answer lacks Location or no-store: %v", r.header)
		}
		if cond(o) {
			return o
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("order %s did not reach the expected state within %s; last: %s", id, within, r.body)
		}
		time.Sleep(150 * time.Millisecond)
	}
}

func TestSandboxOrdersThroughGateway(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{redis: true, backendEnv: map[string]string{"BACKEND_ORDER_DEADLINE": "4s"}})
	all := []string{"mvr", "psp", "cdlis", "driver_reviews"}
	final := func(o order) bool { return o.Final }

	t.Run("completes and serves reports", func(t *testing.T) {
		_, key := s.newVendor("sandbox", "mvr,psp,cdlis,driver_reviews")
		o := s.place(key, "D1234567", all...)
		if o.MCNumber != "MC12345" || o.Final || o.Poll.URL == "" {
			t.Fatalf("placed order: %+v", o)
		}
		o = s.poll(key, o.OrderID, 10*time.Second, final)
		if o.Status != "completed" || string(o.SafetyScore) == "null" {
			t.Fatalf("final order: status %s, safety %s", o.Status, o.SafetyScore)
		}
		for _, sv := range o.Services {
			if sv.Service == "driver_reviews" {
				if sv.Result == nil || !sv.Result.Found || len(sv.Result.Reviews) != 2 {
					t.Fatalf("driver_reviews result: %+v", sv.Result)
				}
				continue
			}
			if sv.FileURL == nil {
				t.Fatalf("%s completed without file_url", sv.Service)
			}
			pdf := s.do("GET", *sv.FileURL, key, nil, nil)
			if pdf.status != 200 || !strings.HasPrefix(string(pdf.body), "%PDF-") ||
				pdf.header.Get("Content-Type") != "application/pdf" {
				t.Fatalf("report %s: %d %q %.20s", sv.Service, pdf.status, pdf.header.Get("Content-Type"), pdf.body)
			}
		}
	})

	t.Run("0001 mvr no_record: partially completed", func(t *testing.T) {
		_, key := s.newVendor("sandbox", "mvr,psp,cdlis,driver_reviews")
		o := s.poll(key, s.place(key, "D1230001", all...).OrderID, 10*time.Second, final)
		if st, r := o.service("mvr"); st != "failed" || r != "no_record" || o.Status != "partially_completed" {
			t.Fatalf("order %s, mvr %s/%s", o.Status, st, r)
		}
	})

	t.Run("0002 identity review until released", func(t *testing.T) {
		_, key := s.newVendor("sandbox", "mvr,psp,cdlis,driver_reviews")
		o := s.place(key, "D1230002", "mvr", "psp")
		o = s.poll(key, o.OrderID, 10*time.Second, func(o order) bool {
			st, _ := o.service("mvr")
			return st == "under_review"
		})
		if _, r := o.service("mvr"); r != "identity_review" || o.Status != "under_review" || string(o.SafetyScore) != "null" {
			t.Fatalf("held order: %s, mvr reason %s, safety %s", o.Status, r, o.SafetyScore)
		}
		s.mustVendorctl("order", "release", o.OrderID)
		o = s.poll(key, o.OrderID, 10*time.Second, final)
		if st, _ := o.service("mvr"); st != "completed" || o.Status != "completed" {
			t.Fatalf("released order: %s, mvr %s", o.Status, st)
		}
	})

	t.Run("0005 provider failed", func(t *testing.T) {
		_, key := s.newVendor("sandbox", "mvr,psp,cdlis,driver_reviews")
		o := s.poll(key, s.place(key, "D1230005", all...).OrderID, 10*time.Second, final)
		if o.Status != "failed" {
			t.Fatalf("order %s", o.Status)
		}
		for _, sv := range all {
			if st, r := o.service(sv); st != "failed" || r != "provider_failed" {
				t.Fatalf("%s: %s/%s", sv, st, r)
			}
		}
	})

	t.Run("0007 closed at the deadline", func(t *testing.T) {
		_, key := s.newVendor("sandbox", "mvr,psp,cdlis,driver_reviews")
		o := s.poll(key, s.place(key, "D1230007", "mvr", "psp").OrderID, 15*time.Second, final)
		if o.Status != "failed" {
			t.Fatalf("order %s", o.Status)
		}
		for _, sv := range []string{"mvr", "psp"} {
			if st, r := o.service(sv); st != "failed" || r != "timed_out" {
				t.Fatalf("%s: %s/%s", sv, st, r)
			}
		}
	})
}
