-- Checks every script makes before its first write: Redis does not roll a script back, so
-- a command refused after a write (the caller's ACL missing one selector, say) would leave
-- the script half done. refused(command, key, ...) is nil when the caller's ACL lets it run
-- that command with those arguments, else the error to return (nothing written yet).
-- Redis 6.2 has no redis.acl_check_cmd (nor selectors): nothing to probe there.
local function refused(...)
  if redis.acl_check_cmd == nil or redis.acl_check_cmd(...) then return nil end
  local words = {...}
  return 'NOPERM this user has no permissions to run the ' .. string.lower(words[1]) .. ' command on key ' ..
    tostring(words[2]) .. ' (checked before the script wrote anything: nothing was written)'
end
local function first_refusal(checks)
  for _, check in ipairs(checks) do
    local denied = refused(unpack(check))
    if denied then return denied end
  end
  return nil
end
