-- Put a dead letter's event back on its partition write stream, exactly once: the
-- dead letter is deleted first and the event appended only if it was still there.
-- KEYS: 1 dead-letter stream, 2 writes stream.  ARGV: 1 dead-letter id, 2.. field/value pairs
if redis.call('XDEL', KEYS[1], ARGV[1]) == 0 then return false end
local fields = {}
for i = 2, #ARGV do fields[#fields + 1] = ARGV[i] end
return redis.call('XADD', KEYS[2], '*', unpack(fields))
