-- Follow lanes' write-event chains back from their documents' events to the worker's batch.
-- Read-only. A genuine event's field p names the lane's previous genuine event (see
-- write.lua); starting from the event a document names (trusted), each step is genuine.
-- KEYS: 1 writes stream.  ARGV: 1 max steps per lane, 2 JSON array, one object per lane:
--   start  the document's event id;  stops  ids where the walk ends (the batch's events of
--   the lane and the worker's last processed event)
-- Returns one array per lane: the stop id the walk reached ('' when it did not: trimmed,
-- or too far), then the ids it walked through (all genuine, newest first).
local limit = tonumber(ARGV[1])
local lanes = cjson.decode(ARGV[2])
local out = {}
for i, lane in ipairs(lanes) do
  local stops = {}
  for _, id in ipairs(lane.stops) do stops[id] = true end
  local cursor, reached, path = lane.start, '', {}
  for _ = 1, limit do
    if stops[cursor] then reached = cursor break end
    path[#path + 1] = cursor
    local reply = redis.pcall('XRANGE', KEYS[1], cursor, cursor)
    if reply.err then break end -- an id Redis refuses: this lane's walk ends, the others go on
    local entry = reply[1]
    if entry == nil then break end
    local fields, prev = entry[2], nil
    for f = 1, #fields, 2 do
      if fields[f] == 'p' then prev = fields[f + 1] end
    end
    if prev == nil or prev == '' then break end
    cursor = prev
  end
  table.insert(path, 1, reached)
  out[i] = path
end
return out
