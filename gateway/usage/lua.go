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
// values). A minute's values are allowed, limited, shadow-limited per
// policy; an hour's add each policy's peak minute demand after them.
// Values travel as space-separated decimals, trailing zeros left out. P is
// MaxPolicies and C numCounters, written in when the script is built.
const applySource = `
if not redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[1]) then return 0 end
local P, C = {{P}}, {{C}}
local function parse(s, n)
  local t, i = {}, 1
  if s then for w in string.gmatch(s, '%d+') do t[i] = tonumber(w); i = i + 1 end end
  for j = i, n do t[j] = 0 end
  return t
end
local function join(t, n)
  while n > 0 and t[n] == 0 do n = n - 1 end
  local parts = {}
  for j = 1, n do parts[j] = string.format('%d', t[j]) end
  return table.concat(parts, ' ')
end
for i = 4, #ARGV, 2 do
  local f, d = ARGV[i], parse(ARGV[i+1], P*C)
  local m = parse(redis.call('HGET', KEYS[2], f), P*C)
  local h = parse(redis.call('HGET', KEYS[3], f), P*C + P)
  for j = 1, P*C do m[j] = m[j] + d[j]; h[j] = h[j] + d[j] end
  for p = 0, P-1 do
    local demand = m[p*C+1] + m[p*C+2]
    if demand > h[P*C+p+1] then h[P*C+p+1] = demand end
  end
  redis.call('HSET', KEYS[2], f, join(m, P*C))
  redis.call('HSET', KEYS[3], f, join(h, P*C + P))
end
redis.call('EXPIREAT', KEYS[2], ARGV[2])
redis.call('EXPIREAT', KEYS[3], ARGV[3])
return 1
`

var applyScript = redis.NewScript(strings.NewReplacer(
	"{{P}}", strconv.Itoa(MaxPolicies), "{{C}}", strconv.Itoa(numCounters)).Replace(applySource))
