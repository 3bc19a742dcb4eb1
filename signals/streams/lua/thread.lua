-- Create or check a thread's owner: a thread belongs to one resource forever.
-- KEYS: 1 thread key.  ARGV: 1 resource id, 2 now iso.
local owner = redis.call('HGET', KEYS[1], 'resource')
if owner then
  if owner ~= ARGV[1] then return {'owner', owner} end
  return {'exists', owner}
end
redis.call('HSET', KEYS[1], 'resource', ARGV[1], 'createdAt', ARGV[2])
return {'created', ARGV[1]}
