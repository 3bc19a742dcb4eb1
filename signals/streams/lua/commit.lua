-- A worker's commit for one partition. Per lane, atomically: for a lane planned without
-- reading its document (the steady state), check the document is what the plan assumed;
-- check the lane's keys have their types, compare-and-set on the tracking's processed
-- write version, check the signal stream still ends at the signal the tracking names,
-- then append the lane's new signals (trimming only at snapshot boundaries) and store the
-- tracking. The write events of the lanes committed are acknowledged together, one XACK
-- per partition (a call per lane cost more than the acknowledgement). A lane that fails
-- a check is left untouched and its status says why; the worker recomputes it. Nothing read here is
-- trusted: ids are checked before use. Redis does not roll a script back, and the call writes
-- lane after lane: before its first write it checks every write stream's type and asks the
-- caller's ACL about every command it may run on each key, reads included (see preflight),
-- so that a refusal fails the call as a whole, having written (and acknowledged) nothing.
-- One call commits one or more partitions (on a single server, as many as hold up to 256
-- events together; one on a Redis Cluster, where a script's keys share a slot): the
-- per-call cost is paid once.
-- KEYS: per partition, in order: its writes stream, then per lane: trk, sig, snaps
-- ARGV: 1 group, 2 signals to retain per lane, 3 a MessagePack array (fields by name, as
--   JSON would carry them; cmsgpack decodes it faster than cjson), one map per partition:
--   {lanes = one object per lane (below)},
--   4 age to retain in ms (0: none; see the retention section):
--   expected   the tracking's wv exactly as the worker read it ('' when absent, '!type' when
--              the tracking key had another type, '!junk' when it was not text: replaced)
--   expected_v the tracking's v as read: with wv, the compare-and-set (a re-snapshot keeps wv
--              and moves v, so wv alone would let a commit planned before it through)
--   tail       the stream id the signal stream must end at ('' = empty or absent), or
--              false when the lane is being re-snapshotted (no tail check)
--   repair     1: delete lane keys of the wrong type, and with reset=1 the signal stream and
--              snapshot list, before appending (the first signal is then a snapshot);
--              absent: 0
--   fields     the tracking hash to store, as HSET's name/value pairs, but for its tail
--              (the id of the lane's last signal once this commit is done: added here)
--   version    the lane version of the last signal (the tracking's v)
--   tail_before the tracking's tail before this commit (stored when no signal is appended)
--   signals    the number of the lane's signals: their JSON texts follow the plan argument as
--              arguments of their own (ARGV 5...), lane after lane, partition after
--              partition (escaped into the array, their decoding cost the script more
--              than anything else it does with them)
--   macs, snapshot, acks   the signals' MACs ('' = none; absent: none is signed), 0/1
--              per signal (absent: none is a snapshot), the write entry ids to acknowledge
--   count      1: acknowledge the lane's entries on their own and return how many were pending
--   check      absent, or (a lane planned without reading its document: the steady state)
--              what the plan assumed, verified here before anything of the lane is written:
--              doc (the lane's document hash key), version (the batch's highest of the
--              lane), format, stops (ids known to be on the lane's chain: the batch's newest
--              event of the lane, and the newest id an earlier walk found), thread and owner
--              (thread lanes: the owner record's key and the resource the events name;
--              absent otherwise). The document and the owner record are read only, so they
--              are not declared (EVAL would need write access to them); they share the slot.
-- Returns one array per partition, of one item per lane: {'ok', tail id, ids a check walked...} (with
-- count=1 in the lane's plan: {'okc', how many of its entries were still pending, tail id, ...}), {'conflict'},
-- {'resnap'}, {'adopted'} (signals a failed commit appended without its tracking became the
-- tracking: the lane is planned again), {'type', keys}, {'reset', key} (the signal stream takes no new entry: the
-- lane needs a new one) or {'unverified'} (the check failed: the lane is planned again
-- from its document). Or the call fails as a whole, having written nothing: NOPERM naming the
-- command and key the caller's ACL refuses, WRONGTYPE naming a write stream of another type.
local group = ARGV[1]
local partitions = cmsgpack.unpack(ARGV[3])
local wanted = {'hash', 'stream', 'list'}
local walk_limit = 32
local next_signal = 5
for _, partition in ipairs(partitions) do
  for _, lane in ipairs(partition.lanes) do
    local texts = {}
    for s = 1, lane.signals do
      texts[s] = ARGV[next_signal]
      next_signal = next_signal + 1
    end
    lane.signals = texts
    lane.macs = lane.macs or {}
    lane.snapshot = lane.snapshot or {}
  end
end

local function has_snapshot(flags)
  for _, flag in ipairs(flags) do
    if flag == 1 then return true end
  end
  return false
end

-- Before the first write of the call: each partition's write stream is a stream (or
-- absent), and the caller's ACL lets every command the call may run on each key run,
-- reads included (see _checks.lua). The call goes through its partitions and lanes one
-- after another, so a command refused on a later lane (a read too: retention's XRANGE
-- after a snapshot, say) would fail it after earlier lanes were written and
-- acknowledged; instead the call fails as a whole, having written nothing, naming the
-- command and the key. Each (command, key) the lane's plan may run is probed once:
-- always HMGET and HSET of the tracking, XREVRANGE of the stream (but under repair),
-- XRANGE of it where a tail is checked (adoption) or a snapshot appended (retention),
-- XADD when it has signals; with a snapshot TYPE, RPUSH, LRANGE, LTRIM and DEL of the
-- list and XTRIM of the stream; under repair TYPE and DEL of each key (and DEL of the
-- three together, as the repair sends it); with a document check the document's HMGET,
-- the owner record's HGET and the write stream's XRANGE (its walk). A steady delta lane
-- costs six probes (about 0.3 us each), a thread lane's seven; each is asked as it comes
-- (refused, not a list for first_refusal), so a probe leaves no table to collect.
local function lane_refusal(trk, sig, snaps, lane)
  local snapshot = has_snapshot(lane.snapshot)
  local denied = refused('HMGET', trk, 'wv') or refused('HSET', trk, 'f', 'v')
  if denied then return denied end
  if lane.repair == 1 then
    denied = refused('TYPE', trk) or refused('TYPE', sig) or refused('TYPE', snaps) or refused('DEL', trk)
      or refused('DEL', sig) or refused('DEL', snaps) or refused('DEL', trk, sig, snaps)
  else
    denied = refused('XREVRANGE', sig, '+', '-', 'COUNT', '1')
      or (snapshot and (refused('TYPE', snaps) or refused('DEL', snaps)))
  end
  if denied then return denied end
  if snapshot or (lane.repair ~= 1 and lane.tail ~= false) then denied = refused('XRANGE', sig, '-', '+') end
  if not denied and #lane.signals > 0 then denied = refused('XADD', sig, '*', 'e', 'x', 'm', 'x') end
  if not denied and snapshot then
    denied = refused('RPUSH', snaps, 'x') or refused('LRANGE', snaps, '0', '-1') or refused('LTRIM', snaps, '0', '-1')
      or refused('XTRIM', sig, 'MINID', '0-1')
  end
  local check = lane.check
  if not denied and check then
    denied = refused('HMGET', check.doc, 'version') or (check.thread and refused('HGET', check.thread, 'resource'))
  end
  return denied or nil
end

-- nil, or the error to fail the call with (see above)
local function preflight()
  if redis.acl_check_cmd ~= nil then -- Redis 6.2 has no ACL to ask (see _checks.lua)
    local base = 1
    for _, partition in ipairs(partitions) do
      local writes = KEYS[base]
      local denied = refused('TYPE', writes) or refused('XACK', writes, group, '0-1')
      local walks = false
      for i, lane in ipairs(partition.lanes) do
        if denied then break end
        local k = base + 1 + (i - 1) * 3
        denied = lane_refusal(KEYS[k], KEYS[k + 1], KEYS[k + 2], lane)
        walks = walks or lane.check ~= nil
      end
      if not denied and walks then denied = refused('XRANGE', writes, '-', '+') end
      if denied then return denied end
      base = base + 1 + 3 * #partition.lanes
    end
  end
  local base = 1
  for _, partition in ipairs(partitions) do
    local writes = KEYS[base]
    local t = redis.call('TYPE', writes)['ok']
    if t ~= 'stream' and t ~= 'none' then
      return 'WRONGTYPE ' .. writes .. ' is a ' .. t .. ', not a stream: nothing was written'
    end
    base = base + 1 + 3 * #partition.lanes
  end
  return nil
end

local function is_id(s)
  return type(s) == 'string' and string.match(s, '^%d+%-%d+$') ~= nil
end

local function id_le(a, b)
  local am, as = string.match(a, '^(%d+)%-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)%-(%d+)$')
  am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)
  return am < bm or (am == bm and as <= bs)
end

local function mistyped(key, want)
  local t = redis.call('TYPE', key)['ok']
  return t ~= 'none' and t ~= want
end

-- ===== retention (signals.core.retention): trim only at snapshot boundaries ======-- A lane keeps at least `retain_signals` signals and every signal younger than
-- `retain_age_ms`. The snapshot list holds the ids of the lane's retained snapshots, oldest
-- first; after a commit appends a snapshot, the stream is trimmed to the newest listed
-- snapshot S that leaves both floors intact: the signals from S on (the lane's last
-- version - S's version + 1) are at least retain_signals, and S is no younger than the
-- age (so is every signal before it). The oldest retained signal is then always a
-- snapshot. S's version is read from its own stream entry, which must be one of our
-- snapshots: nothing else is needed per chain, and nothing in the list is trusted. A list
-- entry that is not an id, lies ahead of the newest snapshot, or names no snapshot of the
-- stream restarts the list at the newest snapshot (no trim: the stream keeps more until
-- that snapshot is old enough). At most `retain_walk` entries are looked at per commit.
-- A stream cut by hand (an operator's XTRIM MAXLEN, say) can start at a delta, cut off
-- from its snapshot: it is first trimmed to its first snapshot, whatever the floors say
-- (the deltas before it rebuild nothing, and every signal from it on does), and the
-- listed ids before that snapshot leave the list (see repair_cut).
local retain_signals = tonumber(ARGV[2])
local retain_age_ms = tonumber(ARGV[4]) or 0
local retain_walk = 64
local SNAPSHOT_PREFIX = '{"id":"working-memory","mode":"snapshot",'

local function id_ms(id)
  return tonumber(string.match(id, '^(%d+)%-'))
end

-- the lane version of a stream entry that is one of our snapshots, or nil
local function entry_snapshot_version(entry)
  local fields, payload = entry[2], nil
  for f = 1, #fields - 1, 2 do
    if fields[f] == 'e' then payload = fields[f + 1] break end
  end
  if type(payload) ~= 'string' or string.sub(payload, 1, #SNAPSHOT_PREFIX) ~= SNAPSHOT_PREFIX then return nil end
  -- the one unescaped "version" key of a signal's JSON (string values escape their quotes)
  return tonumber(string.match(payload, '"version":(%d+)'))
end

-- the lane version of the snapshot at stream id `id`, or nil when there is none
local function snapshot_version(sig, id)
  local entry = redis.call('XRANGE', sig, id, id)[1]
  if not entry then return nil end
  return entry_snapshot_version(entry)
end

-- Where a stream cut by hand must start again: nil when it starts at one of our snapshots
-- (the usual case: one XRANGE COUNT 1), else the id of its first snapshot, scanning at
-- most cut_scan entries past its first; nil too when none is found there (a chain longer
-- than that, or foreign entries): the stream is then left as it is, since nothing that
-- may still rebuild is ever trimmed.
local cut_scan = 512
local function cut_start(sig)
  local head = redis.call('XRANGE', sig, '-', '+', 'COUNT', 1)[1]
  if head == nil or entry_snapshot_version(head) ~= nil then return nil end
  local cursor, seen = '(' .. head[1], 0
  while seen < cut_scan do
    local entries = redis.call('XRANGE', sig, cursor, '+', 'COUNT', 64)
    if #entries == 0 then break end
    for _, entry in ipairs(entries) do
      if entry_snapshot_version(entry) ~= nil then return entry[1] end
    end
    seen = seen + #entries
    cursor = '(' .. entries[#entries][1]
  end
  return nil
end

-- Start a stream cut by hand at its first snapshot again: trim it there, and drop the
-- listed ids before it (junk included) from the front of the snapshot list (a page of
-- retain_walk at a time: what is left of them restarts the list at a later walk).
local function repair_cut(sig, snaps)
  local start = cut_start(sig)
  if start == nil then return end
  redis.call('XTRIM', sig, 'MINID', start)
  local listed, gone = redis.call('LRANGE', snaps, 0, retain_walk - 1), 0
  for _, id in ipairs(listed) do
    if is_id(id) and id_le(start, id) then break end
    gone = gone + 1
  end
  if gone > 0 then redis.call('LTRIM', snaps, gone, -1) end
end

-- trim `sig` after `newest` (the id of the snapshot just appended, at version `newest_v`,
-- the lane's last version `last_v`) was pushed on `snaps`
local function retain(sig, snaps, newest, newest_v, last_v)
  local cutoff = id_ms(newest) - retain_age_ms
  repair_cut(sig, snaps)
  local keep_at, keep_id = nil, nil
  local i, ids, done = 0, {}, false
  while not done and i < retain_walk do -- pages of 8: the walk usually stops at the second entry
    if i % 8 == 0 then
      ids = redis.call('LRANGE', snaps, i, i + 7)
      if #ids == 0 then break end
    end
    local id = ids[i % 8 + 1]
    if id == nil then break end
    i = i + 1
    local v
    if not is_id(id) or not id_le(id, newest) then v = nil
    elseif id == newest then v = newest_v
    else v = snapshot_version(sig, id) end
    if v == nil or v > last_v then -- a list we did not write: start it again at this snapshot
      redis.call('DEL', snaps)
      redis.call('RPUSH', snaps, newest)
      return
    end
    if id_ms(id) > cutoff or last_v - v + 1 < retain_signals then
      done = true
    else
      keep_at, keep_id = i, id
    end
  end
  if keep_id == nil then return end
  if keep_at > 1 then redis.call('LTRIM', snaps, keep_at - 1, -1) end
  redis.call('XTRIM', sig, 'MINID', keep_id)
end
-- ===== end of retention ==================================================================
-- Whether the lane's document is still what its plan assumed: its version, event id and
-- format, read from the document hash itself (never from a key a writer can set on the
-- side: a walk anchored there took a hand-made event for the document's), are well
-- formed, of the events' format, at or past their versions, its thread owned by the events' resource,
-- and its event chain leads back to the batch's newest event (or to an id already known
-- to be on the chain) within walk_limit steps. A genuine event names the one before it
-- (field p, see write.lua), so each id the walk passes is genuine. Returns the ids walked
-- (nil: the check failed).
local function verified(writes, check)
  local doc = redis.pcall('HMGET', check.doc, 'version', 'eid', 'format')
  if doc.err then return nil end -- not a hash: the careful path reports it
  local version, eid, format = doc[1], doc[2], doc[3]
  if type(version) ~= 'string' or not string.match(version, '^%d+$') or #version > 16 or not is_id(eid)
      or format ~= check.format or tonumber(version) < check.version then
    return nil
  end
  if check.thread and redis.pcall('HGET', check.thread, 'resource') ~= check.owner then return nil end
  local stops = check.stops
  local cursor, path = eid, {}
  for _ = 1, walk_limit do
    for s = 1, #stops do
      if stops[s] == cursor then return path end
    end
    path[#path + 1] = cursor
    local reply = redis.pcall('XRANGE', writes, cursor, cursor)
    if reply.err or reply[1] == nil then return nil end
    local fields, prev = reply[1][2], nil
    for f = 1, #fields, 2 do
      if fields[f] == 'p' then prev = fields[f + 1] end
    end
    if not is_id(prev) then return nil end
    cursor = prev
  end
  return nil
end

-- A commit that appended a lane's signals and then failed before storing its tracking
-- (a command refused after the first write: Redis does not roll a script back) left
-- signals after the tail the tracking names. The worker retrying it plans the same
-- signals again: when the entries after the tail are the first of the signals this commit
-- would append (the same JSON, byte for byte but the emission time, in order), the
-- tracking is repaired from the last of them (version, cacheKey, mode, write version,
-- signals since the snapshot, tail) instead of appending them again; the worker then
-- plans the lane anew from there. Anything else after the tail (a signal some other
-- writer appended, however well formed: the lane's next version with a matching cacheKey
-- proves nothing) is never adopted: the lane is re-snapshotted past it ('resnap').
-- Returns whether it repaired the tracking.
local adopt_max = 16
-- A signal's JSON without its emittedAt field (the worker's encoding puts it after the
-- ids; a quote inside a string value is escaped, so only the field itself matches).
local function untimed(payload)
  return (string.gsub(payload, ',"emittedAt":"[^"]*"', '', 1))
end
local function adopt(trk, sig, lane)
  if lane.tail ~= '' and not is_id(lane.tail) then return false end
  local cur = redis.call('HMGET', trk, 'v', 'n')
  local v = tonumber(cur[1] or '0') or -1
  local n = tonumber(cur[2] or '0') or -1
  if v < 0 or n < 0 or (cur[1] or '') ~= lane.expected_v then return false end
  local from = lane.tail == '' and '-' or '(' .. lane.tail
  local limit = math.min(adopt_max, #lane.signals)
  local after = redis.call('XRANGE', sig, from, '+', 'COUNT', limit + 1)
  if #after == 0 or #after > limit then return false end
  local last = nil
  for k, entry in ipairs(after) do
    -- the entry holds the planned signal's JSON, byte for byte but its emission time (a
    -- retry stamps its own), and no other field; with a MAC planned, that MAC (which covers
    -- the time: a signed lane adopts nothing, it is re-snapshotted)
    local fields, mac = entry[2], lane.macs[k] or ''
    if #fields ~= (mac == '' and 2 or 4) or fields[1] ~= 'e' or type(fields[2]) ~= 'string'
        or untimed(fields[2]) ~= untimed(lane.signals[k]) or (mac ~= '' and (fields[3] ~= 'm' or fields[4] ~= mac)) then
      return false
    end
    local planned = cjson.decode(lane.signals[k]) -- the worker's own JSON
    if planned.version ~= v + 1 then return false end
    v = v + 1
    if planned.mode == 'snapshot' then n = 1 else n = n + 1 end
    last = {entry[1], planned}
  end
  local signal = last[2]
  redis.call('HSET', trk, 'v', v, 'ck', signal.cacheKey, 'mode', signal.mode,
    'wv', string.format('%d', signal.writeVersion), 'n', n, 'tail', last[1])
  return true
end

-- One partition's lanes, their keys from KEYS[base] on (its writes stream, then 3 per lane).
local function commit_partition(base, lanes)
  local writes = KEYS[base]
  local out, acks = {}, {} -- the write entries of the lanes committed: acknowledged together
  local function acknowledge()
    for a = 1, #acks, 1000 do -- unpack takes a few thousand values at most
      redis.call('XACK', writes, group, unpack(acks, a, math.min(a + 999, #acks)))
    end
  end
  for i, lane in ipairs(lanes) do
    local k = base + 1 + (i - 1) * 3
    local trk, sig, snaps = KEYS[k], KEYS[k + 1], KEYS[k + 2]
    local status = nil
    local walked = lane.check and verified(writes, lane.check)
    if lane.repair == 1 then
      -- a lane under repair: keys of another type go (the worker saw one, or the tracking is junk)
      local bad = {}
      for j, key in ipairs({trk, sig, snaps}) do
        if mistyped(key, wanted[j]) then bad[#bad + 1] = key end
      end
      if #bad > 0 then redis.call('DEL', unpack(bad)) end
      local cur = redis.call('HMGET', trk, 'wv', 'v')
      local current, current_v = cur[1] or '', cur[2] or ''
      if lane.expected == '!type' and bad[1] == trk then current, current_v = '!type', lane.expected_v end
      if lane.expected == '!junk' then
        -- a value JSON cannot carry: replaced, unless a worker has written a clean one meanwhile
        if string.match(current, '^%d*$') then status = {'conflict'} end
      elseif current ~= lane.expected or (lane.expected_v ~= '!junk' and current_v ~= lane.expected_v) then
        status = {'conflict'} -- wv and v: another worker's repair keeps wv but moves v
      end
    else
      -- the usual path: a key of another type shows as an error of the command that reads it
      local cur = redis.pcall('HMGET', trk, 'wv', 'v')
      if lane.check and not walked then
        status = {'unverified'}
      elseif cur.err then
        status = {'type', trk}
      elseif (cur[1] or '') ~= lane.expected or (cur[2] or '') ~= lane.expected_v then
        status = {'conflict'}
      elseif has_snapshot(lane.snapshot) and mistyped(snaps, 'list') then
        status = {'type', snaps}
      else
        local last = redis.pcall('XREVRANGE', sig, '+', '-', 'COUNT', 1)
        if last.err then
          status = {'type', sig}
        elseif lane.tail ~= false and ((last[1] and last[1][1]) or '') ~= lane.tail then
          status = adopt(trk, sig, lane) and {'adopted'} or {'resnap'}
        end
      end
    end
    local tail = lane.tail_before
    if status == nil then
      if lane.repair == 1 and lane.reset == 1 then redis.call('DEL', sig, snaps) end
      local newest, newest_s = nil, nil -- the last snapshot appended (retention)
      for s = 1, #lane.signals do
        local id
        local mac = lane.macs[s]
        if mac and mac ~= '' then
          id = redis.pcall('XADD', sig, '*', 'e', lane.signals[s], 'm', mac)
        else
          id = redis.pcall('XADD', sig, '*', 'e', lane.signals[s])
        end
        if type(id) == 'table' and id.err then
          -- no id left after a foreign entry (the largest possible id): nothing of this lane
          -- was written yet (the first XADD is the lane's first write); it needs a new stream.
          -- Anything else (OOM above all) is the server's: the whole script fails as it is.
          if s == 1 and string.find(id.err, 'exhausted', 1, true) then status = {'reset', sig} break end
          acknowledge() -- the lanes committed before this one stay committed
          return nil, id.err -- the whole call fails with it, as it is
        end
        tail = id
        if lane.snapshot[s] == 1 then
          redis.call('RPUSH', snaps, id)
          newest, newest_s = id, s
        end
      end
      if newest then -- signals of one commit are consecutive versions, ending at lane.version
        local last_v = tonumber(lane.version)
        retain(sig, snaps, newest, last_v - #lane.signals + newest_s, last_v)
      end
    end
    if status == nil then
      local hset = lane.fields
      hset[#hset + 1] = 'tail'
      hset[#hset + 1] = tail
      redis.call('HSET', trk, unpack(hset))
      local counted = nil
      if lane.count == 1 and #lane.acks > 0 then -- entries another worker may have processed too
        counted = redis.call('XACK', writes, group, unpack(lane.acks))
      else
        for _, id in ipairs(lane.acks) do acks[#acks + 1] = id end
      end
      status = counted and {'okc', counted, tail} or {'ok', tail}
      for _, id in ipairs(walked or {}) do status[#status + 1] = id end
    end
    out[i] = status
  end
  acknowledge()
  return out
end

local denied = preflight()
if denied then return redis.error_reply(denied) end
local results, base = {}, 1
for p, partition in ipairs(partitions) do
  local out, err = commit_partition(base, partition.lanes)
  if err then return redis.error_reply(err) end -- the server's condition (OOM above all), as it is
  results[p] = out
  base = base + 1 + 3 * #partition.lanes
end
return results
