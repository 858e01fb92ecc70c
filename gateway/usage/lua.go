package usage

import (
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// applySource adds one chunk of a flush to its minute and hour buckets,
// once: KEYS[1] is the chunk's guard, set on first application; KEYS[2]
// the minute's hash, KEYS[3] the hour's. ARGV: the guard's TTL in seconds,
// the minute's and the hour's EXPIREAT, then pairs of (vendor field,
// values), each field once (a flush holds one row per vendor): the fields
// are read and written with one HMGET and one HSET per hash. A minute's values are allowed, limited, shadow-limited per
// policy; an hour's add each policy's peak minute demand after them.
// Values travel as space-separated decimals, trailing zeros left out. P is
// MaxPolicies and C numCounters, written in when the script is built.
//
// The stored values stay strings but for the few a row changes: turning a
// number into text is most of a row's cost in Redis (Lua formats every
// number as a float), and a row of a busy minute adds to a value or two.
const applySource = `
if not redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[1]) then return 0 end
local P, C = {{P}}, {{C}}
local function split(s)
  local t, n = {}, 0
  if s then for w in string.gmatch(s, '%d+') do n = n + 1; t[n] = w end end
  return t, n
end
local function join(t, n)
  while n > 0 and t[n] == '0' do n = n - 1 end
  return table.concat(t, ' ', 1, n)
end
local function add(a, b) return string.format('%d', tonumber(a) + tonumber(b)) end
local fields = {}
for i = 4, #ARGV, 2 do fields[#fields + 1] = ARGV[i] end
local ms = redis.call('HMGET', KEYS[2], unpack(fields))
local hs = redis.call('HMGET', KEYS[3], unpack(fields))
local mset, hset = {}, {}
for r = 1, #fields do
  local d, nd = split(ARGV[2 * r + 3])
  local m, nm = split(ms[r])
  local h, nh = split(hs[r])
  local last = math.floor((nd - 1) / C)
  for j = nm + 1, nd do m[j] = '0' end
  if nd > nm then nm = nd end
  for j = nh + 1, P*C + last + 1 do h[j] = '0' end
  if P*C + last + 1 > nh then nh = P*C + last + 1 end
  for j = 1, nd do
    if d[j] ~= '0' then m[j] = add(m[j], d[j]); h[j] = add(h[j], d[j]) end
  end
  for p = 0, last do
    local demand = tonumber(m[p*C+1]) + tonumber(m[p*C+2] or '0')
    if demand > tonumber(h[P*C+p+1]) then h[P*C+p+1] = string.format('%d', demand) end
  end
  mset[2 * r - 1], mset[2 * r] = fields[r], join(m, nm)
  hset[2 * r - 1], hset[2 * r] = fields[r], join(h, nh)
end
redis.call('HSET', KEYS[2], unpack(mset))
redis.call('HSET', KEYS[3], unpack(hset))
redis.call('EXPIREAT', KEYS[2], ARGV[2])
redis.call('EXPIREAT', KEYS[3], ARGV[3])
return 1
`

var applyScript = redis.NewScript(strings.NewReplacer(
	"{{P}}", strconv.Itoa(MaxPolicies), "{{C}}", strconv.Itoa(numCounters)).Replace(applySource))
