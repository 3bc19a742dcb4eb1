-- Compact idle lanes of one partition: each lane's signal stream keeps one snapshot of
-- its last version, and its tracking says so. The snapshot list goes: the stream starts
-- at its one snapshot, so readers need no hint, and the retention of a lane written again
-- trims past an unlisted first snapshot as past a listed one (it trims at listed ones).
-- Per lane, atomically, and only when nothing moved since the worker read it: the
-- tracking still holds the version, processed write version and tail the worker read,
-- and the stream still ends at that tail (a commit in between changes the tracking or
-- the tail, and the lane is left as it is: it is no longer idle). Then either
--   * the last signal is a snapshot (no snapshot text given): the stream keeps it alone;
--   * the last signal is a delta: the stream keeps, in its place (same id), the snapshot of
--     the same version the worker built (the text the chain rebuilds, checked against its
--     cacheKey). No new version and no new id: a reader past the delta has the version, a
--     reader behind it starts from the snapshot.
-- The tracking's mode and signals-since-snapshot follow; its field 'cv' records the
-- version the compacted history starts at (replay tells compaction from retention by it).
-- Nothing read here is trusted: a key of another type leaves the lane as it is.
-- A lane is rewritten in several commands (DEL, XADD, DUMP and RESTORE of the stream, DEL of
-- the snapshot list, HSET of the tracking), lane after lane, and Redis does not roll a
-- script back. So before the first write of the call the plan is checked (3 keys and every
-- field a string per lane), and the caller's ACL must let every command the call may run on
-- each lane's keys run, reads included (see _checks.lua); otherwise the call fails as a
-- whole, having written nothing, with an error naming the command and the key refused.
-- Past those checks no command fails: the types are checked before a lane is written, the
-- tail id is one the stream holds, and the stream is empty when the entry takes that id again.
-- KEYS: per lane: trk, sig, snaps
-- ARGV: 1 MessagePack array, one map per lane: v, wv, tail (the tracking the worker read,
--   as stored), snapshot (the snapshot's JSON, or '' when the last signal is one), mac
--   (its MAC, '' when signals are not signed), kid (the id of the key that made the MAC, '':
--   none; the tracking's kid follows it when a snapshot is given)
-- Returns one array per lane: {'ok', the stream's one id (the tail), entries removed} or
-- {'moved'} (the lane changed: not compacted) or {'type', key}; or the call fails as a whole,
-- having written nothing: NOPERM naming the command and key the caller's ACL refuses, ERR
-- naming what of the plan is missing.
local lanes = cmsgpack.unpack(ARGV[1])
local PLAN_FIELDS = {'v', 'wv', 'tail', 'snapshot', 'mac', 'kid'}

-- Before the first write of the call (see the header): nil, or the error to fail it with.
local function preflight()
  if type(lanes) ~= 'table' or #KEYS ~= 3 * #lanes then
    return 'ERR compaction plan: not 3 keys per lane (' .. #KEYS .. ' keys): nothing was written'
  end
  local checks = {}
  for i, lane in ipairs(lanes) do
    if type(lane) ~= 'table' then return 'ERR compaction plan: lane ' .. i .. ' is not a map: nothing was written' end
    for _, name in ipairs(PLAN_FIELDS) do
      if type(lane[name]) ~= 'string' then
        return 'ERR compaction plan: lane ' .. i .. ' has no text field ' .. name .. ': nothing was written'
      end
    end
    local k = (i - 1) * 3
    local trk, sig, snaps = KEYS[k + 1], KEYS[k + 2], KEYS[k + 3]
    checks[#checks + 1] = {'TYPE', trk}
    checks[#checks + 1] = {'TYPE', sig}
    checks[#checks + 1] = {'TYPE', snaps}
    checks[#checks + 1] = {'HMGET', trk, 'v', 'wv', 'tail'}
    checks[#checks + 1] = {'XREVRANGE', sig, '+', '-', 'COUNT', '1'}
    if lane.snapshot == '' then checks[#checks + 1] = {'XRANGE', sig, '-', '+'} end
    checks[#checks + 1] = {'XLEN', sig}
    checks[#checks + 1] = {'DEL', sig}
    checks[#checks + 1] = {'XADD', sig, '*', 'e', 'x', 'm', 'x'}
    checks[#checks + 1] = {'DUMP', sig}
    checks[#checks + 1] = {'RESTORE', sig, '0', 'x', 'REPLACE'}
    checks[#checks + 1] = {'DEL', snaps}
    checks[#checks + 1] = {'HSET', trk, 'mode', 'snapshot'}
  end
  return first_refusal(checks)
end

local function key_type(key)
  return redis.call('TYPE', key)['ok']
end

local denied = preflight()
if denied then return redis.error_reply(denied) end
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
    -- The stream is made again holding one entry at the tail's id: the snapshot the
    -- worker built, or the tail itself when it is one. Keeping the id keeps the tail every
    -- worker's tracking (and cache) names, so no commit in flight finds the stream moved
    -- under it, and a subscriber past the tail finds nothing new. Made again, not trimmed:
    -- a trim leaves the entries it deletes inside a node they share with a kept one
    -- (flagged, not freed), and a new node is pre-allocated at stream-node-max-bytes (4 KB
    -- by default); a stream loaded from its dump is sized to what it holds.
    local fields
    if lane.snapshot == '' then
      fields = redis.call('XRANGE', sig, lane.tail, lane.tail)[1][2]
    elseif lane.mac ~= '' then
      fields = {'e', lane.snapshot, 'm', lane.mac}
    else
      fields = {'e', lane.snapshot}
    end
    local removed = redis.call('XLEN', sig) - 1 -- every entry but the tail's
    redis.call('DEL', sig)
    redis.call('XADD', sig, lane.tail, unpack(fields))
    redis.call('RESTORE', sig, 0, redis.call('DUMP', sig), 'REPLACE')
    redis.call('DEL', snaps)
    if lane.snapshot ~= '' then -- signed by this worker's key (or none): the tracking names it
      redis.call('HSET', trk, 'mode', 'snapshot', 'n', 1, 'cv', lane.v, 'kid', lane.kid)
    else
      redis.call('HSET', trk, 'mode', 'snapshot', 'n', 1, 'cv', lane.v)
    end
    status = {'ok', lane.tail, removed}
  end
  out[i] = status
end
return out
