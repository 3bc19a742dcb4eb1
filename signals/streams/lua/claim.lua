-- A worker's XAUTOCLAIM of ids only (JUSTID), with the cursor: redis-py drops the cursor of
-- a JUSTID reply, and the entries themselves are read by id, within the worker's reply
-- bound (a dead consumer's pending entry may be of any size a writer gave it).
-- KEYS: 1 the write stream. ARGV: 1 group, 2 consumer, 3 min idle ms, 4 start id, 5 count.
-- Returns {next start id, {ids claimed}}.
local reply = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], 'COUNT', ARGV[5], 'JUSTID')
return {reply[1], reply[2]}
