package gateway

import (
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"vendorgate/config"
	"vendorgate/shared/testredis"
	"vendorgate/shared/wire"
)

// TestAlertLabelsAreExported reads every label value the alert rules
// (deploy/prometheus/alerts.yml) and their promtool tests (alerts.gotest.yml)
// use on a gateway metric, and checks that a real gateway exports it: an
// alert tested on a value the code never emits passes its test and never
// fires. The gateway is driven through what the alerts watch (allowed,
// limited and refused reads, bad keys, Redis stopped, a reload refused).
// A backend breaker's name carries its host, which differs by deployment:
// "backend:" followed by anything stands for it; so do a certificate's
// file and names (freeFormLabels), for which any exported value does. The
// TLS metrics come from a second gateway serving HTTPS from files and
// ACME (its CA unreachable) beside http_listen.
func TestAlertLabelsAreExported(t *testing.T) {
	rs := testredis.Start(t)
	b := newTestBackend(t)
	gw := startGateway(t, b, func(o *Options) {
		o.Config.Redis.URL = config.List{rs.URL()}
		o.Config.Limits.Vendor.Reads = config.Limit{Rate: 3, Period: time.Minute}
	})
	key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	expired, _ := b.addKey("vendor-b", wire.VendorApproved, time.Now().Add(-time.Hour))
	me := gw.url + "/api/vendor/v1/me"
	for range 5 {
		do(t, "GET", me, key)
	}
	do(t, "GET", me, expired)
	do(t, "GET", me, signedKey(t))
	do(t, "GET", me, "")
	do(t, "GET", gw.url+"/api/vendor/v1/orders/x/reports/mvr", key)
	if err := gw.g.Reload(gw.cfg); err != nil {
		t.Fatal(err)
	}
	gw.g.ReloadFailed()
	other, _ := b.addKey("vendor-c", wire.VendorApproved, time.Now().Add(time.Hour))
	rs.Stop()
	for range 5 {
		do(t, "GET", me, other) // vendor-a's denial is remembered in process: no Redis call
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(scrape(t, gw), `vendorgate_gateway_ready{check="redis"} 0`) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	exported := labelValues(scrape(t, gw))
	tlsGW := startTLSGateway(t, b, func(o *Options) {
		o.Config.HTTPListen = "127.0.0.1:0"
		o.Config.TLS.ACME = config.ACME{Domains: config.List{"acme.vendorgate.test"}, CA: "https://127.0.0.1:1/dir", Storage: t.TempDir()}
	})
	for base, labels := range labelValues(scrape(t, tlsGW.testGateway)) {
		if exported[base] == nil {
			exported[base] = labels
		}
	}

	var used []string
	for _, f := range []string{"../deploy/prometheus/alerts.yml", "../deploy/prometheus/alerts.gotest.yml"} {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range selectorRe.FindAllStringSubmatch(string(text), -1) {
			base := histogramBase(m[1])
			for _, lv := range labelRe.FindAllStringSubmatch(m[2], -1) {
				name, value := lv[1], lv[2]
				if name == "job" || name == "instance" {
					continue // the scrape's target labels
				}
				used = append(used, m[1]+"{"+name+"}")
				if freeFormLabels[name] && len(exported[base][name]) > 0 {
					continue
				}
				if !exported[base][name][value] && !(name == "breaker" && strings.HasPrefix(value, "backend:") && exported[base][name]["backend:*"]) {
					t.Errorf("%s uses %s{%s=%q}; the gateway exports %s values %v", f, m[1], name, value, name, sorted(exported[base][name]))
				}
			}
		}
	}
	if len(used) < 20 {
		t.Fatalf("found only %d labelled gateway series in the alert files: the parser is broken", len(used))
	}
}

// freeFormLabels take values that differ by deployment (a certificate's
// file and the names it covers).
var freeFormLabels = map[string]bool{"cert_file": true, "names": true}

var (
	selectorRe = regexp.MustCompile(`(vendorgate_gateway_[a-z_]*[a-z])\{([^}]*)\}`)
	labelRe    = regexp.MustCompile(`([a-z_]+)="([^"]*)"`)
	seriesRe   = regexp.MustCompile(`(?m)^(vendorgate_gateway_[a-z_]*[a-z])\{([^}]*)\} `)
)

// labelValues is metric (histogram base name) → label → values of a
// Prometheus text page; a backend breaker also counts as "backend:*".
func labelValues(text string) map[string]map[string]map[string]bool {
	out := map[string]map[string]map[string]bool{}
	for _, m := range seriesRe.FindAllStringSubmatch(text, -1) {
		base := histogramBase(m[1])
		if out[base] == nil {
			out[base] = map[string]map[string]bool{}
		}
		for _, lv := range labelRe.FindAllStringSubmatch(m[2], -1) {
			if out[base][lv[1]] == nil {
				out[base][lv[1]] = map[string]bool{}
			}
			out[base][lv[1]][lv[2]] = true
			if lv[1] == "breaker" && strings.HasPrefix(lv[2], "backend:") {
				out[base][lv[1]]["backend:*"] = true
			}
		}
	}
	return out
}

func histogramBase(name string) string {
	for _, s := range []string{"_bucket", "_sum", "_count"} {
		if b, ok := strings.CutSuffix(name, s); ok && strings.HasSuffix(b, "_seconds") {
			return b
		}
	}
	return name
}

func sorted(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
