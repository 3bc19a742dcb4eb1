-- A consumer leaves a partition stream's group only while nothing is pending for it.
-- KEYS: 1 writes stream.  ARGV: 1 group, 2 consumer.
-- Returns 1 when it left, 0 when it stays (an entry is pending for its name).
-- One script, so that the check and the delete see the same pending list: a process
-- restarted under the same consumer name that reads between two round trips would
-- otherwise have its new entries dropped with the consumer (never claimable again).
local held = redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2])
if #held > 0 then
  return 0
end
redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
return 1
