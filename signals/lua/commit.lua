-- A worker's commit for one partition: per lane, if nobody else advanced the lane since
-- the worker read its tracking, append the lane's new signals (trimming the signal stream
-- only at snapshot boundaries), update the tracking and acknowledge the write events.
-- Lanes whose tracking moved are left untouched and returned (the worker recomputes them).
-- KEYS: 1 writes stream, then per lane i: trk, sig, snaps
-- ARGV: 1 group, 2 snapshots to keep, 3 JSON array, one item per lane:
--   [expected wv, v, ck, mode, wv, n, [signal json...], [is snapshot 0/1...], [entry id...]]
local group = ARGV[1]
local keep = tonumber(ARGV[2])
local lanes = cjson.decode(ARGV[3])
local conflicts = {}
for i, lane in ipairs(lanes) do
  local k = 2 + (i - 1) * 3
  local trk, sig, snaps = KEYS[k], KEYS[k + 1], KEYS[k + 2]
  local current = tonumber(redis.call('HGET', trk, 'wv') or '0')
  if current ~= lane[1] then
    conflicts[#conflicts + 1] = i
  else
    local signals, snapshot = lane[7], lane[8]
    for s = 1, #signals do
      local id = redis.call('XADD', sig, '*', 'e', signals[s])
      if snapshot[s] == 1 then
        redis.call('RPUSH', snaps, id)
        if redis.call('LLEN', snaps) > keep then
          redis.call('LPOP', snaps)
          redis.call('XTRIM', sig, 'MINID', redis.call('LINDEX', snaps, 0))
        end
      end
    end
    redis.call('HSET', trk, 'v', lane[2], 'ck', lane[3], 'mode', lane[4], 'wv', lane[5],
      'n', lane[6])
    local acks = lane[9]
    if #acks > 0 then redis.call('XACK', KEYS[1], group, unpack(acks)) end
  end
end
return conflicts
