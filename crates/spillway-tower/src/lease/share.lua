-- Spillway fleet-wide quotas: one instance's lease, computed atomically in Redis.
--
-- KEYS[1]     the member set (a sorted set: instance id -> expiry, ms of Redis time)
-- KEYS[2..]   one demand hash per shared bucket (instance id -> demand, cost units/s)
-- ARGV[1]     this instance's id
-- ARGV[2]     membership TTL, ms (two lease intervals)
-- ARGV[1+2k], ARGV[2+2k]   global quota and this instance's demand for KEYS[1+k]
--
-- Returns {live members, share for KEYS[2], share for KEYS[3], ...} as strings (a Lua number
-- would be truncated to an integer reply).
--
-- The share is max-min fair over the live instances' demands (Doorman's FAIR_SHARE): demands
-- under the water level are met in full, the rest split what is left equally, so the shares sum
-- to the global quota whenever demand exceeds it. When total demand is below the quota, the
-- spare is split equally on top of every demand, so an instance whose traffic grows has room
-- before its next lease. Every demand counts as at least 1% of an equal split, so an idle
-- instance keeps a small share and answers its first requests without waiting a lease.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local id = ARGV[1]
local ttl = tonumber(ARGV[2])

redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + ttl, id)
redis.call('PEXPIRE', KEYS[1], ttl * 4)
local live = {}
local n = 0
for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  live[m] = true
  n = n + 1
end

local out = { tostring(n) }
for k = 2, #KEYS do
  local global = tonumber(ARGV[2 * k - 1])
  local mine = tonumber(ARGV[2 * k])
  redis.call('HSET', KEYS[k], id, ARGV[2 * k])
  redis.call('PEXPIRE', KEYS[k], ttl * 4)
  local floor = global / n / 100
  local demands = {}
  local total = 0
  local all = redis.call('HGETALL', KEYS[k])
  for i = 1, #all, 2 do
    if live[all[i]] then
      local d = math.max(tonumber(all[i + 1]) or 0, floor)
      demands[#demands + 1] = d
      total = total + d
    else
      redis.call('HDEL', KEYS[k], all[i])
    end
  end
  mine = math.max(mine, floor)
  local share
  if total <= global then
    share = mine + (global - total) / #demands
  else
    table.sort(demands)
    local left = global
    local level = global / #demands
    for i, d in ipairs(demands) do
      level = left / (#demands - i + 1)
      if d > level then
        break
      end
      left = left - d
    end
    share = math.min(mine, level)
  end
  out[#out + 1] = tostring(share)
end
return out
