-- One working-memory write: idempotency, thread owner, compare-and-set on the version,
-- store the document and append the write event, atomically on one slot.
-- The event's field p is the id of the lane's previous write event (the document's eid,
-- '' for the first), and the document records its own event's id as eid: the genuine
-- events of a lane form a chain a worker can check, anchored in the document and in its
-- own tracking, so an event appended to the stream by anyone else is recognised. The
-- document also keeps the lane's last CHAIN_IDS event ids, oldest first, in 'chain' (the
-- same links as p): a worker behind by a backlog places events on it without walking the
-- stream (a chain that does not end at eid is started again from eid).
-- KEYS: 1 doc, 2 writes stream, 3 idempotency key (or doc when none), 4 thread key
--       (or doc when no owner check here), 5 lanes set, 6 the partition's document index
-- ARGV: 1 expected version, 2 new version, 3 data, 4 format, 5 event json,
--       6 owner resource ('' = no check), 7 idempotency ttl s, 8 lane, 9 now iso, 10 scope
if KEYS[3] ~= KEYS[1] then
  local prev = redis.call('GET', KEYS[3])
  if prev then return {'dup', prev} end
end
if ARGV[6] ~= '' then
  local owner = redis.call('HGET', KEYS[4], 'resource')
  if owner and owner ~= ARGV[6] then return {'owner', owner} end
  if not owner then redis.call('HSET', KEYS[4], 'resource', ARGV[6], 'createdAt', ARGV[9]) end
end
local CHAIN_IDS = 128
local CHAIN_BYTES = CHAIN_IDS * 16 -- ids of this time's length (13 digits, '-', a short sequence) and a space
local cur = redis.call('HMGET', KEYS[1], 'version', 'format', 'eid', 'chain')
local version = tonumber(cur[1] or '0')
if version == nil then return {'corrupt', cur[1]} end
if version ~= tonumber(ARGV[1]) then return {'conflict', tostring(version)} end
if cur[2] and cur[2] ~= ARGV[4] then return {'format', cur[2]} end
local id = redis.call('XADD', KEYS[2], '*', 'e', ARGV[5], 'p', cur[3] or '')
local last, chain = cur[3] or '', cur[4] or ''
if last == '' then
  chain = id
elseif chain == last or string.sub(chain, -#last - 1) == ' ' .. last then
  chain = chain .. ' ' .. id
  if #chain > CHAIN_BYTES then -- bounded by length (no count): the oldest ids go, whole
    chain = string.sub(chain, string.find(chain, ' ', #chain - CHAIN_BYTES, true) + 1)
  end
else
  chain = last .. ' ' .. id
end
redis.call('HSET', KEYS[1], 'data', ARGV[3], 'version', ARGV[2], 'format', ARGV[4],
  'scope', ARGV[10], 'updatedAt', ARGV[9], 'eid', id, 'chain', chain)
redis.call('HSET', KEYS[6], ARGV[8], ARGV[2] .. ' ' .. id .. ' ' .. ARGV[4])
redis.call('SADD', KEYS[5], ARGV[8])
if KEYS[3] ~= KEYS[1] then
  redis.call('SET', KEYS[3], ARGV[2], 'EX', tonumber(ARGV[7]))
end
return {'ok', id}
