-- Move one write event to the dead-letter stream with its reason, and acknowledge it.
-- KEYS: 1 writes stream, 2 dead-letter stream, 3 failures hash
-- ARGV: 1 group, 2 entry id, 3 dead letter json, 4 dead-letter stream max length
-- Before the first write: the writes stream is a stream (or absent) and every command may run.
local writes_type = redis.call('TYPE', KEYS[1])['ok']
if writes_type ~= 'stream' and writes_type ~= 'none' then
  return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' is a ' .. writes_type .. ', not a stream: nothing was written')
end
local denied = first_refusal({{'XADD', KEYS[2], 'MAXLEN', '~', '1', '*', 'e', 'x'}, {'XACK', KEYS[1], ARGV[1], ARGV[2]}})
if denied then return redis.error_reply(denied) end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*', 'e', ARGV[3])
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.pcall('HDEL', KEYS[3], ARGV[2]) -- a failure count that cannot be cleared must not undo the rest
return 1
