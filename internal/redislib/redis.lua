-- ratekit's Redis library: the decisions of the sliding log and of the
-- sliding buckets, each a batch of decisions in one call.
--
-- It is loaded as a Redis Function library (Redis 7), whose helpers are
-- built once when it loads; on older servers the same text runs as a
-- script, with register collecting the functions and the last line
-- calling one of them. Either way a call is register(name, f)'s f(keys,
-- args), with ARGV[1] the packed decisions.
--
-- Decisions are packed as little-endian doubles; so is the reply, one
-- string. A decision that fails returns {-1, length} and the error text,
-- without failing the others of its batch. args[2], when set, is the
-- channel on which a refund publishes its key.

-- Set on the first call: the struct library is not there while a
-- function library loads.
local sunpack, pack, rep, sub, floor, ceil, format, call
local function init()
  if not sunpack then
    sunpack, pack, rep, sub = struct.unpack, struct.pack, string.rep, string.sub
    floor, ceil, format, call = math.floor, math.ceil, string.format, redis.call
  end
end

-- The channel on which refunds are announced (args[2]), and the
-- server's time in µs, read once per call.
local channel
local server
local function servertime()
  if not server then
    local t = call('TIME')
    server = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return server
end

-- int formats an integer argument of a command: Lua would format a
-- number as a float, at several times the cost.
local function int(x) return format('%d', x) end

-- failed packs the answer of a decision that failed.
local function failed(err)
  local msg = type(err) == 'table' and err.err or tostring(err)
  return pack('<dd', -1, #msg) .. msg
end

-- ======================================================================
-- Grants: a key's grant lives at <base>:grant (in the slot of the key's
-- other keys, the same hash tag), a string "<extra>|<exempt 0 or 1>|..."
-- that expires by itself (PEXPIREAT its end); the rest is for whoever
-- looks it up. A take or peek reads it (a GET, of a key that is missing
-- for almost every key) and, with extra units, decides with every limit
-- that much higher; an exempt key is allowed with nothing read or
-- recorded, its rules reported unused. The reply's first double, the
-- allowed status s (0, 1, 2), then carries the grant: s + 4 for an
-- exempt key, s + 4 * (extra + 2) for extra units. The grant key is not
-- declared: while its Cluster slot migrates, a grant whose key has moved
-- before the key's state reads as none (the rules' own limits, never
-- more), rather than failing the decision.
local function grantOf(base)
  local ok, v = pcall(call, 'GET', base .. ':grant')
  if not ok or type(v) ~= 'string' then return 0 end
  local x, e = string.match(v, '^(%d+)|(%d)')
  if e == '1' then return -1 end
  return tonumber(x) or 0
end

-- granted marks the reply res of a decision with extra units.
local function granted(res, gx)
  local s = sunpack('<d', res, 1)
  if s < 0 then return res end
  return pack('<d', s + 4 * (gx + 2)) .. sub(res, 9)
end

-- exempt is the reply to a take or peek of an exempt key: allowed, its
-- nr sliding rules and nc calendar rules unused, no lockout (more).
local function exempt(now, nr, nc, more)
  local r = pack('<dd', 1 + 4, now) .. rep(pack('<dddd', 0, 0, 0, 0), nr + nc)
  if more then r = r .. pack('<d', 0) end
  return r
end

-- ======================================================================
-- Lockouts, calendar rules and challenges, for the policies that have
-- them: their decisions have MORE added to op and, after the sliding
-- rules (and the refund's time), the lockout's length and cap in µs (0, 0
-- for none), the number of calendar rules and per calendar rule its
-- limit, its kind (1 day, 2 week, 3 month) and four period boundaries in
-- µs: the start of the period before the caller's time, of the caller's
-- period, its end and the next period's end, computed by the caller (Lua
-- knows no time zones). The decision picks from them the period that
-- holds its own time, so a boundary is exact to the server's clock. Then
-- come how long a pass lasts for the sliding rules with a challenge (µs),
-- the number of challenge thresholds nch (0, or every rule's), and nch
-- thresholds: the sliding rules' in order, then the calendar rules' (0:
-- none).
--
-- A take or peek whose units every rule has room for, of a key not
-- locked out and without a live pass, is challenged when for some rule
-- the units used plus n reach its threshold: it records nothing, starts
-- no lockout and answers 2 for allowed. Op 4 (a pass) records that the
-- key passed a challenge, until the longest window of the sliding rules
-- with a threshold or the end of the current period of such a calendar
-- rule, whichever is later, and answers {1, time}.
--
-- Such a policy keeps everything of a key in one HASH, <base>:m, the one
-- key its decisions touch and declare: while a Cluster slot migrates,
-- Redis then redirects a decision whole (ASK) or runs it where the key
-- is, never on a node that holds part of it. Its fields:
--   'g'   the sliding log (SlidingLog), the string a plain policy keeps
--         at <base>, read and written whole;
--   '<width>:<index>'  the bucket counts (SlidingBuckets), as at <base>:b;
--   'l'   the lockout, three doubles: when it ends, the offences so far
--         and when they are forgotten;
--   '<kind letter><start>:<end>'  the units admitted in a calendar
--         period; a new period's field drops those of ended periods;
--   'b'   when the key was made: a refund of a decision before it (the
--         key was reset since) does nothing;
--   'p'   the time until which the key's pass holds (challenges);
--   'x'   the time, in the decisions' clock, until which the key lives
--         at least: every part extends it, none shortens it.
-- Their reply has, after the sliding rules' states, per calendar rule the
-- units used, the wait, the time until its period ends and the period's
-- length, then the time the lockout has left (0: none).
local MORE = 8
-- Op 5 records units admitted without the store, at a time given as how
-- long before the decision's: a limiter's fallback admissions, counted
-- once the store answers again.
local RECORD = 5
-- The op of a decision also carries, times FORMAT, the format the driver
-- writes the policy's keys in: 1, v0.1.0's; 2, once every instance of
-- the policy reads grants (a grant is only written then).
local FORMAT = 16
local KIND = {'d', 'w', 'm'}


-- readMore reads a decision's lockout, calendar rules and challenges.
local function readMore(blob, pos)
  local lfor, lmax, nc
  lfor, lmax, nc, pos = sunpack('<ddd', blob, pos)
  local cals = {}
  for i = 1, nc do
    local l, kind, b0, b1, b2, b3
    l, kind, b0, b1, b2, b3, pos = sunpack('<dddddd', blob, pos)
    cals[i] = {l, kind, b0, b1, b2, b3}
  end
  local passfor, nch
  passfor, nch, pos = sunpack('<dd', blob, pos)
  local ch = {}
  for i = 1, nch do ch[i], pos = sunpack('<d', blob, pos) end
  return {lfor = lfor, lmax = lmax, cals = cals, passfor = passfor, ch = ch}, pos
end

-- challenged reports whether n more units reach a challenge threshold of
-- m: used holds the units of the sliding rules (nr of them); the
-- calendar rules' units are in their states.
local function challenged(m, used, nr, n)
  local ch = m.ch
  for i = 1, nr do
    local c = ch[i]
    if c > 0 and used[i] + n >= c then return true end
  end
  for i, cal in ipairs(m.cals) do
    local c = ch[nr + i]
    if c > 0 and cal.used + n >= c then return true end
  end
  return false
end

-- period sets the calendar rule c's period at time t and its field.
local function period(c, t)
  if t < c[4] then
    c.s, c.e = c[3], c[4]
  elseif t < c[5] then
    c.s, c.e = c[4], c[5]
  else
    c.s, c.e = c[5], c[6]
  end
  c.f = KIND[c[2]] .. int(c.s) .. ':' .. int(c.e)
end

-- lag returns how far, in ms, the client's clock runs behind the
-- server's: a key written in client time lives that much longer.
local function lag(cnow)
  if cnow == 0 then return 0 end
  local l = ceil((servertime() - cnow) / 1000)
  if l > 0 then return l end
  return 0
end

-- calFits reads the calendar rules' units from got (the HMGET of their
-- fields) at now; it reports whether n more fit them all.
local function calFits(cals, got, n, now)
  local fits = true
  for i, c in ipairs(cals) do
    local u = tonumber(got[i]) or 0
    c.used, c.retry = u, 0
    if u + n > c[1] then
      fits = false
      c.retry = c.e - now
    end
  end
  return fits
end

-- calAdd counts n units in the calendar rules' periods read by calFits,
-- and returns the end of the last period the key holds (0: no new one).
local function calAdd(k, cals, n, now)
  local fresh = false
  for _, c in ipairs(cals) do
    if call('HINCRBY', k, c.f, n) == n then fresh = true end
    c.used = c.used + n
  end
  if not fresh then return 0 end
  -- A new period: drop those that have ended.
  call('HSETNX', k, 'b', int(now))
  local last, stale = now, {}
  for _, f in ipairs(call('HKEYS', k)) do
    local kind = string.match(f, '^[dwm]%d')
    local e = kind and tonumber(string.match(f, ':(%d+)$'))
    if e and e <= now then
      stale[#stale + 1] = f
    elseif e and e > last then
      last = e
    end
  end
  if #stale > 0 then call('HDEL', k, unpack(stale)) end
  return last
end

-- calRefund gives n units back to the periods that held time at, unless
-- the key was made after at.
local function calRefund(k, cals, n, at, born)
  if not born or at < born then return end
  for _, c in ipairs(cals) do
    period(c, at)
    if call('HEXISTS', k, c.f) == 1 and call('HINCRBY', k, c.f, -n) <= 0 then
      call('HDEL', k, c.f)
    end
  end
end

-- lockout locks the key out from now after off earlier offences; it
-- returns for how long (lfor, doubled per offence up to lmax when lmax is
-- above lfor) and until when the offences are remembered.
local function lockout(k, m, now, off)
  local d = m.lfor
  local keep = d
  if m.lmax > m.lfor then
    for _ = 1, off do
      if d >= m.lmax / 2 then
        d = m.lmax
        break
      end
      d = d * 2
    end
    keep = d + m.lmax
  end
  if off < 62 then off = off + 1 end
  call('HSET', k, 'l', pack('<ddd', now + d, off, now + keep))
  return d, now + keep
end

-- import moves into k, a new <base>:m, what an earlier version kept in
-- keys of its own beside the windows (<base>:l, <base>:c), and the
-- windows a policy without a lockout or calendar rules kept (<base> or
-- <base>:b), so that an upgrade or a new rule keeps them; it returns the
-- time until which k must live (0: nothing was there). It reads keys it
-- does not declare, of k's slot, once per key made. On a Cluster node
-- importing the slot they may not be its to read (some still on the
-- source): nothing is imported there, so earlier keys that a reshard
-- moves in the middle of an upgrade may be forgotten.
local function import(k, buckets, now)
  local base = sub(k, 1, -3)
  local win = base
  if buckets then win = base .. ':b' end
  local lk, ck = base .. ':l', base .. ':c'
  local found = redis.pcall('EXISTS', win, lk, ck)
  if type(found) ~= 'number' or found == 0 then return 0 end
  local live = 0
  local function keepOf(key)
    local ms = call('PTTL', key)
    local e = now + ms * 1000
    if ms > 0 and e > live then live = e end
    return e
  end
  if call('TYPE', win).ok == (buckets and 'hash' or 'string') then
    keepOf(win)
    if buckets then
      local f = call('HGETALL', win)
      if #f > 0 then call('HSET', k, unpack(f)) end
    else
      call('HSET', k, 'g', call('GET', win))
    end
  end
  local v = call('GET', lk)
  if v and #v == 16 then
    local untl, off = sunpack('<dd', v)
    call('HSET', k, 'l', pack('<ddd', untl, off, keepOf(lk)))
  end
  if call('EXISTS', ck) == 1 then
    keepOf(ck)
    local f = call('HGETALL', ck)
    if #f > 0 then call('HSET', k, unpack(f)) end
  end
  call('DEL', win, lk, ck)
  if live > now then
    call('HSET', k, 'x', int(live))
    call('PEXPIRE', k, int(ceil((live - now) / 1000) + 1))
  end
  return live
end

-- runMore decides for a policy with a lockout, calendar rules or
-- challenges, on its key k. slide(op, gate) decides the sliding rules (nr
-- of them) in k and returns its packed answer, whether they admit, until
-- when they need k to live and whether gate challenged the decision: a
-- key locked out, or a calendar rule without room, has them peeked at.
-- gate, when set, is asked with the sliding rules' units before a take
-- records anything that fits them, and a take it challenges records
-- nothing.
local function runMore(k, op, n, now, cnow, at, m, slide, nr, buckets)
  local cals = m.cals
  local fields = {'x', 'l', 'b', 'p'}
  local t0 = now
  if op == 2 or op == RECORD then t0 = at end
  for i, c in ipairs(cals) do
    period(c, t0)
    fields[i + 4] = c.f
  end
  local got = call('HMGET', k, unpack(fields))
  local x = tonumber(got[1])
  if not x then
    x = import(k, buckets, now)
    if x > 0 then got = call('HMGET', k, unpack(fields)) end
  end
  local need = 0
  if op == RECORD then
    -- Units admitted without the store at time at: in the sliding
    -- rules' window and the calendar rules' periods of that time.
    local born = tonumber(got[3])
    if not born or at < born then call('HSET', k, 'b', int(at)) end
    if nr > 0 then
      local _, _, e = slide(RECORD)
      if e and e > need then need = e end
    end
    for _, c in ipairs(cals) do
      call('HINCRBY', k, c.f, n)
      if c.e > need then need = c.e end
    end
    if need > x and need > now then
      call('HSET', k, 'x', int(need))
      call('PEXPIRE', k, int(ceil((need - now) / 1000) + 1 + lag(cnow)))
    end
    return pack('<dd', 1, at)
  end
  if op == 2 then
    local res = pack('<dd', 1, at)
    if nr > 0 then res = slide(2) end
    if #cals > 0 then
      calRefund(k, cals, n, at, tonumber(got[3]))
      if channel then call('PUBLISH', channel, k) end
    end
    return res
  end
  if op == 4 then
    -- A pass: until the longest window, or period, of a rule with a
    -- threshold; it never shortens one the key holds.
    local untl = now + m.passfor
    for i, c in ipairs(cals) do
      if (m.ch[nr + i] or 0) > 0 and c.e > untl then untl = c.e end
    end
    if untl > (tonumber(got[4]) or 0) then call('HSET', k, 'p', int(untl)) end
    if untl > x then
      call('HSET', k, 'x', int(untl))
      call('PEXPIRE', k, int(ceil((untl - now) / 1000) + 1 + lag(cnow)))
    end
    return pack('<dd', 1, now)
  end
  local untl, off = 0, 0
  if m.lfor > 0 and got[2] and #got[2] == 24 then
    local keep
    untl, off, keep = sunpack('<ddd', got[2])
    -- Offences are forgotten lmax after the last lockout ended, in the
    -- decisions' time (the key's TTL runs on the server's).
    if keep <= now then untl, off = 0, 0 end
    if m.lmax <= m.lfor or untl + m.lmax <= now then off = 0 end
  end
  local locked = untl > now
  local fits = true
  if #cals > 0 then fits = calFits(cals, {unpack(got, 5)}, n, now) end
  local sop = op
  if locked or not fits then sop = 0 end
  local t, body, ok = now, '', 1
  local chal, gate = false, nil
  if #m.ch > 0 and not locked and fits and (tonumber(got[4]) or 0) <= now then
    -- No pass: what fits every rule may reach a threshold.
    gate = function(used) return challenged(m, used, nr, n) end
  end
  if nr > 0 then
    local res, e
    res, ok, e, chal = slide(sop, gate)
    t, body = sunpack('<d', res, 9), sub(res, 17)
    if e and e > need then need = e end
  elseif gate then
    chal = gate({})
  end
  local allowed = not locked and fits and ok == 1 and not chal
  if op == 1 and allowed and #cals > 0 then
    local e = calAdd(k, cals, n, now)
    if e > need then need = e end
  end
  local lock = 0
  if locked then
    lock = untl - now
  elseif op == 1 and not allowed and not chal and m.lfor > 0 then
    local e
    lock, e = lockout(k, m, now, off)
    if e > need then need = e end
  end
  if need > x then
    call('HSET', k, 'x', int(need))
    call('PEXPIRE', k, int(ceil((need - now) / 1000) + 1 + lag(cnow)))
  end
  local status = 0
  if allowed then status = 1 elseif chal then status = 2 end
  local out = {pack('<dd', status, t), body}
  for _, c in ipairs(cals) do
    out[#out + 1] = pack('<dddd', c.used, c.retry, c.e - now, c.e - c.s)
  end
  out[#out + 1] = pack('<d', lock)
  return table.concat(out)
end

-- ======================================================================
-- ratekit sliding-window log: a batch of decisions in one call.
--
-- Each key is a string of little-endian doubles: a header, then the
-- admission times in whole µs, one per admitted unit, in non-decreasing
-- order. The header is the time in µs (of the decisions' clock) until
-- which the key's TTL lasts at least, the number of hints h, and h
-- hints: for rule i, the index of the first entry in its window at the
-- last write, where the next search starts. Only the newest entries
-- matter: rule i (limit L, window W) has room for n more units when the
-- (L-n+1)-th newest entry is at or before now - W, and a denial's wait is
-- that entry's time + W - now. The string keeps at most the newest `keep`
-- entries (the largest limit of any tier of the policy); dead ones are
-- trimmed as it is written.
--
-- Redis's Lua hashes every byte of every string it makes, so a decision
-- never reads a long value whole: up to SMALL bytes it does, beyond that
-- it reads the few entries around each rule's hint, and rewrites the
-- string (to trim it) only once its dead entries are half as many as the
-- live ones. A decision's cost does not grow with the entries. The
-- decisions of one call on one key are decided together: a decision
-- that follows one on the same key starts from what that one left (the
-- value, header, hints and the entries read), not from a new read.
--
-- keys[d]  the key of decision d
-- args[1]  the decisions, packed as little-endian doubles; per decision:
--            op (0 peek, 1 take, 2 refund; 4 pass, see runMore; plus
--            MORE and FORMAT times the format), n, keep, span (the
--            longest window of every instance that uses the policy, µs:
--            entries live that long), client time in µs (0: the server's
--            TIME), nrules, then limit and window (µs) per rule; a refund
--            has one more double, the time of the take.
-- Returns one string of little-endian doubles; per decision: allowed, the
-- time of the decision (of the admitted units, for a take), then per rule
-- the units used in the window, the wait until n units fit (0 when they
-- fit), the time until the window is empty and the time until its oldest
-- entry leaves it (0 when empty), in µs. A refund returns
-- {1, time}. A decision that fails returns {-1, length} and the error
-- text, without failing the others.

-- A value up to this size is read whole.
local SMALL, SMALLEND = 512, '511'

-- long holds the keys (up to LONGKEYS, then it starts again) whose value
-- was long when last loaded: their next load reads HEAD bytes, the
-- header, not SMALL (Redis's Lua copies and hashes every byte it is
-- handed, and a long value's bytes past its header are not used). A
-- guess, never trusted: a value found shorter is read whole. It lives
-- as long as the library (a Redis Function's locals outlive a call; a
-- script's do not, and start empty).
local HEAD, HEADEND = 128, '127'
local LONGKEYS = 1024
local long, nlong = {}, 0

-- Entries read around a hint in one GETRANGE.
local CHUNK = 32

-- The key being decided: its name, its value (whole when small, else a
-- prefix that holds its header: SMALL bytes, or HEAD), the header's
-- length, entries, TTL end and hints; hashed when the log is field 'g'
-- of the HASH key (a policy with a lockout or calendar rules), read and
-- written whole.
local key, v, small, hdr, cnt, expat, nh, hashed
-- current when the state above is the key's value as the last decision
-- left it, within this call: the next decision on key need not load it.
local current = false
-- pend is what the last decision appended to a small value that v does
-- not hold yet: joined only if a decision on the same key follows in the
-- call (most follow on other keys, and would pay for the copy).
local pend
local hints = {}
-- A long value's entries read so far: one chunk (its first index and
-- bytes), and the entry read last on its own.
local clo, chunk, pi, pe

-- entry returns the time of entry i (0-based).
local function entry(i)
  if small then return (sunpack('<d', v, hdr + i * 8 + 1)) end
  local j = i - clo
  if j >= 0 and j * 8 < #chunk then return (sunpack('<d', chunk, j * 8 + 1)) end
  if i ~= pi then
    pi = i
    if i == cnt - 1 then
      pe = sunpack('<d', call('GETRANGE', key, '-8', '-1'))
    else
      pe = sunpack('<d', call('GETRANGE', key, int(hdr + i * 8), int(hdr + i * 8 + 7)))
    end
  end
  return pe
end

-- read fetches the entries [lo, hi) of a long value in one call, unless
-- it holds them already (entries do not change while the key is current).
local function read(lo, hi)
  if small or hi <= lo or clo == lo and #chunk >= (hi - lo) * 8 then return end
  clo, chunk = lo, call('GETRANGE', key, int(hdr + lo * 8), int(hdr + hi * 8 - 1))
end

-- first returns the first index in [lo, hi) of an entry after t, or hi.
local function first(lo, hi, t)
  while lo < hi do
    local mid = floor((lo + hi) / 2)
    if entry(mid) > t then hi = mid else lo = mid + 1 end
  end
  return lo
end

local function load(k, h)
  key, hashed, pend = k, h, nil
  local size, guess
  if not h then guess = long[k] end
  if h then
    v = call('HGET', k, 'g') or ''
  elseif guess then
    v = call('GETRANGE', k, '0', HEADEND)
    if #v == HEAD then
      size = call('STRLEN', k)
      if size < SMALL then v, size = call('GETRANGE', k, '0', SMALLEND), nil end
    end
  else
    v = call('GETRANGE', k, '0', SMALLEND)
  end
  if #v < 16 then
    v, small, hdr, cnt, expat, nh = '', true, 16, 0, 0, 0
    return
  end
  expat, nh = sunpack('<dd', v)
  hdr = 16 + nh * 8
  small = hashed or (#v < SMALL and not size)
  if not small and #v < hdr then v = call('GETRANGE', k, '0', int(hdr - 1)) end
  for i = 1, nh do hints[i] = sunpack('<d', v, 8 + i * 8 + 1) end
  if small then
    cnt = (#v - hdr) / 8
    if guess then long[k], nlong = nil, nlong - 1 end
  else
    cnt = ((size or call('STRLEN', k)) - hdr) / 8
    clo, chunk, pi = 0, '', nil
    if not h and not guess then
      if nlong >= LONGKEYS then long, nlong = {}, 0 end
      long[k], nlong = true, nlong + 1
    end
  end
end

-- winstart returns the first index in [lo, cnt) of an entry after t, for
-- rule i: on a long value from the rule's hint, which the window's start
-- only leaves forward, a little at a time.
local function winstart(i, lo, t)
  if small then return first(lo, cnt, t) end
  local h = hints[i] or lo
  if i > nh or h < lo then h = lo elseif h > cnt then h = cnt end
  local a, b = h, h + CHUNK
  if a > lo then a = a - 1 end
  if b > cnt then b = cnt end
  read(a, b)
  if h > lo and entry(h - 1) > t then return first(lo, h - 1, t) end
  local f = first(h, b, t)
  if f < b then return f end
  return first(b, cnt, t)
end

-- header packs a header for TTL end e and the first h hints of hs.
local function header(e, hs, h)
  if not hs or h == 0 then return pack('<dd', e, 0) end
  local parts = {pack('<dd', e, h)}
  for i = 1, h do parts[i + 1] = pack('<d', hs[i]) end
  return table.concat(parts)
end

-- ttl returns a PX argument: ms until the µs time e of the decisions'
-- clock at time t, and, for client time cnow, the lag of that clock
-- behind the server's, so that the key lives until its windows have
-- passed in the client's time.
local function ttl(e, t, cnow)
  local px = ceil((e - t) / 1000) + 1
  if cnow ~= 0 then
    local lag = ceil((servertime() - cnow) / 1000)
    if lag > 0 then px = px + lag end
  end
  return format('%d', px)
end

local limits, windows, used, retry, starts, nexts = {}, {}, {}, {}, {}, {}

local function decide(op, n, keep, now, cnow, nr, maxw, at, gate)
  if op == RECORD then
    -- Units admitted without the store at time at (its failure policy
    -- decided): n entries in order among the others, whatever the rules
    -- say. The value is rewritten whole, without hints: a rare path.
    if at + maxw <= now then return pack('<dd', 1, at), 1, expat end -- out of every window
    local whole = v
    if not small then whole = call('GET', key) or '' end
    local c = cnt
    if #whole < 16 then whole, c = header(0), 0 end
    local lo, hi = 0, c
    while lo < hi do
      local mid = floor((lo + hi) / 2)
      if sunpack('<d', whole, hdr + mid * 8 + 1) > at then hi = mid else lo = mid + 1 end
    end
    if expat < at + maxw + 1000 then expat = at + 2 * maxw end
    local body = sub(whole, hdr + 1, hdr + lo * 8) .. rep(pack('<d', at), n) .. sub(whole, hdr + lo * 8 + 1)
    if hashed then
      call('HSET', key, 'g', header(expat) .. body)
    else
      call('SET', key, header(expat) .. body, 'PX', ttl(expat, now, cnow))
    end
    current = false
    return pack('<dd', 1, at), 1, expat
  end
  if op == 2 then
    -- Refund: remove up to n entries recorded at time at.
    local i = first(0, cnt, at - 1)
    local j = i
    while j < cnt and j - i < n and entry(j) == at do j = j + 1 end
    if j > i then
      if cnt == j - i then
        if hashed then call('HDEL', key, 'g') else call('DEL', key) end
      elseif hashed then
        call('HSET', key, 'g', header(expat) .. sub(v, hdr + 1, hdr + i * 8) .. sub(v, hdr + j * 8 + 1))
      else
        local whole = v
        if not small then whole = call('GET', key) end
        -- Later entries move down: so do the hints past i.
        local hs = {}
        for h = 1, nh do
          hs[h] = hints[h]
          if hs[h] > i then hs[h] = math.max(i, hs[h] - (j - i)) end
        end
        call('SET', key, header(expat, hs, nh) .. sub(whole, hdr + 1, hdr + i * 8) ..
          sub(whole, hdr + j * 8 + 1), 'KEEPTTL')
      end
      -- Every instance forgets its cached denials of the key.
      if channel then call('PUBLISH', channel, key) end
    end
    return pack('<dd', 1, at)
  end

  local allowed = 1
  local dead = 0 -- entries known to be out of every window
  for i = 1, nr do
    local l, w = limits[i], windows[i]
    -- Only the newest l entries can count; more than l in the window
    -- (after a change of rules) reads as full.
    local lo = cnt - l
    if lo < 0 then lo = 0 end
    local f = winstart(i, lo, now - w)
    starts[i] = f
    if w == maxw and f > lo then dead = f end
    local u = cnt - f
    used[i] = u
    nexts[i] = 0
    if u > 0 then nexts[i] = entry(f) + w - now end
    if u + n > l then
      allowed = 0
      -- The (l-n+1)-th newest entry must leave the window.
      retry[i] = entry(cnt - (l - n + 1)) + w - now
    else
      retry[i] = 0
    end
  end
  local newest = 0
  if cnt > 0 then newest = entry(cnt - 1) end
  local t = now
  local chal = false
  if allowed == 1 and gate then chal = gate(used) end
  -- Whether the state still is the value once written (see current).
  local keeps = not hashed
  if op == 1 and allowed == 1 and not chal then
    keeps = false
    -- Entries stay in order even if the clock steps back.
    if newest > t then t = newest end
    local add = pack('<d', t)
    if n > 1 then add = rep(add, n) end
    -- Entries past keep, or dead, are dropped once there are enough of
    -- them: until then they cost a little memory, never a wrong count.
    local drop = cnt + n - keep
    if drop < dead then drop = dead end
    -- The key must outlive its newest entry's window; when the TTL is
    -- about to fall short, it is set to twice the longest window.
    local renew = expat < t + maxw + 1000
    if renew then expat = t + 2 * maxw end
    if hashed then
      -- The whole log is rewritten: drop what is dead or past keep.
      call('HSET', key, 'g', header(expat) .. sub(v, hdr + drop * 8 + 1) .. add)
    elseif small then
      if drop < 16 and drop * 4 < cnt then drop = 0 end
      if drop == 0 and not renew then
        call('APPEND', key, add)
        cnt, pend = cnt + n, add
        keeps = #v + #add < SMALL
      else
        call('SET', key, header(expat) .. sub(v, hdr + drop * 8 + 1) .. add, 'PX', ttl(expat, t, cnow))
      end
    elseif (drop >= 16 and drop * 2 >= cnt - drop) or nh ~= nr then
      -- Trim, and give the header a hint per rule.
      local hs = {}
      for i = 1, nr do hs[i] = math.max(starts[i] - drop, 0) end
      call('APPEND', key, add)
      call('SET', key, header(expat, hs, nr) .. call('GETRANGE', key, int(hdr + drop * 8), '-1'), 'PX', ttl(expat, t, cnow))
    else
      call('APPEND', key, add)
      cnt, keeps = cnt + n, true
      pi, pe = cnt - 1, t
      local moved = renew
      for i = 1, nr do
        if starts[i] - hints[i] >= CHUNK / 4 or starts[i] < hints[i] then moved = true end
      end
      if moved then
        for i = 1, nr do hints[i] = starts[i] end
        call('SETRANGE', key, '0', header(expat, hints, nr))
      end
      if renew then call('PEXPIRE', key, ttl(expat, t, cnow)) end
    end
    for i = 1, nr do
      used[i] = used[i] + n
      if nexts[i] == 0 then nexts[i] = t + windows[i] - now end
    end
    newest = t
  end
  current = keeps
  if nr == 1 then
    local reset = 0
    if used[1] > 0 then reset = newest + windows[1] - now end
    return pack('<dddddd', allowed, t, used[1], retry[1], reset, nexts[1]), allowed, expat, chal
  end
  local out = pack('<dd', allowed, t)
  for i = 1, nr do
    local reset = 0
    if used[i] > 0 then reset = newest + windows[i] - now end
    out = out .. pack('<dddd', used[i], retry[i], reset, nexts[i])
  end
  return out, allowed, expat, chal
end

local function run(k, op, n, keep, now, cnow, nr, maxw, at)
  if not current or k ~= key or hashed then
    load(k)
  elseif pend then
    v, pend = v .. pend, nil
  end
  current = false
  return decide(op, n, keep, now, cnow, nr, maxw, at)
end

-- migrate converts a sorted set written by an earlier version (score =
-- admission time) into a string of entries.
local function migrate(k)
  if call('TYPE', k).ok ~= 'zset' then return false end
  local ttl = call('PTTL', k)
  local scores = call('ZRANGE', k, 0, -1, 'WITHSCORES')
  local parts = {pack('<dd', 0, 0)}
  for j = 2, #scores, 2 do parts[#parts + 1] = pack('<d', tonumber(scores[j])) end
  call('DEL', k)
  if #parts > 1 then call('SET', k, table.concat(parts), 'PX', math.max(ttl, 1)) end
  return true
end

register('log', function(keys, args)
  init()
  server, channel, current = nil, args[2], false
  local blob = args[1]
  local out = {}
  local pos = 1
  for d = 1, #keys do
    local op, n, keep, span, cnow, nr, l1, w1
    op, n, keep, span, cnow, nr, l1, w1, pos = sunpack('<dddddddd', blob, pos)
    op = op % FORMAT -- the format to write is FIRST for now: v0.1.0's
    local more = op >= MORE
    if more then
      op = op - MORE
      -- Without sliding rules, l1 and w1 were what follows.
      if nr == 0 then pos = pos - 16 end
    end
    limits[1], windows[1] = l1, w1
    local maxw = w1
    for i = 2, nr do
      local w
      limits[i], w, pos = sunpack('<dd', blob, pos)
      windows[i] = w
      if w > maxw then maxw = w end
    end
    -- Entries live, and the key with them, while another instance's
    -- longer window may count them.
    if span > maxw then maxw = span end
    local at = 0
    if op == 2 or op == RECORD then at, pos = sunpack('<d', blob, pos) end
    local now = cnow
    if now == 0 then now = servertime() end
    if op == RECORD then at = floor(now - at) end
    local k = keys[d]
    local ok, res
    local m
    if more then m, pos = readMore(blob, pos) end
    local gx = 0
    if op < 2 then gx = grantOf(more and sub(k, 1, -3) or k) end
    if gx > 0 then
      for i = 1, nr do limits[i] = limits[i] + gx end
      keep = keep + gx
      if more then for _, c in ipairs(m.cals) do c[1] = c[1] + gx end end
    end
    if gx < 0 then
      ok, res = true, exempt(now, nr, more and #m.cals or 0, more)
    elseif more then
      local function slide(sop, gate)
        load(k, true)
        return decide(sop, n, keep, now, cnow, nr, maxw, at, gate)
      end
      current = false
      ok, res = pcall(runMore, k, op, n, now, cnow, at, m, slide, nr, false)
    else
      ok, res = pcall(run, k, op, n, keep, now, cnow, nr, maxw, at)
      if not ok and migrate(k) then ok, res = pcall(run, k, op, n, keep, now, cnow, nr, maxw, at) end
    end
    if not ok then res = failed(res) elseif gx > 0 then res = granted(res, gx) end
    out[d] = res
  end
  if #keys == 1 then return out[1] end -- a lone decision: no copy
  return table.concat(out)
end)

-- ======================================================================
-- ratekit sliding buckets: bounded memory per key whatever the limit; a
-- batch of decisions in one call.
--
-- Each key is a HASH of bucket counts: field '<width>:<index>' holds the
-- units admitted in [index*width, (index+1)*width) µs; field 'b' is the
-- time the key was made, before which no refund applies (the key was
-- reset since). Rules count the
-- buckets of their own width, so rules that share a window share buckets,
-- and a key keeps its usage when its tier's limits change. A bucket is
-- counted in full while any part of it lies inside the window, so the
-- count is never below the true sliding count: it never over-admits.
--
-- keys[d]  the key of decision d
-- args[1]  the decisions, packed as little-endian doubles; per decision:
--            op (0 peek, 1 take, 2 refund; 4 pass; plus MORE and FORMAT
--            times the format), n, span (the longest window of every
--            instance that uses the policy, µs: buckets of a width no rule
--            here counts in live that long), client time in µs (0: the
--            server's TIME), nrules, then limit, window and bucket width
--            (µs) per rule, then the number of the widths other instances
--            count in and no rule here does, and each (the units are
--            recorded in those buckets too); a refund has one more double,
--            the time of the take.
-- Returns one string of little-endian doubles; per decision: allowed, the
-- time of the decision, then per rule used, retry, reset and the time
-- until its oldest bucket stops counting (µs); a refund returns {1, time}. A decision that fails returns {-1, length}
-- and the error text.
local function fmt(x) return string.format('%.0f', x) end

-- hashed says the key is a policy's <base>:m (see runMore), whose other
-- fields are left alone and whose TTL runMore keeps: the take returns
-- until when its buckets need the key.
local function decideBuckets(key, op, n, now, cnow, rules, span, extra, at, hashed, gate)
  if op == RECORD then
    -- Units admitted without the store at time at: counted in the
    -- buckets of that time, of every width; the key is made no later.
    local born = tonumber(call('HGET', key, 'b'))
    if not born or at < born then call('HSET', key, 'b', fmt(at)) end
    local done = {}
    local longest = span
    local function add(g)
      if not done[g] then
        done[g] = true
        call('HINCRBY', key, fmt(g) .. ':' .. fmt(math.floor(at / g)), n)
      end
    end
    for _, r in ipairs(rules) do
      add(r[3])
      if r[2] + r[3] > longest then longest = r[2] + r[3] end
    end
    for _, g in ipairs(extra) do add(g) end
    local need = at + longest
    if not hashed then
      local px = math.ceil((need - now) / 1000) + 1
      if cnow ~= 0 then px = px + math.max(0, math.ceil((servertime() - cnow) / 1000)) end
      if px > 0 and call('PTTL', key) < px then call('PEXPIRE', key, px) end
    end
    return pack('<dd', 1, at), 1, need
  end
  if op == 2 then
    -- Refund: give the units back to the buckets of the take's time,
    -- unless the key was made after it.
    local born = tonumber(call('HGET', key, 'b'))
    if not born or at < born then return pack('<dd', 1, at), 1 end
    local done = {}
    local function back(g)
      if not done[g] then
        done[g] = true
        local f = fmt(g) .. ':' .. fmt(math.floor(at / g))
        if call('HINCRBY', key, f, -n) <= 0 then
          call('HDEL', key, f)
        end
      end
    end
    for _, r in ipairs(rules) do back(r[3]) end
    for _, g in ipairs(extra) do back(g) end
    -- Every instance forgets its cached denials of the key.
    if channel then call('PUBLISH', channel, key) end
    return pack('<dd', 1, at), 1
  end
  -- The live buckets of each width: the oldest a rule of that width can
  -- still count is floor((now - w) / g), for its longest window.
  local lowest = {}
  local maxspan = 0
  for _, r in ipairs(rules) do
    local w, g = r[2], r[3]
    local lo = math.floor((now - w) / g)
    if lowest[g] == nil or lo < lowest[g] then lowest[g] = lo end
    if w + g > maxspan then maxspan = w + g end
  end
  if span > maxspan then maxspan = span end
  -- The widths other instances count in: their buckets live while the
  -- fleet's longest window may count them.
  for _, g in ipairs(extra) do
    if lowest[g] == nil then lowest[g] = math.floor((now - span) / g) end
  end
  local fields = call('HGETALL', key)
  local buckets = {} -- width -> list of {index, count}
  local stale = {}
  local born = false
  for j = 1, #fields, 2 do
    local f = fields[j]
    local c = string.find(f, ':', 1, true)
    local g = c and tonumber(string.sub(f, 1, c - 1))
    local b = c and tonumber(string.sub(f, c + 1))
    if f == 'b' then
      born = true
    elseif hashed and string.find(f, '^%a') then
      -- a field of the lockout, the calendar rules or the key's TTL
    elseif g ~= nil and b ~= nil and lowest[g] == nil and (b + 1) * g + span > now then
      -- Of a width another instance's rules count in: kept while the
      -- longest window of the fleet may count it.
    elseif g == nil or b == nil or lowest[g] == nil or b < lowest[g] then
      -- Older than every window, of a width no rule uses any more, or
      -- not a bucket at all.
      stale[#stale + 1] = f
    else
      local list = buckets[g]
      if not list then
        list = {}
        buckets[g] = list
      end
      list[#list + 1] = {b, tonumber(fields[j + 1])}
    end
  end
  if #stale > 0 then call('HDEL', key, unpack(stale)) end
  for _, list in pairs(buckets) do
    table.sort(list, function(a, b) return a[1] < b[1] end)
  end

  local allowed, need = 1, 0
  local used, retry, newest, oldest = {}, {}, {}, {}
  for i, r in ipairs(rules) do
    local l, w, g = r[1], r[2], r[3]
    local lo = math.floor((now - w) / g)
    local list = buckets[g] or {}
    local c = 0
    for _, b in ipairs(list) do
      if b[1] >= lo then
        c = c + b[2]
        if not oldest[i] then oldest[i] = b[1] end
      end
    end
    used[i] = c
    retry[i] = 0
    newest[i] = list[#list] and list[#list][1] or nil
    local need = c + n - l
    if need > 0 then
      allowed = 0
      local acc = 0
      for _, b in ipairs(list) do
        if b[1] >= lo then
          acc = acc + b[2]
          if acc >= need then
            -- Bucket b stops counting once the window starts after it.
            retry[i] = (b[1] + 1) * g + w - now
            break
          end
        end
      end
      if retry[i] == 0 then retry[i] = w end
    end
  end

  local chal = false
  if allowed == 1 and gate then chal = gate(used) end
  if op == 1 and allowed == 1 and not chal then
    if not born then call('HSET', key, 'b', fmt(now)) end
    local done = {}
    for i, r in ipairs(rules) do
      local g = r[3]
      local b = math.floor(now / g)
      if not done[g] then
        done[g] = true
        call('HINCRBY', key, fmt(g) .. ':' .. fmt(b), n)
      end
      used[i] = used[i] + n
      newest[i] = b
      if not oldest[i] then oldest[i] = b end
    end
    -- Other instances count the units too, in buckets of their widths.
    for _, g in ipairs(extra) do
      if not done[g] then
        done[g] = true
        call('HINCRBY', key, fmt(g) .. ':' .. fmt(math.floor(now / g)), n)
      end
    end
    if hashed then
      need = now + maxspan
    else
      local ttl = math.ceil(maxspan / 1000) + 1
      if cnow ~= 0 then
        ttl = ttl + math.max(0, math.ceil((servertime() - cnow) / 1000))
      end
      call('PEXPIRE', key, ttl)
    end
  end

  local out = {pack('<dd', allowed, now)}
  for i, r in ipairs(rules) do
    local w, g = r[2], r[3]
    local reset, nxt = 0, 0
    if used[i] > 0 and newest[i] then
      reset = (newest[i] + 1) * g + w - now
      nxt = (oldest[i] + 1) * g + w - now
    end
    out[#out + 1] = pack('<dddd', used[i], retry[i], reset, nxt)
  end
  return table.concat(out), allowed, need, chal
end

register('buckets', function(keys, args)
  init()
  server, channel = nil, args[2]
  local blob = args[1]
  local pos = 1
  local out = {}
  for d = 1, #keys do
    local op, n, span, cnow, nr
    op, n, span, cnow, nr, pos = sunpack('<ddddd', blob, pos)
    op = op % FORMAT
    local more = op >= MORE
    if more then op = op - MORE end
    local rules = {}
    for i = 1, nr do
      local l, w, g
      l, w, g, pos = sunpack('<ddd', blob, pos)
      rules[i] = {l, w, g}
    end
    local nx
    local extra = {}
    nx, pos = sunpack('<d', blob, pos)
    for i = 1, nx do extra[i], pos = sunpack('<d', blob, pos) end
    local at = 0
    if op == 2 or op == RECORD then at, pos = sunpack('<d', blob, pos) end
    local now = cnow
    if now == 0 then now = servertime() end
    if op == RECORD then at = math.floor(now - at) end
    local ok, res
    local m
    if more then m, pos = readMore(blob, pos) end
    local k = keys[d]
    local gx = 0
    if op < 2 then gx = grantOf(sub(k, 1, -3)) end
    if gx > 0 then
      for i = 1, nr do rules[i][1] = rules[i][1] + gx end
      if more then for _, c in ipairs(m.cals) do c[1] = c[1] + gx end end
    end
    if gx < 0 then
      ok, res = true, exempt(now, nr, more and #m.cals or 0, more)
    elseif more then
      local function slide(sop, gate) return decideBuckets(k, sop, n, now, cnow, rules, span, extra, at, true, gate) end
      ok, res = pcall(runMore, k, op, n, now, cnow, at, m, slide, nr, true)
    else
      ok, res = pcall(decideBuckets, k, op, n, now, cnow, rules, span, extra, at)
    end
    if not ok then res = failed(res) elseif gx > 0 then res = granted(res, gx) end
    out[#out + 1] = res
  end
  if #out == 1 then return out[1] end
  return table.concat(out)
end)
