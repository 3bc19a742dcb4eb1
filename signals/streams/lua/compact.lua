-- Compact idle lanes of one partition: each lane's signal stream keeps one snapshot of
-- its last version, and its tracking says so. The snapshot list goes: the stream starts
-- at its one snapshot, so readers need no hint, and the retention of a lane written again
-- trims past an unlisted first snapshot as past a listed one (it trims at listed ones).
-- Per lane, atomically, and only when nothing moved since the worker read it: the
-- tracking still holds the version, processed write version and tail the worker read,
-- and the stream still ends at that tail (a commit in between changes the tracking or
-- the tail, and the lane is left as it is: it is no longer idle). Then either
--   * the last signal is a snapshot (no snapshot text given): the stream is trimmed to it;
--   * the last signal is a delta: the snapshot of the same version the worker built (the
--     text the chain rebuilds, checked against its cacheKey) is appended, and the stream
--     trimmed to it. No new version: a reader past the delta skips it (same version), a
--     reader behind it starts from it.
-- The tracking's tail, mode and signals-since-snapshot follow; its field 'cv' records the
-- version the compacted history starts at (replay tells compaction from retention by it).
-- Nothing read here is trusted: a key of another type leaves the lane as it is.
-- KEYS: per lane: trk, sig, snaps
-- ARGV: 1 MessagePack array, one map per lane: v, wv, tail (the tracking the worker read,
--   as stored), snapshot (the snapshot's JSON, or '' when the last signal is one), mac
--   (its MAC, '' when signals are not signed)
-- Returns one array per lane: {'ok', the stream's one id, entries removed} or {'moved'}
-- (the lane changed: not compacted) or {'type', key} or {'full'} (the stream takes no new id).
local lanes = cmsgpack.unpack(ARGV[1])

local function key_type(key)
  return redis.call('TYPE', key)['ok']
end

local out = {}
for i, lane in ipairs(lanes) do
  local k = (i - 1) * 3
  local trk, sig, snaps = KEYS[k + 1], KEYS[k + 2], KEYS[k + 3]
  local status = nil
  if key_type(trk) ~= 'hash' then status = {'type', trk}
  elseif key_type(sig) ~= 'stream' then status = {'type', sig}
  elseif key_type(snaps) ~= 'list' and key_type(snaps) ~= 'none' then status = {'type', snaps} end
  if status == nil then
    local cur = redis.call('HMGET', trk, 'v', 'wv', 'tail')
    local last = redis.call('XREVRANGE', sig, '+', '-', 'COUNT', 1)[1]
    if cur[1] ~= lane.v or cur[2] ~= lane.wv or cur[3] ~= lane.tail or last == nil or last[1] ~= lane.tail then
      status = {'moved'}
    end
  end
  if status == nil then
    local keep = lane.tail
    if lane.snapshot ~= '' then
      local id
      if lane.mac ~= '' then
        id = redis.pcall('XADD', sig, '*', 'e', lane.snapshot, 'm', lane.mac)
      else
        id = redis.pcall('XADD', sig, '*', 'e', lane.snapshot)
      end
      if type(id) == 'table' and id.err then
        if not string.find(id.err, 'exhausted', 1, true) then return redis.error_reply(id.err) end
        status = {'full'}
      else
        keep = id
      end
    end
    if status == nil then
      local removed = redis.call('XLEN', sig) - 1 -- every entry but the last, the one kept
      -- The stream is made again holding its one entry, at its id: a trim leaves the
      -- entries it deletes inside a node they share with a kept one (flagged, not freed),
      -- and a new node is pre-allocated at stream-node-max-bytes (4 KB by default); a
      -- stream loaded from its dump is sized to what it holds. Its last id stays the kept
      -- entry's, so the next signal's id follows it.
      local entry = redis.call('XRANGE', sig, keep, keep)[1]
      redis.call('DEL', sig)
      redis.call('XADD', sig, keep, unpack(entry[2]))
      redis.call('RESTORE', sig, 0, redis.call('DUMP', sig), 'REPLACE')
      redis.call('DEL', snaps)
      redis.call('HSET', trk, 'tail', keep, 'mode', 'snapshot', 'n', 1, 'cv', lane.v)
      status = {'ok', keep, removed}
    end
  end
  out[i] = status
end
return out
