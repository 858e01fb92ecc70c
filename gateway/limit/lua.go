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
