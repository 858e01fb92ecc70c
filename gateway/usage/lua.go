package usage

import (
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The v3 buckets keep counts by policy name. Each bucket (a hash) holds a
// dictionary, the field "\x01": the names of the policies counted in it,
// space-separated, numbered by their place. A vendor's field holds its
// counts in the dictionary's order: allowed, limited, shadow-limited per
// policy in a minute, and the peak minute's demand after those three in
// an hour. A name enters a bucket's dictionary when first counted there;
// the table's order is nowhere in the data, so that a reordered table
// relabels nothing. Values travel and are stored as space-separated
// decimals, trailing zeros left out.
const dictField = "\x01"

// commonLua are the helpers of both scripts. dictOf reads a bucket's
// dictionary; place returns a name's number in it, adding the name (and
// marking the dictionary to be written) when new.
const commonLua = `
local function split(s)
  local t, n = {}, 0
  if s then for w in string.gmatch(s, '%d+') do n = n + 1; t[n] = w end end
  return t, n
end
local function join(t, n)
  while n > 0 and (t[n] == '0' or t[n] == nil) do n = n - 1 end
  for j = 1, n do if t[j] == nil then t[j] = '0' end end
  return table.concat(t, ' ', 1, n)
end
local function add(a, b)
  if b == nil or b == '0' then return a or '0' end
  if a == nil or a == '0' then return b end
  return string.format('%d', tonumber(a) + tonumber(b))
end
local function dictOf(key)
  local d = {names = {}, index = {}, n = 0, changed = false, key = key}
  local s = redis.call('HGET', key, '\1')
  if s then for w in string.gmatch(s, '%S+') do d.n = d.n + 1; d.names[d.n] = w; d.index[w] = d.n end end
  return d
end
local function place(d, name)
  local i = d.index[name]
  if not i then d.n = d.n + 1; d.names[d.n] = name; d.index[name] = d.n; d.changed = true; i = d.n end
  return i
end
local function saveDict(d)
  if d.changed then redis.call('HSET', d.key, '\1', table.concat(d.names, ' ', 1, d.n)) end
end
-- addInto adds the counts a, l, s of the policy at place i of a bucket's
-- row t (C values a policy: 3 in a minute, 4 in an hour), and returns
-- the row's new allowed + limited of that policy.
local function addInto(t, C, i, a, l, s)
  local b = (i - 1) * C
  t[b + 1], t[b + 2], t[b + 3] = add(t[b + 1], a), add(t[b + 2], l), add(t[b + 3], s)
  return tonumber(t[b + 1] or '0') + tonumber(t[b + 2] or '0')
end
local function raise(t, i, v)
  local j = (i - 1) * 4 + 4
  if v > tonumber(t[j] or '0') then t[j] = string.format('%d', v) end
end
`

// applySource adds one chunk of a flush to its minute and hour buckets,
// once: KEYS[1] is the chunk's guard, set on first application; KEYS[2]
// the minute's hash, KEYS[3] the hour's. ARGV: the guard's TTL in seconds,
// the minute's and the hour's EXPIREAT, the delta's policy names by index
// ("-" for an index without one), then pairs of (vendor field, values:
// allowed, limited, shadow-limited per index), each field once. The fields
// are read and written with one HMGET and one HSET per hash; a value is
// formatted only where a count changed it (Lua formats every number as a
// float, most of a row's cost).
var applySource = `
if not redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[1]) then return 0 end
` + commonLua + `
local names = {}
for w in string.gmatch(ARGV[4], '%S+') do names[#names + 1] = w end
local md, hd = dictOf(KEYS[2]), dictOf(KEYS[3])
local fields = {}
for i = 5, #ARGV, 2 do fields[#fields + 1] = ARGV[i] end
local ms = redis.call('HMGET', KEYS[2], unpack(fields))
local hs = redis.call('HMGET', KEYS[3], unpack(fields))
local mset, hset, n = {}, {}, 0
for r = 1, #fields do
  local d = split(ARGV[2 * r + 4])
  local m, nm = split(ms[r])
  local h, nh = split(hs[r])
  local any = false
  for p = 1, #names do
    local a, l, s = d[3*p - 2] or '0', d[3*p - 1] or '0', d[3*p] or '0'
    if names[p] ~= '-' and (a ~= '0' or l ~= '0' or s ~= '0') then
      any = true
      local mi, hi = place(md, names[p]), place(hd, names[p])
      if mi * 3 > nm then nm = mi * 3 end
      if hi * 4 > nh then nh = hi * 4 end
      local demand = addInto(m, 3, mi, a, l, s)
      addInto(h, 4, hi, a, l, s)
      raise(h, hi, demand)
    end
  end
  if any then
    n = n + 1
    mset[2 * n - 1], mset[2 * n] = fields[r], join(m, nm)
    hset[2 * n - 1], hset[2 * n] = fields[r], join(h, nh)
  end
end
saveDict(md)
saveDict(hd)
if n > 0 then
  redis.call('HSET', KEYS[2], unpack(mset))
  redis.call('HSET', KEYS[3], unpack(hset))
end
redis.call('EXPIREAT', KEYS[2], ARGV[2])
redis.call('EXPIREAT', KEYS[3], ARGV[3])
return 1
`

var applyScript = redis.NewScript(applySource)

// migrateSource moves one bucket of the v2 format (counts by policy index:
// P policies of C counters, and in an hour P peaks after them) into its v3
// bucket under the names given, adding to what the v3 bucket holds (peaks:
// the larger), and deletes the v2 bucket: KEYS[1] the v2 hash, KEYS[2] the
// v3 hash; ARGV[1] the names by index ("-": not kept), ARGV[2] "1" for an
// hour. The v3 bucket expires no earlier than the v2 one did. Returns the
// vendors moved.
var migrateSource = `
` + commonLua + `
local old = redis.call('HGETALL', KEYS[1])
if #old == 0 then return 0 end
local P, C = {{P}}, {{C}}
local hour = ARGV[2] == '1'
local W = 3
if hour then W = 4 end
local names = {}
for w in string.gmatch(ARGV[1], '%S+') do names[#names + 1] = w end
local d = dictOf(KEYS[2])
local moved = 0
for i = 1, #old, 2 do
  local v = split(old[i + 1])
  local t, nt = split(redis.call('HGET', KEYS[2], old[i]))
  local any = false
  for p = 1, math.min(#names, P) do
    local b = (p - 1) * C
    local a, l, s = v[b + 1] or '0', v[b + 2] or '0', v[b + 3] or '0'
    if names[p] ~= '-' and (a ~= '0' or l ~= '0' or s ~= '0') then
      any = true
      local j = place(d, names[p])
      if j * W > nt then nt = j * W end
      addInto(t, W, j, a, l, s)
      if hour then raise(t, j, tonumber(v[P * C + p] or '0')) end
    end
  end
  if any then
    redis.call('HSET', KEYS[2], old[i], join(t, nt))
    moved = moved + 1
  end
end
saveDict(d)
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 and redis.call('PTTL', KEYS[2]) < ttl then redis.call('PEXPIRE', KEYS[2], ttl) end
redis.call('DEL', KEYS[1])
return moved
`

// legacyPolicies is the v2 format's policies per value (the table's
// capacity then).
const legacyPolicies = 8

var migrateScript = redis.NewScript(strings.NewReplacer(
	"{{P}}", strconv.Itoa(legacyPolicies), "{{C}}", strconv.Itoa(numCounters)).Replace(migrateSource))
