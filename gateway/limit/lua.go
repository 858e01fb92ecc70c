package limit

import (
	"github.com/redis/go-redis/v9"

	"vendorgate/gateway/limit/redisconn"
	"vendorgate/gateway/policy"
)

// gcraSource is the limiter's one Redis script: redis_rate's GCRA (the same
// arithmetic, the same clock from Redis TIME, the same stored value: the
// theoretical arrival time in seconds since 2017-01-01 under "rate:<bucket>",
// so that gateways of an older release share the buckets during a rolling
// upgrade) applied to a whole batch of calls in one run, with leases and
// their refunds.
//
// TIME is read once; each call's buckets are checked in the order the calls
// came, and a bucket that two calls of the batch share is charged in that
// order (the second call sees the first's charge). Every bucket is read by
// one MGET and every bucket written is SET once, at the end, with its last
// value and an expiry at its reset (deleted when a refund left it whole:
// a missing bucket is a whole one).
//
// ARGV is, per call, the number of its keys n, then for an admission
// (n > 0) four values per key: the emission interval of one request and
// the burst offset in seconds (period / rate times the request's cost in
// tokens, and period / rate times the burst, computed by the caller: GCRA
// with a cost, a request moving the TAT by cost × period / rate), "1" for
// a shadow limit, and want, the requests asked for (1: the request's own;
// more: its own and a lease of the rest, whole requests of the cost). The
// answer's remaining and granted count requests of the cost. A call is
// all-or-nothing: when an enforced bucket cannot take the request's own
// token, nothing of the call is written (a shadow refusal blocks nothing and
// is not charged). An allowed bucket is charged its own token and as many of
// the others as fit now, at most a quarter of what it has left after its own
// (the last tokens of a window are never leased in bulk: near exhaustion a
// lease is one token, the request's own).
//
// n = 0 is a refund of one key, five values: a request's emission
// interval in seconds, the unused requests u (a lease's, or a failed
// request's own: Refund), the bucket's TAT after the grant in microseconds
// since 2017 (g), a of the u that a later grant of the same lease charged
// past g, and s, in microseconds, what this gateway's own refunds of the
// bucket took off since the grant: refunds of grants charged before it,
// sent after its answer came (see ownRefunds). Those lowered the TAT under
// the grant's charge by exactly s (a GCRA TAT is its charges added up), so
// the charge now ends at g - s, and the refund is reckoned there: the
// bucket's TAT goes back by min(u × emission, g - s - now + a × emission)
// (what of the lease is still in the future, a part of a token included:
// a floor would keep up to a token charged for nothing), only when the
// stored TAT is not below g - s: a bucket that expired, was flushed or
// lost with a restart or a failover keeps what it has, and a later charge
// by another gateway (the stored TAT past g - s) stays charged, since the
// refund takes off only what of its own charge lies ahead of now. s is 0
// unless this gateway knows it exactly (the scripts' own answers): a
// refund answers two integers, the microseconds it took off (rounded up;
// 0 when skipped), for the next refunds' s, and how far the bucket's TAT
// then lies ahead of now, in microseconds (0: whole or missing), past
// which no charge it lowered has anything left to give back.
//
// KEYS are every call's buckets in call order (a bucket may appear more
// than once); with Redis Cluster one script's keys share a slot. The answer
// is, per admission key in order, six integers: allowed (0/1), remaining
// after the grant, retry_after and reset_after in microseconds (retry_after
// -1 when allowed), the tokens granted (0 when refused) and the TAT after
// the grant in microseconds since 2017 (less reset_after: its run's TIME,
// within a microsecond). Integers rather than strings: formatting floats
// is much of a small script's cost.
const gcraSource = `
local t = redis.call("TIME")
local now = (t[1] - 1483228800) + (t[2] / 1000000)
local tats, dirty, out = {}, {}, {}
local new_tats, extras = {}, {}
local uniq = {}
for i = 1, #KEYS do
  local key = KEYS[i]
  if tats[key] == nil then
    tats[key] = false
    uniq[#uniq + 1] = key
  end
end
local vals = redis.call("MGET", unpack(uniq))
for i = 1, #uniq do
  tats[uniq[i]] = tonumber(vals[i]) or false
end
local o, k, a = 0, 1, 1
local nargv = #ARGV
while a <= nargv do
  local n = tonumber(ARGV[a])
  a = a + 1
  if n == 0 then
    local key = KEYS[k]
    local emission = tonumber(ARGV[a])
    local unused = tonumber(ARGV[a + 1])
    local g = (tonumber(ARGV[a + 2]) - tonumber(ARGV[a + 4])) / 1000000
    local after = tonumber(ARGV[a + 3])
    a = a + 5
    k = k + 1
    local stored = tats[key]
    local back = 0
    if stored and stored >= g - 0.000001 then
      back = math.min(unused * emission, g - now + after * emission)
      if back > 0 then
        tats[key] = stored - back
        dirty[key] = true
      end
    end
    local left = 0
    if stored then left = math.max(tats[key] - now, 0) end
    out[o + 1], out[o + 2] = math.max(math.ceil(back * 1000000), 0), math.ceil(left * 1000000)
    o = o + 2
  else
    local all_ok = true
    for j = 1, n do
      local key = KEYS[k]
      local emission = tonumber(ARGV[a])
      local burst_offset = tonumber(ARGV[a + 1])
      local shadow = ARGV[a + 2] == "1"
      local want = tonumber(ARGV[a + 3])
      a = a + 4
      local tat = tats[key]
      if not tat or tat < now then tat = now end
      local new_tat = tat + emission
      local diff = now - (new_tat - burst_offset)
      if diff < 0 then
        out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6] = 0, 0, math.floor(-diff * 1000000), math.floor((tat - now) * 1000000), 0, 0
        new_tats[j] = false
        if not shadow then all_ok = false end
      else
        local rem = math.floor(diff / emission + 0.000001)
        local extra = 0
        if want > 1 then extra = math.min(want - 1, math.floor(rem / 4)) end
        new_tat = new_tat + extra * emission
        out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6] = 1, rem - extra, -1, math.floor((new_tat - now) * 1000000), 1 + extra, math.floor(new_tat * 1000000)
        new_tats[j] = new_tat
      end
      o = o + 6
      k = k + 1
    end
    if all_ok then
      for j = 1, n do
        local v = new_tats[j]
        if v then
          local key = KEYS[k - n - 1 + j]
          tats[key] = v
          dirty[key] = true
        end
      end
    else
      for j = 1, n do
        out[o - 6 * (n - j) - 1] = 0
      end
    end
  end
end
for key in pairs(dirty) do
  local reset_after = tats[key] - now
  if reset_after > 0 then
    local us = math.floor(tats[key] * 1000000 + 0.5)
    redis.call("SET", key, string.format("%d.%06d", math.floor(us / 1000000), us % 1000000), "EX", string.format("%d", math.ceil(reset_after)))
  else
    redis.call("DEL", key)
  end
end
return out
`

// gcraScript runs gcraSource: EVALSHA, then EVAL on NOSCRIPT.
var gcraScript = redis.NewScript(gcraSource)

// valuesPerKey is how many integers the script answers per admission key.
const valuesPerKey = 6

// argsPerKey is how many ARGV values an admission key takes (setArgs).
const argsPerKey = 4

// A request's checks fit one call of the transport.
var (
	_ [redisconn.MaxKeys - policy.MaxChecks]struct{}
	_ [redisconn.MaxArgs - argsPerKey*policy.MaxChecks]struct{}
)

// setArgs writes one admission key's four script arguments into dst: a
// request's emission interval is its cost's.
func setArgs(dst []any, r policy.Rate, want int) {
	shadow := "0"
	if r.Shadow {
		shadow = "1"
	}
	emission := r.Period.Seconds() / float64(r.Limit) // a token's
	dst[0], dst[1], dst[2], dst[3] = emission*float64(r.Tokens()), emission*float64(r.EffectiveBurst()), shadow, max(want, 1)
}
