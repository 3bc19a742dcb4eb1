-- Put a dead letter's event back on its partition write stream, exactly once: the
-- dead letter is deleted first and the event appended only if it was still there.
-- The copy cannot be on its lane's chain of genuine writes (its id is new), so it goes
-- without the chain link (p) and marked with field r = the dead letter's id: a worker
-- takes it as a request to bring the lane up to its stored document (a catch-up signal
-- of the document's own text), never as a write with its own text.
-- KEYS: 1 dead-letter stream, 2 writes stream.  ARGV: 1 dead-letter id, 2.. field/value pairs
-- Before the first write: the writes stream takes entries (a stream, or absent) and both
-- commands may run (a refused XADD after the XDEL would lose the dead letter).
local length = redis.pcall('XLEN', KEYS[2])
if type(length) == 'table' and length.err then return redis.error_reply(length.err) end
local denied = first_refusal({{'XDEL', KEYS[1], ARGV[1]}, {'XADD', KEYS[2], '*', 'e', 'x'}})
if denied then return redis.error_reply(denied) end
if redis.call('XDEL', KEYS[1], ARGV[1]) == 0 then return false end
local fields = {}
for i = 2, #ARGV - 1, 2 do
  if ARGV[i] ~= 'p' and ARGV[i] ~= 'r' then
    fields[#fields + 1] = ARGV[i]
    fields[#fields + 1] = ARGV[i + 1]
  end
end
fields[#fields + 1] = 'r'
fields[#fields + 1] = ARGV[1]
return redis.call('XADD', KEYS[2], '*', unpack(fields))
