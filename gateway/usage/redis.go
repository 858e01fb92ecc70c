package usage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// How long buckets are kept: minutes for the last hour, hours for 25.
const (
	minuteBuckets = 60
	hourBuckets   = 25
)

// chunkRows bounds the vendors one script call adds, so that no call holds
// Redis for long: a flush of many vendors is several calls in one pipeline,
// and limiter calls of other connections run between them.
const chunkRows = 100

// keyTag keeps every usage key in one Redis Cluster slot: a flush's chunks
// and a read's buckets each go to one node. "v3": counts by policy name
// (lua.go); v2 held them by the policy's index in the table, 8 policies a
// value (an hour's 8 peaks after them), and Migrate moves a v2 bucket into
// v3 under the names of the table as it is. The first format held 4.
const (
	keyTag    = "vgu:{usage}:v3:"
	legacyTag = "vgu:{usage}:v2:"
)

// RedisOptions configures a Redis store.
type RedisOptions struct {
	// Client should be the store's own (its own pool), so that flushes and
	// reads never wait for a limiter call's connection or delay one.
	Client redis.UniversalClient
	// Timeout bounds one Apply or Read. Required.
	Timeout time.Duration
	// GuardTTL is how long a flush is remembered as applied; a retry later
	// than that would count it twice: longer than the Recorder keeps a
	// failed flush (Options.MaxAge). At least 1s.
	GuardTTL time.Duration
}

// Redis is the Store every replica sharing one Redis writes to.
type Redis struct {
	o RedisOptions
}

// NewRedis returns a Redis store; it refuses options it cannot use.
func NewRedis(o RedisOptions) (*Redis, error) {
	if o.Client == nil {
		return nil, errors.New("usage: redis client required")
	}
	switch {
	case o.Timeout <= 0:
		return nil, fmt.Errorf("usage: timeout %s must be positive", o.Timeout)
	case o.GuardTTL < time.Second:
		return nil, fmt.Errorf("usage: guard ttl %s must be at least 1s (Redis keeps it in seconds)", o.GuardTTL)
	}
	return &Redis{o: o}, nil
}

func minuteKey(m int64) string { return keyTag + "m:" + strconv.FormatInt(m, 10) }
func hourKey(h int64) string   { return keyTag + "h:" + strconv.FormatInt(h, 10) }

// Apply sends every chunk of every delta in one pipeline. A delta whose
// chunks all answered (applied now or before) is done; one that did not is
// reported failed and will be retried whole: its applied chunks are
// skipped then by their guards. A server without the script (first use,
// or after SCRIPT FLUSH) gets it loaded and the pipeline once more, which
// the guards make safe.
func (s *Redis) Apply(ds []*Delta) []error {
	ctx, cancel := context.WithTimeout(context.Background(), s.o.Timeout)
	defer cancel()
	cmds, owner := s.send(ctx, ds)
	for _, c := range cmds {
		if redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
			if err := applyScript.Load(ctx, s.o.Client).Err(); err != nil {
				return fill(len(ds), fmt.Errorf("usage: load script: %w", err))
			}
			cmds, owner = s.send(ctx, ds)
			break
		}
	}
	var errs []error
	for j, c := range cmds {
		if cerr := c.Err(); cerr != nil {
			if errs == nil {
				errs = make([]error, len(ds))
			}
			if errs[owner[j]] == nil {
				errs[owner[j]] = fmt.Errorf("usage: flush %s: %w", ds[owner[j]].ID, cerr)
			}
		}
	}
	return errs
}

// send pipelines one script call per chunk of every delta; owner[j] is the
// delta of cmds[j]. Each command carries its own error.
func (s *Redis) send(ctx context.Context, ds []*Delta) (cmds []*redis.Cmd, owner []int) {
	pipe := s.o.Client.Pipeline()
	guard := strconv.FormatInt(int64(s.o.GuardTTL/time.Second), 10)
	for i, d := range ds {
		mExp := strconv.FormatInt((d.Minute+1)*60+minuteBuckets*60+60, 10)
		hour := d.Minute / 60
		hExp := strconv.FormatInt((hour+1+hourBuckets)*3600, 10)
		names := namesArg(d)
		for c, start := 0, 0; start < len(d.Rows); c, start = c+1, start+chunkRows {
			rows := d.Rows[start:min(start+chunkRows, len(d.Rows))]
			args := make([]any, 0, 4+2*len(rows))
			args = append(args, guard, mExp, hExp, names)
			for r := range rows {
				args = append(args, field(rows[r].Vendor), encodeRow(&rows[r]))
			}
			keys := []string{keyTag + "f:" + d.ID + ":" + strconv.Itoa(c), minuteKey(d.Minute), hourKey(hour)}
			cmds = append(cmds, applyScript.EvalSha(ctx, pipe, keys, args...))
			owner = append(owner, i)
		}
	}
	_, _ = pipe.Exec(ctx)
	return cmds, owner
}

// namesArg is a delta's policy names by index as the scripts read them:
// space-separated, "-" for an index without a name, up to the last named.
func namesArg(d *Delta) string {
	n := 0
	for p := range MaxPolicies {
		if d.name(p) != "" {
			n = p + 1
		}
	}
	var b strings.Builder
	for p := range n {
		if p > 0 {
			b.WriteByte(' ')
		}
		if name := d.name(p); name != "" {
			b.WriteString(name)
		} else {
			b.WriteByte('-')
		}
	}
	return b.String()
}

func fill(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// Read fetches the buckets in one pipeline.
func (s *Redis) Read(minutes, hours []int64) (Buckets, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.o.Timeout)
	defer cancel()
	pipe := s.o.Client.Pipeline()
	mc := make([]*redis.MapStringStringCmd, len(minutes))
	for i, m := range minutes {
		mc[i] = pipe.HGetAll(ctx, minuteKey(m))
	}
	hc := make([]*redis.MapStringStringCmd, len(hours))
	for i, h := range hours {
		hc[i] = pipe.HGetAll(ctx, hourKey(h))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Buckets{}, fmt.Errorf("usage: read buckets: %w", err)
	}
	b := Buckets{Minutes: make(map[int64]map[string]Values), Hours: make(map[int64]map[string]Values)}
	for i, c := range mc {
		if dst := bucketOf(c.Val(), false); dst != nil {
			b.Minutes[minutes[i]] = dst
		}
	}
	for i, c := range hc {
		if dst := bucketOf(c.Val(), true); dst != nil {
			b.Hours[hours[i]] = dst
		}
	}
	return b, nil
}

// bucketOf reads one v3 bucket: its dictionary, then each vendor's counts
// by name; nil when the bucket is empty.
func bucketOf(h map[string]string, hour bool) map[string]Values {
	names := strings.Fields(h[dictField])
	if len(names) == 0 {
		return nil
	}
	w := numCounters
	if hour {
		w++
	}
	dst := make(map[string]Values, len(h)-1)
	all := make([]uint64, w*len(names))
	for f, v := range h {
		if f == dictField {
			continue
		}
		clear(all)
		decode(v, all)
		vals := make(Values, 2)
		for i, name := range names {
			c := Counts{Allowed: all[i*w+cAllowed], Limited: all[i*w+cLimited], ShadowLimited: all[i*w+cShadow]}
			if hour {
				c.Peak = all[i*w+cPeak]
			}
			if !c.zero() {
				vals[name] = c
			}
		}
		dst[vendorOf(f)] = vals
	}
	return dst
}

// Migrate moves the usage buckets of the v2 format (counts by the policy's
// index in the table) still kept (the last 61 minutes and 26 hours) into
// the v3 buckets, under names[i] for index i ("" drops the index), adding
// to what v3 holds, and deletes them: after an upgrade, the counts an older
// gateway stored read under the names of the table that counted them, as
// long as the table's rows kept their order across the upgrade (they
// were appended, never reordered, when usage was kept by index). One
// script call per bucket; a bucket already moved is not there to move
// again. Returns the vendor rows moved.
func (s *Redis) Migrate(names []string) (int, error) {
	if len(names) > legacyPolicies {
		names = names[:legacyPolicies]
	}
	arg := namesArg(&Delta{Names: names})
	ctx, cancel := context.WithTimeout(context.Background(), max(s.o.Timeout, 10*time.Second))
	defer cancel()
	nowMin := time.Now().Unix() / 60
	moved := 0
	run := func(oldKey, newKey, hour string) error {
		n, err := migrateScript.Run(ctx, s.o.Client, []string{oldKey, newKey}, arg, hour).Int()
		if err != nil {
			return fmt.Errorf("usage: migrate %s: %w", oldKey, err)
		}
		moved += n
		return nil
	}
	for m := nowMin - minuteBuckets - 1; m <= nowMin; m++ {
		if err := run(legacyTag+"m:"+strconv.FormatInt(m, 10), minuteKey(m), "0"); err != nil {
			return moved, err
		}
	}
	for h := nowMin/60 - hourBuckets - 1; h <= nowMin/60; h++ {
		if err := run(legacyTag+"h:"+strconv.FormatInt(h, 10), hourKey(h), "1"); err != nil {
			return moved, err
		}
	}
	return moved, nil
}

// field is a vendor's hash field: a UUID as a zero byte and its 16 bytes
// (less than half the memory of its text in every bucket), anything else
// as it is (a vendor id never starts with a zero byte).
func field(vendor string) string {
	if u, err := uuid.Parse(vendor); err == nil && len(vendor) == 36 {
		return "\x00" + string(u[:])
	}
	return vendor
}

func vendorOf(f string) string {
	if len(f) == 17 && f[0] == 0 {
		var u uuid.UUID
		copy(u[:], f[1:])
		return u.String()
	}
	return f
}

// encode writes values as the script reads them.
// encodeRow is encode of row's counts.
func encodeRow(row *Row) string {
	v := row.values()
	return encode(v[:])
}

func encode(v []uint64) string {
	n := len(v)
	for n > 0 && v[n-1] == 0 {
		n--
	}
	b := make([]byte, 0, 4*n)
	for i := 0; i < n; i++ {
		if i > 0 {
			b = append(b, ' ')
		}
		b = strconv.AppendUint(b, v[i], 10)
	}
	return string(b)
}

func decode(s string, dst []uint64) {
	i := 0
	for _, w := range strings.Fields(s) {
		if i == len(dst) {
			return
		}
		n, _ := strconv.ParseUint(w, 10, 64)
		dst[i] = n
		i++
	}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

// newID names a Recorder's flushes: random, so that replicas and restarts
// never share a flush id.
func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
