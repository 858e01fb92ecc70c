package window

import "github.com/redis/go-redis/v9"

// chargeScript decides and charges one request's windowed checks in one
// call. KEYS[i] is check i's bucket. ARGV[1] is the charge's id (a sliding
// window's member), ARGV[2] the time in milliseconds ("" for Redis TIME:
// tests pass it), then four per check: its kind ("q" quota, "s" sliding),
// its limit, its argument (a quota's days, 0 for the UTC month; a sliding
// window's period in milliseconds) and its shadow flag ("1").
//
// A quota reads the counter "<bucket>:q<window start>"; a sliding window
// drops the members at or before now-w and counts the rest. Only when no
// enforced check is full does it charge: INCR (PEXPIRE the window's end
// plus an hour on the first), or ZADD now and PEXPIRE w. It returns seven
// numbers per check: allowed (1/0), used after, retry and reset in
// milliseconds, the window in milliseconds, the quota window's start
// (Unix seconds) and charged (1; 2 when the charge found a quota's counter
// absent and created it: the window's first use, or a counter Redis lost;
// 0 not charged).
//
// The calendar is Howard Hinnant's days_from_civil and civil_from_days.
var chargeScript = redis.NewScript(`
local now
if ARGV[2] ~= "" then
  now = tonumber(ARGV[2])
else
  local t = redis.call("TIME")
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local id = ARGV[1]

local function days_from_civil(y, m, d)
  if m <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local mp = (m + 9) % 12
  local doy = math.floor((153 * mp + 2) / 5) + d - 1
  local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy
  return era * 146097 + doe - 719468
end

local function civil_from_days(z)
  z = z + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local y = yoe + era * 400
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local m = mp < 10 and mp + 3 or mp - 9
  if m <= 2 then y = y + 1 end
  return y, m
end

local function window(days)
  local s = math.floor(now / 1000)
  if days == 0 then
    local y, m = civil_from_days(math.floor(s / 86400))
    local ny, nm = y, m + 1
    if nm > 12 then ny, nm = y + 1, 1 end
    return days_from_civil(y, m, 1) * 86400, days_from_civil(ny, nm, 1) * 86400
  end
  local span = days * 86400
  local start = math.floor(s / span) * span
  return start, start + span
end

local st = {}
local allowed = true
for i = 1, #KEYS do
  local a = 2 + (i - 1) * 4
  local s = {kind = ARGV[a + 1], limit = tonumber(ARGV[a + 2]), arg = tonumber(ARGV[a + 3])}
  if s.kind == "q" then
    local ws, we = window(s.arg)
    s.key = KEYS[i] .. ":q" .. string.format("%d", ws)
    s.start, s.wend, s.win = ws, we, (we - ws) * 1000
    local v = redis.call("GET", s.key)
    s.absent = not v
    s.used = tonumber(v or "0")
    s.reset = we * 1000 - now
    s.retry = s.reset
  else
    redis.call("ZREMRANGEBYSCORE", KEYS[i], "-inf", now - s.arg)
    s.used = redis.call("ZCARD", KEYS[i])
    s.start, s.win, s.retry, s.reset = 0, s.arg, 0, 0
    if s.used >= s.limit then
      local o = redis.call("ZRANGE", KEYS[i], s.used - s.limit, s.used - s.limit, "WITHSCORES")
      s.retry = tonumber(o[2]) + s.arg - now
    end
    if s.used > 0 then
      local l = redis.call("ZRANGE", KEYS[i], -1, -1, "WITHSCORES")
      s.reset = tonumber(l[2]) + s.arg - now
    end
  end
  s.ok = s.used < s.limit
  if not s.ok and ARGV[a + 4] ~= "1" then allowed = false end
  st[i] = s
end

local out = {}
for i = 1, #KEYS do
  local s = st[i]
  local charged = 0
  if allowed and s.ok then
    charged = 1
    s.used = s.used + 1
    if s.kind == "q" then
      redis.call("INCR", s.key)
      if s.used == 1 then redis.call("PEXPIRE", s.key, s.wend * 1000 + 3600000 - now) end
      if s.absent then charged = 2 end
    else
      redis.call("ZADD", KEYS[i], now, id)
      redis.call("PEXPIRE", KEYS[i], s.arg)
      s.reset = s.arg
    end
  end
  local ok = 0
  if s.ok then ok = 1 end
  local n = #out
  out[n + 1], out[n + 2], out[n + 3], out[n + 4] = ok, s.used, s.retry, s.reset
  out[n + 5], out[n + 6], out[n + 7] = s.win, s.start, charged
end
return out
`)

// refundScript takes back a charge: KEYS[i] is what was charged (a
// quota's window counter, a sliding window's set), ARGV[1] the charge's id
// and ARGV[1+i] check i's kind. A counter is decremented, never below
// zero, in the window it was charged in (one that has turned and expired
// is left alone); a member is removed.
var refundScript = redis.NewScript(`
for i = 1, #KEYS do
  if ARGV[1 + i] == "q" then
    local v = tonumber(redis.call("GET", KEYS[i]) or "0")
    if v > 0 then redis.call("DECR", KEYS[i]) end
  else
    redis.call("ZREM", KEYS[i], ARGV[1])
  end
end
return 0
`)
