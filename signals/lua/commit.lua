-- A worker's commit for one partition: per lane, if nobody else advanced the lane since
-- the worker read its tracking, append the lane's new signals (trimming the signal stream
-- only at snapshot boundaries), update the tracking and acknowledge the write events.
-- Lanes whose tracking moved are left untouched and returned (the worker recomputes them).
-- KEYS: 1 writes stream, then per lane i: trk, sig, snaps
-- ARGV: 1 group, 2 lane count, 3 snapshots to keep, then per lane:
--   expected wv, v, ck, mode, wv, val, n, signal count, [signal json, is snapshot]*,
--   ack count, [entry id]*
local group = ARGV[1]
local lanes = tonumber(ARGV[2])
local keep = tonumber(ARGV[3])
local a = 4
local conflicts = {}
for i = 1, lanes do
  local k = 2 + (i - 1) * 3
  local trk, sig, snaps = KEYS[k], KEYS[k + 1], KEYS[k + 2]
  local nsig = tonumber(ARGV[a + 7])
  local after = a + 8 + 2 * nsig
  local nack = tonumber(ARGV[after])
  local current = redis.call('HGET', trk, 'wv') or '0'
  if current ~= ARGV[a] then
    conflicts[#conflicts + 1] = i
  else
    for s = 0, nsig - 1 do
      local id = redis.call('XADD', sig, '*', 'e', ARGV[a + 8 + 2 * s])
      if ARGV[a + 9 + 2 * s] == '1' then
        redis.call('RPUSH', snaps, id)
        if redis.call('LLEN', snaps) > keep then
          redis.call('LPOP', snaps)
          redis.call('XTRIM', sig, 'MINID', redis.call('LINDEX', snaps, 0))
        end
      end
    end
    redis.call('HSET', trk, 'v', ARGV[a + 1], 'ck', ARGV[a + 2], 'mode', ARGV[a + 3],
      'wv', ARGV[a + 4], 'val', ARGV[a + 5], 'n', ARGV[a + 6])
    for q = 1, nack do
      redis.call('XACK', KEYS[1], group, ARGV[after + q])
    end
  end
  a = after + nack + 1
end
return conflicts
