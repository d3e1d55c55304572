-- ratekit sliding buckets: bounded memory per key whatever the limit.
-- KEYS[1]  a HASH of one (policy, key). Fields:
--            '<rule>:<bucket>' -> units admitted in that bucket (bucket = floor(t / width))
--            '~<slot>'         -> '<call ID> <at>' of the last 16 takes, so a retried
--                                 take is recognised and not counted again
--                                 (' R' is appended once the take is refunded)
--            '~n'              -> the next ring slot
-- ARGV[1]  '1' to take, '0' to peek, 'r' to refund
-- ARGV[2]  units (n)
-- ARGV[3]  call ID
-- ARGV[4]  client time in µs, or '' for the server's TIME; for a refund, the take's time
-- ARGV[5..] limit, window (µs), bucket width (µs) for each rule
-- Returns {allowed, at, used_1, retry_1, reset_1, ...}; durations in µs.
-- A bucket is counted in full while any part of it lies inside the window,
-- so the count is never below the true sliding count: never over-admits.
-- (redis_prelude.lua defines key, mode, n, id, now and fmt.)
local nrules = (#ARGV - 4) / 3

if mode == 'r' then
  -- Idempotent per call: the take's ring entry is marked refunded, so a
  -- refund retried after a lost reply gives nothing back twice. A take
  -- whose entry has left the ring is refunded without the mark.
  local ring = redis.call('HMGET', key, '~0', '~1', '~2', '~3', '~4', '~5', '~6', '~7',
    '~8', '~9', '~10', '~11', '~12', '~13', '~14', '~15')
  local prefix = id .. ' '
  for s = 1, 16 do
    local v = ring[s]
    if v and string.sub(v, 1, #prefix) == prefix then
      if string.sub(v, -2) == ' R' then
        return {1, now}
      end
      redis.call('HSET', key, '~' .. (s - 1), v .. ' R')
      break
    end
  end
  for i = 1, nrules do
    local g = tonumber(ARGV[4 + 3 * i])
    local f = i .. ':' .. fmt(math.floor(now / g))
    if redis.call('HINCRBY', key, f, -n) <= 0 then
      redis.call('HDEL', key, f)
    end
  end
  return {1, now}
end

local fields = redis.call('HGETALL', key)
local buckets = {}
for i = 1, nrules do buckets[i] = {} end
local ring = {}
local slot = 0
for j = 1, #fields, 2 do
  local f, v = fields[j], fields[j + 1]
  if string.sub(f, 1, 1) == '~' then
    if f == '~n' then
      slot = tonumber(v)
    else
      local sp = string.find(v, ' ', 1, true)
      if sp then
        local rest = string.sub(v, sp + 1)
        local sp2 = string.find(rest, ' ', 1, true)
        if sp2 then rest = string.sub(rest, 1, sp2 - 1) end
        ring[string.sub(v, 1, sp - 1)] = tonumber(rest)
      end
    end
  else
    local c = string.find(f, ':', 1, true)
    if c then
      local i = tonumber(string.sub(f, 1, c - 1))
      if i and buckets[i] then
        table.insert(buckets[i], {tonumber(string.sub(f, c + 1)), tonumber(v), f})
      end
    end
  end
end

local at = now
local replay = false
if mode == '1' and ring[id] then
  -- This call already ran (go-redis retried it after a lost reply).
  replay = true
  at = ring[id]
  n = 0
end

local allowed = 1
local used, retry, newest = {}, {}, {}
local maxspan = 0
local stale = {}
for i = 1, nrules do
  local limit = tonumber(ARGV[2 + 3 * i])
  local w = tonumber(ARGV[3 + 3 * i])
  local g = tonumber(ARGV[4 + 3 * i])
  if w + g > maxspan then maxspan = w + g end
  local lo = math.floor((now - w) / g)
  local live = {}
  for _, b in ipairs(buckets[i]) do
    if b[1] < lo then
      stale[#stale + 1] = b[3]
    else
      live[#live + 1] = b
    end
  end
  table.sort(live, function(a, b) return a[1] < b[1] end)
  local c = 0
  for _, b in ipairs(live) do c = c + b[2] end
  used[i] = c
  retry[i] = 0
  newest[i] = live[#live] and live[#live][1] or nil
  local need = c + n - limit
  if need > 0 then
    allowed = 0
    local acc = 0
    for _, b in ipairs(live) do
      acc = acc + b[2]
      if acc >= need then
        retry[i] = (b[1] + 1) * g + w - now
        break
      end
    end
    if retry[i] == 0 then retry[i] = w end
  end
end
if #stale > 0 then
  redis.call('HDEL', key, unpack(stale))
end

if mode == '1' and allowed == 1 and not replay then
  for i = 1, nrules do
    local g = tonumber(ARGV[4 + 3 * i])
    local b = math.floor(now / g)
    redis.call('HINCRBY', key, i .. ':' .. fmt(b), n)
    used[i] = used[i] + n
    newest[i] = b
  end
  redis.call('HSET', key, '~' .. slot, id .. ' ' .. fmt(now), '~n', (slot + 1) % 16)
  redis.call('PEXPIRE', key, math.ceil(maxspan / 1000) + 1)
end

local out = {allowed, at}
for i = 1, nrules do
  local w = tonumber(ARGV[3 + 3 * i])
  local g = tonumber(ARGV[4 + 3 * i])
  local reset = 0
  if used[i] > 0 and newest[i] then
    reset = (newest[i] + 1) * g + w - now
  end
  out[#out + 1] = used[i]
  out[#out + 1] = retry[i]
  out[#out + 1] = reset
end
return out
