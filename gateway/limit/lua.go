package limit

import "github.com/redis/go-redis/v9"

// allowAllSource applies redis_rate's GCRA (the same arithmetic, the same
// clock from Redis TIME, the same stored value: the theoretical arrival
// time in seconds since 2017-01-01) to every key of a request in one call,
// and writes only when every enforced limit allows: a request refused by
// its per-key limit does not charge its vendor, and the reverse.
//
// KEYS are the buckets (one hash slot); ARGV holds four values per key:
// burst, rate, period in seconds, and "1" for a shadow limit (a shadow
// refusal does not block the others and is not charged). The answer holds
// four values per key as redis_rate's does: allowed (0/1), remaining (whole
// requests), retry_after and reset_after (seconds, as strings).
const allowAllSource = `
redis.replicate_commands()
local jan_1_2017 = 1483228800
local now = redis.call("TIME")
now = (now[1] - jan_1_2017) + (now[2] / 1000000)
local out = {}
local new_tats = {}
local all_ok = true
for i = 1, #KEYS do
  local base = (i - 1) * 4
  local burst = tonumber(ARGV[base + 1])
  local rate = tonumber(ARGV[base + 2])
  local period = tonumber(ARGV[base + 3])
  local shadow = ARGV[base + 4] == "1"
  local emission_interval = period / rate
  local burst_offset = emission_interval * burst
  local tat = redis.call("GET", KEYS[i])
  if not tat then
    tat = now
  else
    tat = tonumber(tat)
  end
  tat = math.max(tat, now)
  local new_tat = tat + emission_interval
  local diff = now - (new_tat - burst_offset)
  local remaining = diff / emission_interval
  if remaining < 0 then
    out[#out + 1] = 0
    out[#out + 1] = 0
    out[#out + 1] = tostring(diff * -1)
    out[#out + 1] = tostring(tat - now)
    new_tats[i] = false
    if not shadow then
      all_ok = false
    end
  else
    out[#out + 1] = 1
    out[#out + 1] = math.floor(remaining + 0.000001)
    out[#out + 1] = "-1"
    out[#out + 1] = tostring(new_tat - now)
    new_tats[i] = new_tat
  end
end
if all_ok then
  for i = 1, #KEYS do
    if new_tats[i] then
      local reset_after = new_tats[i] - now
      if reset_after > 0 then
        redis.call("SET", KEYS[i], new_tats[i], "EX", math.ceil(reset_after))
      end
    end
  end
end
return out
`

// allowAll runs allowAllSource: EVALSHA, then EVAL on NOSCRIPT.
var allowAll = redis.NewScript(allowAllSource)

// allowBatchSource applies allowAllSource's GCRA to a whole batch of calls
// in one script run: TIME is read once, each call's buckets are checked in
// the order the calls came, and a bucket that two calls of the batch share
// is charged in that order (the second call sees the first's charge). Each
// call is all-or-nothing as in allowAllSource. Every bucket written is SET
// once, at the end, with its last value; every bucket is read by one MGET.
//
// ARGV is, per call: the number of its keys n, then three values per key:
// the emission interval and the burst offset in seconds (period / rate and
// that times the burst, computed by the caller) and "1" for a shadow limit.
// KEYS are every call's buckets in call order (a bucket may appear more
// than once); with Redis Cluster one script's keys share a slot. The answer
// is, per key in order, four integers: allowed (0/1), remaining, and
// retry_after and reset_after in microseconds (retry_after -1 when allowed).
// Integers rather than allowAllSource's strings: formatting floats is much
// of a small script's cost.
const allowBatchSource = `
local t = redis.call("TIME")
local now = (t[1] - 1483228800) + (t[2] / 1000000)
local tats, dirty, out = {}, {}, {}
local new_tats = {}
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
  local all_ok = true
  for j = 1, n do
    local key = KEYS[k]
    local emission = tonumber(ARGV[a])
    local burst_offset = tonumber(ARGV[a + 1])
    local shadow = ARGV[a + 2] == "1"
    a = a + 3
    local tat = tats[key]
    if not tat or tat < now then tat = now end
    local new_tat = tat + emission
    local diff = now - (new_tat - burst_offset)
    if diff < 0 then
      out[o + 1], out[o + 2], out[o + 3], out[o + 4] = 0, 0, math.floor(-diff * 1000000), math.floor((tat - now) * 1000000)
      new_tats[j] = false
      if not shadow then all_ok = false end
    else
      out[o + 1], out[o + 2], out[o + 3], out[o + 4] = 1, math.floor(diff / emission + 0.000001), -1, math.floor((new_tat - now) * 1000000)
      new_tats[j] = new_tat
    end
    o = o + 4
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
  end
end
for key in pairs(dirty) do
  local reset_after = tats[key] - now
  if reset_after > 0 then
    redis.call("SET", key, tats[key], "EX", math.ceil(reset_after))
  end
end
return out
`

// allowBatch runs allowBatchSource: EVALSHA, then EVAL on NOSCRIPT.
var allowBatch = redis.NewScript(allowBatchSource)
