-- ratekit refund: remove the units one take recorded.
-- KEYS[1] the ZSET; ARGV[1] call ID; ARGV[2] units.
local key = KEYS[1]
local id = ARGV[1]
local n = tonumber(ARGV[2])
local members = {}
local removed = 0
for j = 1, n do
  if j == 1 then
    members[#members + 1] = id
  else
    members[#members + 1] = id .. ':' .. j
  end
  if #members >= 1000 then
    removed = removed + redis.call('ZREM', key, unpack(members))
    members = {}
  end
end
if #members > 0 then
  removed = removed + redis.call('ZREM', key, unpack(members))
end
return removed
