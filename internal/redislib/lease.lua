-- ratekit in-flight leases (Policy.InFlight): a batch of lease operations
-- in one call. It runs as a script (EVALSHA, EVAL when the server lacks
-- it); it shares nothing with the sliding-window library.
--
-- Each key is a sorted set of lease units: member '<owner>.<seq>', score
-- the unit's expiry in µs (of the decisions' clock). A lease of n units
-- holds the members of seq .. seq+n-1; owner is a random number of the
-- limiter that took it, so members are unique across instances and a
-- release or renewal touches only its own lease. A unit whose expiry is at
-- or before now is dead: a take removes dead units before it counts, so
-- the set never holds more than the limit's units and the key, whose TTL
-- covers its newest expiry, disappears by itself when no one renews.
--
-- KEYS[d]  the key of operation d
-- ARGV[1]  the operations, packed as little-endian doubles; per operation:
--            op (0 peek, 1 take, 2 release, 3 renew), n, limit, ttl (µs),
--            client time in µs (0: the server's TIME), owner, seq.
-- Returns one string of little-endian doubles; per operation:
--   peek, take: allowed, time, units held after it, 0, 0 (a denial's
--               RetryAfter is the limiter's fixed hint);
--   release:    1, time;
--   renew:      1 if the lease was still there (its expiry is now
--               time + ttl), else 0; time.
-- An operation that fails returns {-1, length} and the error text without
-- failing the others.

local sunpack, pack, format, call = struct.unpack, struct.pack, string.format, redis.call

local server
local function now_of(cnow)
  if cnow ~= 0 then return cnow end
  if not server then
    local t = call('TIME')
    server = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return server
end

local function num(x) return format('%.0f', x) end

local function member(owner, seq) return format('%.0f.%.0f', owner, seq) end

-- keep makes the key outlive the expiry now + ttl, by the server's clock.
local function keep(key, ttl, cnow)
  local px = math.ceil(ttl / 1000) + 1
  if cnow ~= 0 then
    -- Client time: the units live until their expiry in the client's
    -- time, however far behind the server's that runs.
    local lag = math.ceil((now_of(0) - cnow) / 1000)
    if lag > 0 then px = px + lag end
  end
  if call('PTTL', key) < px then call('PEXPIRE', key, px) end
end

-- setall writes score for the n members of a lease, in chunks so that a
-- large lease does not overflow the Lua stack. xx updates existing
-- members only.
local function setall(key, score, owner, seq, n, xx)
  local s = num(score)
  local i = 0
  while i < n do
    local args = {}
    if xx then args[1] = 'XX' end
    local stop = math.min(n, i + 500)
    for j = i, stop - 1 do
      args[#args + 1] = s
      args[#args + 1] = member(owner, seq + j)
    end
    call('ZADD', key, unpack(args))
    i = stop
  end
end

local function operate(key, op, n, limit, ttl, cnow, owner, seq)
  local now = now_of(cnow)
  if op == 0 then
    local used = call('ZCOUNT', key, '(' .. num(now), '+inf')
    if used + n > limit then return pack('<ddddd', 0, now, used, 0, 0) end
    return pack('<ddddd', 1, now, used, 0, 0)
  elseif op == 1 then
    call('ZREMRANGEBYSCORE', key, '-inf', num(now))
    local used = call('ZCARD', key)
    if used + n > limit then return pack('<ddddd', 0, now, used, 0, 0) end
    setall(key, now + ttl, owner, seq, n, false)
    keep(key, ttl, cnow)
    return pack('<ddddd', 1, now, used + n, 0, 0)
  elseif op == 2 then
    local i = 0
    while i < n do
      local args = {}
      local stop = math.min(n, i + 1000)
      for j = i, stop - 1 do args[#args + 1] = member(owner, seq + j) end
      call('ZREM', key, unpack(args))
      i = stop
    end
    return pack('<dd', 1, now)
  end
  -- Renew: only a lease still there. A released lease is never brought
  -- back, whatever the order in which a release and a renewal arrive; a
  -- dead unit that no take has removed yet is renewed, since no one was
  -- admitted in its place.
  if not call('ZSCORE', key, member(owner, seq)) then return pack('<dd', 0, now) end
  setall(key, now + ttl, owner, seq, n, true)
  keep(key, ttl, cnow)
  return pack('<dd', 1, now)
end

server = nil
local blob = ARGV[1]
local pos = 1
local out = {}
for d = 1, #KEYS do
  local op, n, limit, ttl, cnow, owner, seq
  op, n, limit, ttl, cnow, owner, seq, pos = sunpack('<ddddddd', blob, pos)
  local ok, res = pcall(operate, KEYS[d], op, n, limit, ttl, cnow, owner, seq)
  if not ok then
    local msg = type(res) == 'table' and res.err or tostring(res)
    res = pack('<dd', -1, #msg) .. msg
  end
  out[d] = res
end
return table.concat(out)
