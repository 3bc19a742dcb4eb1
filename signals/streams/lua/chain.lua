-- Follow lanes' write-event chains back from their documents' events to the worker's batch.
-- Read-only. A genuine event's field p names the lane's previous genuine event (see
-- write.lua); starting from the event a document names (trusted), each step is genuine.
-- KEYS: 1 writes stream.  ARGV: 1 max steps per lane, 2 JSON array, one object per lane:
--   start  the document's event id;  stops  ids where the walk ends (the batch's events of
--   the lane and the worker's last processed event)
-- ARGV 3, 4 (optional): an id and a number of entries to read in bulk, downward from that
-- id, before walking: where many lanes walk through the same stretch of the stream (a
-- backlog), reading it in chunks costs less than one XRANGE per step. A step whose entry
-- was not read so is one XRANGE of its own: the walk's result is the same either way.
-- Returns one array per lane: the stop id the walk reached ('' when it did not: trimmed,
-- or too far), then the ids it walked through (all genuine, newest first).
local limit = tonumber(ARGV[1])
local lanes = cjson.decode(ARGV[2])
local chunk_size = 256

local function prev_field(fields)
  for f = 1, #fields, 2 do
    if fields[f] == 'p' then return fields[f + 1] end
  end
  return false
end

-- id -> its field p (false: none), for the entries read in bulk
local prev_of = {}
local budget = tonumber(ARGV[4] or '0') or 0
local high = ARGV[3]
while budget > 0 do
  local chunk = redis.pcall('XREVRANGE', KEYS[1], high, '-', 'COUNT', math.min(chunk_size, budget))
  if chunk.err or #chunk == 0 then break end
  for _, entry in ipairs(chunk) do prev_of[entry[1]] = prev_field(entry[2]) end
  budget = budget - #chunk
  if #chunk < chunk_size then break end
  high = '(' .. chunk[#chunk][1]
end

local out = {}
for i, lane in ipairs(lanes) do
  local stops = {}
  for _, id in ipairs(lane.stops) do stops[id] = true end
  local cursor, reached, path = lane.start, '', {}
  for _ = 1, limit do
    if stops[cursor] then reached = cursor break end
    path[#path + 1] = cursor
    local prev = prev_of[cursor]
    if prev == nil then
      local reply = redis.pcall('XRANGE', KEYS[1], cursor, cursor)
      if reply.err then break end -- an id Redis refuses: this lane's walk ends, the others go on
      local entry = reply[1]
      if entry == nil then break end
      prev = prev_field(entry[2])
    end
    if not prev or prev == '' then break end
    cursor = prev
  end
  table.insert(path, 1, reached)
  out[i] = path
end
return out
