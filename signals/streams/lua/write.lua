-- One working-memory write: idempotency, thread owner, compare-and-set on the version,
-- store the document and append the write event, atomically on one slot.
-- The event's field p is the id of the lane's previous write event (the document's eid,
-- '' for the first), and the document records its own event's id as eid: the genuine
-- events of a lane form a chain a worker can check, anchored in the document and in its
-- own tracking, so an event appended to the stream by anyone else is recognised. The
-- document also keeps the lane's last event ids (between CHAIN_IDS / 2 and CHAIN_IDS),
-- oldest first, in two fields: 'chain0' (the older block) then 'chain' (the newest ids,
-- ending at eid), the same links as p: a worker behind by a backlog places events on them
-- without walking the stream. A write extends 'chain', and when that block is full it
-- becomes 'chain0' and 'chain' starts again from its last id (the one the blocks share,
-- which shows the worker they follow each other) and the new id: one field of about 2 KB,
-- rewritten on every write, cost more than the rest of this script (measured: 8.5 of
-- 16 us a write); a block of half that is rewritten at half the size, and the copy
-- into 'chain0' happens once a block. A chain that does not end at eid is started again
-- from eid ('chain0' goes).
-- KEYS: 1 doc, 2 writes stream, 3 idempotency key (or doc when none), 4 thread key
--       (or doc when no owner check here), 5 lanes set
-- ARGV: 1 expected version, 2 new version, 3 data, 4 format, 5 event json,
--       6 owner resource ('' = no check), 7 idempotency ttl s, 8 lane, 9 now iso, 10 scope,
--       11 the request's fingerprint (hex; '' = none): stored with the idempotency key's
--       version (the caller tells a retry from another request by it)
-- Nothing is written until every check has passed, and no command that writes can fail
-- then: Redis does not roll a script back, so a key of another type (a WRONGTYPE error half
-- way) would leave the write half done. The keys read first are read with pcall (their
-- error is the check); the lanes set is only written, so its type is checked. A key of
-- another type is refused as {'type', key}, naming it. Every read comes before the first
-- write; a read the caller's ACL refuses fails the write as it is, naming the command and
-- the key (never as a key of another type: an operator would delete it), and the commands
-- that write are asked of the ACL before the first of them (see _checks.lua).
local function failed(reply)
  return type(reply) == 'table' and reply.err ~= nil
end
-- the answer to a read that failed: {'type', key}, or the error (checked: the read is the
-- command probed, with its arguments)
local function read_failed(reply, ...)
  local key = select(2, ...)
  if string.find(reply.err, 'WRONGTYPE', 1, true) then return {'type', key} end
  return redis.error_reply(refused(...) or reply.err)
end
local claim = false -- the thread's owner record, created once the write is sure
if ARGV[6] ~= '' then -- before the idempotency key: another resource's retry is refused too
  local owner = redis.pcall('HGET', KEYS[4], 'resource')
  if failed(owner) then return read_failed(owner, 'HGET', KEYS[4], 'resource') end
  if owner and owner ~= ARGV[6] then return {'owner', owner} end
  claim = not owner
end
if KEYS[3] ~= KEYS[1] then
  local prev = redis.pcall('GET', KEYS[3])
  if failed(prev) then return read_failed(prev, 'GET', KEYS[3]) end
  if prev then
    -- '<version> <request fingerprint>' (a key stored before fingerprints: '<version>'),
    -- returned as it is stored: the caller checks it, and confirms it unchanged
    return {'dup', prev}
  end
end
local CHAIN_IDS = 128
local BLOCK_BYTES = CHAIN_IDS / 2 * 16 -- ids of this time's length (13 digits, '-', a short sequence) and a space
local cur = redis.pcall('HMGET', KEYS[1], 'version', 'format', 'eid', 'chain')
if failed(cur) then return read_failed(cur, 'HMGET', KEYS[1], 'version') end
-- a decimal integer of at most 16 digits, as every reader parses it (tonumber also takes
-- '0.5', '1e400', '0x1' and ' 1': a conflict then named 'inf' or '1e+20', and '0x1' passed
-- the compare-and-set as version 1)
if cur[1] and (#cur[1] > 16 or not string.find(cur[1], '^%d+$')) then return {'corrupt', cur[1]} end
local version = tonumber(cur[1] or '0')
-- the conflict names the version as stored (checked above): tostring prints 1e14 and more
-- as '1e+14'
if version ~= tonumber(ARGV[1]) then return {'conflict', cur[1] or '0'} end
if cur[2] and cur[2] ~= ARGV[4] then return {'format', cur[2]} end
local lanes = redis.pcall('TYPE', KEYS[5])
if failed(lanes) then return read_failed(lanes, 'TYPE', KEYS[5]) end
if lanes['ok'] ~= 'none' and lanes['ok'] ~= 'set' then return {'type', KEYS[5]} end
-- every command below may run (the caller's ACL), or nothing is written
local checks = {{'XADD', KEYS[2], '*', 'e', 'x'}, {'HSET', KEYS[1], 'f', 'v'}, {'HDEL', KEYS[1], 'f'},
  {'SADD', KEYS[5], 'x'}}
if claim then checks[#checks + 1] = {'HSET', KEYS[4], 'f', 'v'} end
if KEYS[3] ~= KEYS[1] then checks[#checks + 1] = {'SET', KEYS[3], 'v', 'EX', '1'} end
local denied = first_refusal(checks)
if denied then return redis.error_reply(denied) end
local id = redis.pcall('XADD', KEYS[2], '*', 'e', ARGV[5], 'p', cur[3] or '')
if failed(id) then
  if string.find(id.err, 'WRONGTYPE', 1, true) then return {'type', KEYS[2]} end
  return id -- the server's condition (out of memory above all), as it is: nothing was written
end
if claim then redis.call('HSET', KEYS[4], 'resource', ARGV[6], 'createdAt', ARGV[9]) end
local last, chain = cur[3] or '', cur[4] or ''
local older = nil -- a full block moving down to 'chain0'
if last ~= '' and (chain == last or string.sub(chain, -#last - 1) == ' ' .. last) then
  if #chain + #id + 1 > BLOCK_BYTES then -- bounded by length (no count)
    older, chain = chain, last .. ' ' .. id
  else
    chain = chain .. ' ' .. id
  end
else
  redis.call('HDEL', KEYS[1], 'chain0')
  chain = last == '' and id or last .. ' ' .. id
end
local fields = {'data', ARGV[3], 'version', ARGV[2], 'format', ARGV[4], 'scope', ARGV[10],
  'updatedAt', ARGV[9], 'eid', id, 'chain', chain}
if older then
  fields[#fields + 1] = 'chain0'
  fields[#fields + 1] = older
end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('SADD', KEYS[5], ARGV[8])
if KEYS[3] ~= KEYS[1] then
  redis.call('SET', KEYS[3], ARGV[11] ~= '' and ARGV[2] .. ' ' .. ARGV[11] or ARGV[2], 'EX', tonumber(ARGV[7]))
end
return {'ok', id}
