-- The head of ratekit's decision scripts, prepended to each in Go: the
-- arguments they share and the time of the decision.
-- KEYS[1]  the key of one (policy, key)
-- ARGV[1]  the mode ('1' take, '0' peek; 'r' refund for sliding buckets)
-- ARGV[2]  units (n)
-- ARGV[3]  call ID, unique per take
-- ARGV[4]  client time in µs, or '' to use the server's TIME (for a
--          sliding-buckets refund: the take's time)
local key = KEYS[1]
local mode = ARGV[1]
local n = tonumber(ARGV[2])
local id = ARGV[3]
local now
if ARGV[4] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[4])
end
local function fmt(x) return string.format('%.0f', x) end
