-- ratekit sliding-window log: one atomic decision over every rule of a policy.
-- KEYS[1]  the ZSET of one (policy, key); score = admission time in µs,
--          member = call ID (first unit) or ID:j (unit j > 1).
-- ARGV[1]  '1' to take, '0' to peek
-- ARGV[2]  units asked for (n)
-- ARGV[3]  call ID, unique per take; a retried take finds it and is not counted again
-- ARGV[4]  client time in µs, or '' to use the server's TIME
-- ARGV[5..] limit, window (µs) for each rule
-- Returns {allowed, at, used_1, retry_1, reset_1, ...}; durations in µs.
-- (redis_prelude.lua defines key, mode, n, id, now and fmt.)
local take = mode == '1'
local nrules = (#ARGV - 4) / 2
local maxw = 0
for i = 1, nrules do
  local w = tonumber(ARGV[4 + 2 * i])
  if w > maxw then maxw = w end
end
redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now - maxw))

local at = now
local replay = false
if take then
  local s = redis.call('ZSCORE', key, id)
  if s then
    -- This call already ran (go-redis retried it after a lost reply):
    -- answer as it was answered, count nothing again.
    replay = true
    at = tonumber(s)
    n = 0
  end
end

local allowed = 1
local used, retry = {}, {}
for i = 1, nrules do
  local limit = tonumber(ARGV[3 + 2 * i])
  local w = tonumber(ARGV[4 + 2 * i])
  local lo = '(' .. fmt(now - w)
  local c
  if w == maxw then
    -- Everything older than the longest window was just evicted.
    c = redis.call('ZCARD', key)
  else
    c = redis.call('ZCOUNT', key, lo, '+inf')
  end
  used[i] = c
  retry[i] = 0
  local need = c + n - limit
  if need > 0 then
    allowed = 0
    -- The need-th oldest unit in the window must leave for n to fit.
    local e = redis.call('ZRANGEBYSCORE', key, lo, '+inf', 'WITHSCORES', 'LIMIT', need - 1, 1)
    if e[2] then
      retry[i] = tonumber(e[2]) + w - now
    else
      retry[i] = w
    end
  end
end

if take and allowed == 1 and not replay then
  local sat = fmt(now)
  local args = {}
  for j = 1, n do
    args[#args + 1] = sat
    if j == 1 then
      args[#args + 1] = id
    else
      args[#args + 1] = id .. ':' .. j
    end
    if #args >= 1000 then
      redis.call('ZADD', key, unpack(args))
      args = {}
    end
  end
  if #args > 0 then
    redis.call('ZADD', key, unpack(args))
  end
  redis.call('PEXPIRE', key, math.ceil(maxw / 1000) + 1)
  for i = 1, nrules do
    used[i] = used[i] + n
  end
end

local newest = nil
if take and allowed == 1 and not replay then
  newest = now
else
  local top = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if top[2] then newest = tonumber(top[2]) end
end
local out = {allowed, at}
for i = 1, nrules do
  local w = tonumber(ARGV[4 + 2 * i])
  local reset = 0
  if used[i] > 0 and newest then
    reset = newest + w - now
  end
  out[#out + 1] = used[i]
  out[#out + 1] = retry[i]
  out[#out + 1] = reset
end
return out
