-- Spillway fleet-wide quotas: one instance's lease, computed atomically in Redis.
--
-- KEYS[1]     the member set (a sorted set: instance id -> expiry, ms of Redis time)
-- KEYS[2..]   one demand hash per shared bucket (instance id -> demand, cost units/s)
-- ARGV[1]     this instance's id
-- ARGV[2]     membership TTL, ms (two lease intervals)
-- ARGV[3]     how long a kept water level may be reused, ms (0: computed afresh, and kept)
-- ARGV[2+2k], ARGV[3+2k]   global quota and this instance's demand for KEYS[1+k], as
--             'DEMAND' or 'DEMAND:ASK'; a negative demand: this instance leaves the bucket (idle
--             here), and gets the share of a demand of 0. ASK (at least the demand) is what the
--             instance asks for itself: its demand's upper bound, for the noise of a few arrivals
--             per interval (spillway_core::quota::DemandEstimate::upper). The level is computed
--             over the demands; this instance's share is the ask up to the level (over the
--             quota), or the demand plus the spare or the ask, whichever is more (within it).
--
-- A client sends only the buckets it has traffic for (and each idle one once, as leaving), so
-- a call costs what its busy buckets cost; a bucket nobody sends expires with its hash after
-- four intervals, and one an instance stopped sending no longer counts it. The answer for a
-- leaving bucket is the floor; the client keeps the rate it had (spillway_tower::lease::
-- IDLE_AFTER says why) until its traffic returns and the next lease counts it again.
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
--
-- Why the level is reused: computing it reads every instance's demand, so with every instance
-- computing it at every call the store's work per interval grows with buckets x instances^2
-- (100 customers x 4 criticalities x 20 instances: 26 ms per call). The level (and the floor,
-- and the spare per demand) is kept in the bucket's hash under the field '~level' and reused
-- for ARGV[3] ms (the lease client passes half an interval, or 0 when its demand has just
-- shifted, so that the shift is shared out at once), so each bucket is computed about twice per
-- interval whatever the fleet's size; each call then only stores its demand and applies the
-- level to it, as spillway_core::quota::fair::FairLevel does.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local id = ARGV[1]
local ttl = tonumber(ARGV[2])
local reuse = tonumber(ARGV[3]) or 0
local LEVEL = '~level'

redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + ttl, id)
redis.call('PEXPIRE', KEYS[1], ttl * 4)
local n = redis.call('ZCARD', KEYS[1])
local live = nil

local out = { tostring(n) }
for k = 2, #KEYS do
  local global = tonumber(ARGV[2 * k])
  local d, a = string.match(ARGV[2 * k + 1], '^([^:]+):(.+)$')
  local mine = tonumber(d or ARGV[2 * k + 1]) or 0
  local ask = tonumber(a) or mine
  if mine < 0 then
    mine, ask = 0, 0
    redis.call('HDEL', KEYS[k], id)
  else
    redis.call('HSET', KEYS[k], id, d or ARGV[2 * k + 1])
  end
  local floor, level, spare
  if reuse > 0 then
    local cached = redis.call('HGET', KEYS[k], LEVEL)
    if cached then
      local at, f, l, s = string.match(cached, '^(%S+) (%S+) (%S+) (%S+)$')
      if at and now - tonumber(at) < reuse then
        floor, level, spare = tonumber(f), tonumber(l), tonumber(s)
      end
    end
  end
  if not floor then
    if not live then
      live = {}
      for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
        live[m] = true
      end
    end
    redis.call('PEXPIRE', KEYS[k], ttl * 4)
    floor = global / n / 100
    local demands = {}
    local total = 0
    local all = redis.call('HGETALL', KEYS[k])
    for i = 1, #all, 2 do
      if live[all[i]] then
        local d = math.max(tonumber(all[i + 1]) or 0, floor)
        demands[#demands + 1] = d
        total = total + d
      elseif all[i] ~= LEVEL then
        redis.call('HDEL', KEYS[k], all[i])
      end
    end
    if #demands == 0 then
      -- Every instance left the bucket (this call too): as if this one alone wanted nothing.
      demands[1] = floor
      total = floor
    end
    level, spare = -1, 0
    if total <= global then
      spare = (global - total) / #demands
    else
      table.sort(demands)
      local left = global
      level = global / #demands
      for i, d in ipairs(demands) do
        level = left / (#demands - i + 1)
        if d > level then
          break
        end
        left = left - d
      end
    end
    redis.call('HSET', KEYS[k], LEVEL,
      string.format('%d %.17g %.17g %.17g', now, floor, level, spare))
  end
  mine = math.max(mine, floor)
  ask = math.max(ask, mine)
  local share
  if level < 0 then
    share = math.max(mine + spare, math.min(ask, global))
  else
    share = math.min(ask, level)
  end
  out[#out + 1] = tostring(share)
end
return out
