package readyz

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/valyala/fasthttp"
)

func TestRun(t *testing.T) {
	ran := map[string]int{}
	check := func(name string, err error) Check {
		return Check{Name: name, Run: func(context.Context) error { ran[name]++; return err }}
	}
	checks := []Check{check("draining", nil), check("redis", errors.New("ping: refused")),
		check("backend", Degraded(errors.New("10.0.0.2:8081: refused")))}
	for _, c := range []struct {
		query    string
		failed   []string
		statuses []Status
		warnings int
		runs     int
	}{
		{"", []string{"redis"}, []Status{StatusOK, StatusFailed, StatusOK}, 0, 3},
		{"verbose", []string{"redis"}, []Status{StatusOK, StatusFailed, StatusOK}, 0, 3},
		{"exclude=redis", nil, []Status{StatusOK, StatusExcluded, StatusOK}, 0, 2},
		{"exclude=redis&exclude=backend", nil, []Status{StatusOK, StatusExcluded, StatusExcluded}, 0, 1},
		{"exclude=nosuch&exclude=nosuch", []string{"redis"}, []Status{StatusOK, StatusFailed, StatusOK}, 1, 3},
	} {
		t.Run(c.query, func(t *testing.T) {
			clear(ran)
			var args fasthttp.Args
			args.Parse(c.query)
			r := Run(context.Background(), checks, ParseQuery(&args))
			if !reflect.DeepEqual(r.Failed, c.failed) || r.Ready() != (len(c.failed) == 0) || len(r.Warnings) != c.warnings {
				t.Fatalf("failed %v ready %v warnings %v", r.Failed, r.Ready(), r.Warnings)
			}
			for i, res := range r.Results {
				if res.Name != checks[i].Name || res.Status != c.statuses[i] {
					t.Fatalf("result %d = %+v, want %s %s", i, res, checks[i].Name, c.statuses[i])
				}
			}
			if n := ran["draining"] + ran["redis"] + ran["backend"]; n != c.runs {
				t.Fatalf("%d checks ran, want %d (excluded ones are not run)", n, c.runs)
			}
			if c.failed != nil && r.Results[1].Reason != "ping: refused" {
				t.Fatalf("reason %q", r.Results[1].Reason)
			}
			if r.Results[2].Status == StatusOK && r.Results[2].Reason != "10.0.0.2:8081: refused" {
				t.Fatalf("a degraded check's reason is %q", r.Results[2].Reason)
			}
		})
	}
}
