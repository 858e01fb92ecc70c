package window

import "github.com/redis/go-redis/v9"

// chargeScript decides and charges the windowed checks of the requests of
// a batch (redisconn.Call.Merge: the limiter's transport merges the calls
// of concurrent requests into one run), each apart. KEYS is every
// request's buckets, one request after the other; ARGV is, per request, its
// number of checks, its charge's id (a sliding window's member), the time
// in milliseconds ("" for Redis TIME: tests pass it), then four per check:
// its kind ("q" quota, "s" sliding), its limit, its argument (a quota's
// days, 0 for the UTC month; a sliding window's period in milliseconds)
// and its shadow flag ("1").
//
// A quota reads the counter "<bucket>:q<window start>"; a sliding window
// drops the members at or before now-w and counts the rest. Only when no
// enforced check of the request is full does it charge the request's
// checks: INCR (PEXPIRE the window's end plus an hour on the first), or
// ZADD now and PEXPIRE w. It returns seven numbers per check, the
// requests' in order: allowed (1/0), used after, retry and reset in
// milliseconds, the window in milliseconds, the quota window's start
// (Unix seconds) and charged (1; 2 when the charge found a quota's counter
// absent and created it: the window's first use, or a counter Redis lost;
// 0 not charged).
var chargeScript = redis.NewScript(calendar + `
local out = {}
local k0, a0 = 0, 1
while a0 <= #ARGV do
  local nk = tonumber(ARGV[a0])
  local id = ARGV[a0 + 1]
  settime(ARGV[a0 + 2])
  local st = {}
  local allowed = true
  for i = 1, nk do
    local a = a0 + 2 + (i - 1) * 4
    local key = KEYS[k0 + i]
    local s = {key = key, kind = ARGV[a + 1], limit = tonumber(ARGV[a + 2]), arg = tonumber(ARGV[a + 3])}
    if s.kind == "q" then
      local ws, we = window(s.arg)
      s.qkey = key .. ":q" .. string.format("%d", ws)
      s.start, s.wend, s.win = ws, we, (we - ws) * 1000
      local v = redis.call("GET", s.qkey)
      s.absent = not v
      s.used = tonumber(v or "0")
      s.reset = we * 1000 - now
      s.retry = s.reset
    else
      redis.call("ZREMRANGEBYSCORE", key, "-inf", now - s.arg)
      s.used = redis.call("ZCARD", key)
      s.start, s.win, s.retry, s.reset = 0, s.arg, 0, 0
      if s.used >= s.limit then
        local o = redis.call("ZRANGE", key, s.used - s.limit, s.used - s.limit, "WITHSCORES")
        s.retry = tonumber(o[2]) + s.arg - now
      end
      if s.used > 0 then
        local l = redis.call("ZRANGE", key, -1, -1, "WITHSCORES")
        s.reset = tonumber(l[2]) + s.arg - now
      end
    end
    s.ok = s.used < s.limit
    if not s.ok and ARGV[a + 4] ~= "1" then allowed = false end
    st[i] = s
  end
  for i = 1, nk do
    local s = st[i]
    local charged = 0
    if allowed and s.ok then
      charged = 1
      s.used = s.used + 1
      if s.kind == "q" then
        redis.call("INCR", s.qkey)
        if s.used == 1 then redis.call("PEXPIRE", s.qkey, s.wend * 1000 + 3600000 - now) end
        if s.absent then charged = 2 end
      else
        redis.call("ZADD", s.key, now, id)
        redis.call("PEXPIRE", s.key, s.arg)
        s.reset = s.arg
      end
    end
    local ok = 0
    if s.ok then ok = 1 end
    local n = #out
    out[n + 1], out[n + 2], out[n + 3], out[n + 4] = ok, s.used, s.retry, s.reset
    out[n + 5], out[n + 6], out[n + 7] = s.win, s.start, charged
  end
  k0 = k0 + nk
  a0 = a0 + 3 + 4 * nk
end
return out
`)

// refundScript takes back a charge: KEYS[i] is what was charged (a
// quota's window counter, a sliding window's set), ARGV[1] the charge's id
// and ARGV[1+i] check i's kind. A counter is decremented, never below
// zero, in the window it was charged in (one that has turned and expired
// is left alone), once: unless the counter's mark of the charge's id
// (the counter's name, ":r", the id) is there, which it then sets for an
// hour, so that a call sent again (a Redis Cluster client resends a
// node's pipeline after a timeout) takes back nothing twice; a member is
// removed (removing it again is nothing).
var refundScript = redis.NewScript(`
for i = 1, #KEYS do
  if ARGV[1 + i] == "q" then
    if redis.call("SET", KEYS[i] .. ":r" .. ARGV[1], 1, "NX", "PX", 3600000) then
      local v = tonumber(redis.call("GET", KEYS[i]) or "0")
      if v > 0 then redis.call("DECR", KEYS[i]) end
    end
  else
    redis.call("ZREM", KEYS[i], ARGV[1])
  end
end
return 0
`)

// leaseScript takes slices of quota counters for a gateway's lease, and
// gives back what an expired lease left. KEYS[i] is check i's bucket;
// ARGV[1] is how long a give-back's mark is kept (milliseconds), ARGV[2]
// the time in milliseconds ("" for Redis TIME), then six per check: the quota's days (0: the UTC month), its
// limit, the tokens wanted (0: none), and a lease to give back: its
// window's start (Unix seconds), its unused tokens (0: none) and the
// give-back's id.
//
// What goes back is taken off that window's counter, never below zero,
// once: unless the bucket's mark of its id (the bucket, ":g", the id) is
// there, which it then sets for ARGV[1] (a call sent again, by the
// gateway or by a Cluster client, gives nothing back twice).
// Then the counter of the window holding now grants min(wanted, room,
// max(1, room / 8)) tokens (room: the limit less the count): a slice of
// what is left, so that near the end no gateway holds much of it. It
// returns six numbers per check: the tokens granted, the count after,
// the milliseconds to the window's end, the window in milliseconds, its
// start (Unix seconds), and 1 when the grant created the counter (the
// window's first use, or a counter Redis lost), else 0.
var leaseScript = redis.NewScript(calendar + `
settime(ARGV[2])
local out = {}
for i = 1, #KEYS do
  local a = 2 + (i - 1) * 6
  local days, limit, want = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local back = tonumber(ARGV[a + 5])
  if back > 0 and redis.call("SET", KEYS[i] .. ":g" .. ARGV[a + 6], 1, "NX", "PX", ARGV[1]) then
    local bk = KEYS[i] .. ":q" .. ARGV[a + 4]
    local v = tonumber(redis.call("GET", bk) or "0")
    if v > 0 then redis.call("DECRBY", bk, math.min(v, back)) end
  end
  local ws, we = window(days)
  local key = KEYS[i] .. ":q" .. string.format("%d", ws)
  local v = redis.call("GET", key)
  local used = tonumber(v or "0")
  local room = math.max(limit - used, 0)
  local grant, created = 0, 0
  if want > 0 and room > 0 then
    grant = math.min(want, room, math.max(1, math.floor(room / 8)))
    redis.call("INCRBY", key, grant)
    if not v then
      redis.call("PEXPIRE", key, we * 1000 + 3600000 - now)
      created = 1
    end
    used = used + grant
  end
  local n = #out
  out[n + 1], out[n + 2], out[n + 3] = grant, used, we * 1000 - now
  out[n + 4], out[n + 5], out[n + 6] = (we - ws) * 1000, ws, created
end
return out
`)

// giveBackScript takes n (ARGV[1]) off a quota window's counter (KEYS[1]),
// never below zero: the tokens a lease did not use; once, unless its mark
// (KEYS[2]) is there, which it then sets for ARGV[2] milliseconds.
var giveBackScript = redis.NewScript(`
if not redis.call("SET", KEYS[2], 1, "NX", "PX", ARGV[2]) then return 0 end
local v = tonumber(redis.call("GET", KEYS[1]) or "0")
if v > 0 then redis.call("DECRBY", KEYS[1], math.min(v, tonumber(ARGV[1]))) end
return 0
`)

// calendar begins the scripts that count quotas: settime(arg), which sets
// now, in milliseconds, to arg when not "" (tests), else to Redis TIME
// (read once a run), and window(days), a quota window's start and end in
// Unix seconds at now (days 0: the UTC month). The calendar is
// Howard Hinnant's days_from_civil and civil_from_days.
const calendar = `
local now, servertime
local function settime(arg)
  if arg ~= "" then
    now = tonumber(arg)
    return
  end
  if not servertime then
    local t = redis.call("TIME")
    servertime = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  now = servertime
end

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

`
