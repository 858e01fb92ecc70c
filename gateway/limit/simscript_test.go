package limit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"vendorgate/shared/testredis"
)

// simDB is one Redis node's keys for the simulation: the stored string
// and when it expires (the simulation's ns; 0: never).
type simDB map[string]simVal

type simVal struct {
	s   string
	exp int64
}

// get is GET at now: a key past its expiry is gone.
func (db simDB) get(key string, now int64) (string, bool) {
	v, ok := db[key]
	if ok && v.exp != 0 && now >= v.exp {
		delete(db, key)
		return "", false
	}
	return v.s, ok
}

// simApplied is one refund the script applied: back seconds given back to
// the bucket (0: skipped, the stored TAT below the grant's).
type simApplied struct {
	key   string
	back  float64
	grant float64 // the grant's TAT, seconds since 2017
	// adjust is what the gateway's own refunds took off under the grant
	// (s): the refund is reckoned at grant - adjust.
	adjust float64
	after  float64 // tokens positioned past it
	emis   float64
	// unused is the tokens sent back; applies: the stored TAT was at
	// least the grant's.
	unused  float64
	applies bool
}

// scriptModel is gcraSource in Go, number for number (Lua's numbers are
// doubles, its tonumber is strtod, as strconv.ParseFloat): keys and argv
// as the client sends them, TIME as sec and usec, at now (for expiry). It
// returns the script's answer and the refunds it applied.
func scriptModel(db simDB, now, sec, usec int64, keys, argv []string) ([]int64, []simApplied) {
	num := func(s string) float64 {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			panic(fmt.Sprintf("script argument %q: %v", s, err))
		}
		return f
	}
	tnow := float64(sec-1483228800) + float64(usec)/1000000
	tats := map[string]float64{}
	have := map[string]bool{}
	for _, k := range keys {
		if _, seen := have[k]; seen {
			continue
		}
		s, ok := db.get(k, now)
		f, err := strconv.ParseFloat(s, 64)
		have[k] = ok && err == nil
		tats[k] = f
	}
	dirty := map[string]bool{}
	var out []int64
	var applied []simApplied
	k, a := 0, 0
	for a < len(argv) {
		n := int(num(argv[a]))
		a++
		if n == 0 {
			key := keys[k]
			emission, unused := num(argv[a]), num(argv[a+1])
			g, after := (num(argv[a+2])-num(argv[a+4]))/1000000, num(argv[a+3])
			a += 5
			k++
			ap := simApplied{key: key, grant: num(argv[a-3]) / 1000000, adjust: num(argv[a-1]) / 1000000, after: after, emis: emission, unused: unused}
			back := 0.0
			if stored := tats[key]; have[key] && stored >= g-0.000001 {
				ap.applies = true
				if back = math.Min(unused*emission, g-tnow+after*emission); back > 0 {
					tats[key] = stored - back
					dirty[key] = true
					ap.back = back
				}
			}
			left := 0.0
			if have[key] {
				left = math.Max(tats[key]-tnow, 0)
			}
			out = append(out, int64(math.Max(math.Ceil(back*1000000), 0)), int64(math.Ceil(left*1000000)))
			applied = append(applied, ap)
			continue
		}
		allOK := true
		newTATs := make([]float64, n)
		ok := make([]bool, n)
		for j := 0; j < n; j++ {
			key := keys[k]
			emission, burstOffset := num(argv[a]), num(argv[a+1])
			shadow := argv[a+2] == "1"
			want := num(argv[a+3])
			a += 4
			tat := tats[key]
			if !have[key] || tat < tnow {
				tat = tnow
			}
			newTAT := tat + emission
			diff := tnow - (newTAT - burstOffset)
			if diff < 0 {
				out = append(out, 0, 0, int64(math.Floor(-diff*1000000)), int64(math.Floor((tat-tnow)*1000000)), 0, 0)
				if !shadow {
					allOK = false
				}
			} else {
				rem := math.Floor(diff/emission + 0.000001)
				extra := 0.0
				if want > 1 {
					extra = math.Min(want-1, math.Floor(rem/4))
				}
				newTAT += extra * emission
				out = append(out, 1, int64(rem-extra), -1, int64(math.Floor((newTAT-tnow)*1000000)), int64(1+extra), int64(math.Floor(newTAT*1000000)))
				newTATs[j], ok[j] = newTAT, true
			}
			k++
		}
		for j := 0; j < n; j++ {
			if !allOK {
				out[len(out)-6*(n-j)+4] = 0
			} else if ok[j] {
				key := keys[k-n+j]
				tats[key], have[key], dirty[key] = newTATs[j], true, true
			}
		}
	}
	for key := range dirty {
		reset := tats[key] - tnow
		if reset <= 0 {
			delete(db, key)
			continue
		}
		us := math.Floor(tats[key]*1000000 + 0.5)
		whole := math.Floor(us / 1000000)
		db[key] = simVal{s: fmt.Sprintf("%d.%06d", int64(whole), int64(us-whole*1000000)), exp: now + int64(math.Ceil(reset))*1e9}
	}
	return out, applied
}

// argStrings formats script arguments as the client writes them.
func argStrings(args []any) []string {
	out := make([]string, len(args))
	for i, v := range args {
		switch v := v.(type) {
		case float64:
			out[i] = strconv.FormatFloat(v, 'f', -1, 64)
		case int:
			out[i] = strconv.Itoa(v)
		case int64:
			out[i] = strconv.FormatInt(v, 10)
		case string:
			out[i] = v
		default:
			panic(fmt.Sprintf("script argument of type %T", v))
		}
	}
	return out
}

// timedSource is gcraSource with TIME read from its last two arguments
// (seconds, microseconds): the script the simulation's model stands for,
// run by a real Redis at a time the test chooses.
func timedSource(t *testing.T) string {
	t.Helper()
	src := gcraSource
	for _, r := range [][2]string{
		{`local t = redis.call("TIME")`, `local t = {tonumber(ARGV[#ARGV - 1]), tonumber(ARGV[#ARGV])}`},
		{`local nargv = #ARGV`, `local nargv = #ARGV - 2`},
	} {
		if strings.Count(src, r[0]) != 1 {
			t.Fatalf("the script no longer reads %q once", r[0])
		}
		src = strings.Replace(src, r[0], r[1], 1)
	}
	return src
}

// The model of the script answers and stores what the script does, in a
// real redis-server with TIME passed in: random buckets (absent, in the
// past, in the future), batches of admissions (shadow, several keys, a
// key twice, leases asked, requests costing several tokens) and refunds
// (capped, skipped, past the grant, reckoned below it),
// emission intervals that are no whole number of microseconds.
func TestScriptModelMatchesScript(t *testing.T) {
	rs := testredis.Start(t)
	c := redis.NewClient(&redis.Options{Addr: rs.Addr(), MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	script := redis.NewScript(timedSource(t))
	cases := 3000
	if testing.Short() {
		cases = 500
	}
	rng := rand.New(rand.NewSource(1))
	emissions := []float64{0.5, 60.0 / 7, 1.0 / 3, 0.01, 60.0 / 120, 3600.0 / 1000, 1.0 / 7, 0.000999}
	for i := 0; i < cases; i++ {
		sec, usec := int64(1795000000+rng.Intn(1000000)), int64(rng.Intn(1000000))
		tnow := float64(sec-1483228800) + float64(usec)/1000000
		names := []string{"rate:a", "rate:b", "rate:c"}
		db := simDB{}
		if err := c.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		for _, k := range names {
			if rng.Intn(4) == 0 {
				continue // absent
			}
			us := math.Floor((tnow+(rng.Float64()*20-5))*1000000 + 0.5)
			whole := math.Floor(us / 1000000)
			v := fmt.Sprintf("%d.%06d", int64(whole), int64(us-whole*1000000))
			db[k] = simVal{s: v}
			if err := c.Set(ctx, k, v, 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
		var keys []string
		var args []any
		for calls := 1 + rng.Intn(4); calls > 0; calls-- {
			e := emissions[rng.Intn(len(emissions))]
			if rng.Intn(3) == 0 { // a refund
				keys = append(keys, names[rng.Intn(len(names))])
				g := int64(math.Floor((tnow + rng.Float64()*10 - 2) * 1000000))
				if rng.Intn(3) == 0 {
					if s, ok := db[keys[len(keys)-1]]; ok { // the stored TAT itself
						f, _ := strconv.ParseFloat(s.s, 64)
						g = int64(math.Round(f * 1000000))
					}
				}
				s := 0 // what the gateway's own refunds took off under the grant
				if rng.Intn(3) == 0 {
					s = rng.Intn(3000000)
				}
				args = append(args, 0, e, rng.Intn(20), g, rng.Intn(3), s)
				continue
			}
			n := 1 + rng.Intn(3)
			args = append(args, n)
			for j := 0; j < n; j++ {
				keys = append(keys, names[rng.Intn(len(names))])
				shadow := "0"
				if rng.Intn(4) == 0 {
					shadow = "1"
				}
				burst := 1 + rng.Intn(20)
				cost := 1 + rng.Intn(3) // a request's tokens: its emission interval is cost × a token's
				args = append(args, e*float64(cost), e*float64(burst), shadow, 1+rng.Intn(16))
			}
		}
		want, _ := scriptModel(db, 0, sec, usec, keys, argStrings(args))
		got, err := script.Run(ctx, c, keys, append(args, sec, usec)...).Int64Slice()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatalf("case %d: %v", i, err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("case %d: keys %v args %v at %d.%06d:\nscript %v\nmodel  %v", i, keys, args, sec, usec, got, want)
		}
		for _, k := range names {
			v, err := c.Get(ctx, k).Result()
			if errors.Is(err, redis.Nil) {
				v = ""
			} else if err != nil {
				t.Fatal(err)
			}
			m, ok := db[k]
			if v != m.s || ok != (v != "") {
				t.Fatalf("case %d: keys %v args %v at %d.%06d: %s stored %q, model %q", i, keys, args, sec, usec, k, v, m.s)
			}
			if !ok {
				continue
			}
			d := c.PTTL(ctx, k).Val() // negative: no expiry
			pttl := d.Milliseconds()
			if m.exp == 0 && d >= 0 || m.exp != 0 && (pttl > m.exp/1e6 || pttl < m.exp/1e6-1000) {
				t.Fatalf("case %d: %s expires in %d ms, model %d ms", i, k, pttl, m.exp/1e6)
			}
		}
	}
}
