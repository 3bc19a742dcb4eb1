-- Read the worker's tracking of several lanes of one partition, and whether each lane's
-- document exists, in one call.
-- KEYS: per lane i: trk, doc.  Returns 6 values per lane: v ck mode wv n exists
local out = {}
for i = 1, #KEYS, 2 do
  local t = redis.call('HMGET', KEYS[i], 'v', 'ck', 'mode', 'wv', 'n')
  for j = 1, 5 do out[#out + 1] = t[j] end
  out[#out + 1] = redis.call('EXISTS', KEYS[i + 1])
end
return out
