--[[
plain_fixed_window.lua: the decision code for requests whose every counter is a plain fixed
window. It decides exactly as dispatch.lua does for such counters, on the same keys and hash
fields (t, w, c; see fixed_window.lua), so either continues a counter that the other wrote. It is
an entry point of its own (a function of the library beside dispatch.lua's, or a script of its own
where functions are refused), with arguments and a reply of its own, because the general code
pays for what these requests never use (six arguments and nine flags per counter, a table per
counter, the flags' logic).

Why Lua: Redis runs a script to completion before it serves any other command, so reading the
counters, deciding and writing them back is one indivisible step, in one round trip.

A counter is plain when it has none of dispatch.lua's flags. A request is sent here when every
counter of it is a plain fixed window (counting 'plain'), or when every counter of it is a fixed
window counted as the reference counts, with no other flag (counting 'reference': see "The
reference's counting" in dispatch.lua). Any other request goes to dispatch.lua.

Decide mode
KEYS[i]  the counter keys, one per counter, all hash-tagged by tenant
ARGV[1]  now in ms, or '' to read Redis TIME (CLOCK=redis)
ARGV[2]  with a given now: the clock skew tolerated, in ms (CLOCK_SKEW_TOLERANCE)
ARGV[3]  the counting: 0 plain, 1 reference
ARGV[4 + 3(i-1) ..]  per key i: window ms W, limit L, cost (0 = check only)

Batch mode: ARGV[1] = 'batch', ARGV[2] = the clock skew tolerated, then per request j: its now
(or ''), its number of counters n_j, its counting, and 3 arguments per counter as above. KEYS
holds the requests' keys one request after another. Requests are decided in order, and Redis TIME
is read once, as in dispatch.lua.

Reply: { allowed, remaining_1, reset_ms_1, remaining_2, ... }, or, for a request whose counter
key holds what tollgate did not write, an error reply, with nothing of that request written; in
batch mode, { reply_1, reply_2, ... }. Whether each counter fits is not sent: the caller knows it
from the rest (src/store/fixedWindowScript.ts). Plain: a counter of an allowed request fits; of a
denied one, nothing was consumed and it fits when its cost fits what remains. Reference: it fits
when its count, which remaining is, is at most L.

Plain counting: the request is allowed when every counter fits (c + max(cost, 1) <= L), and then
each counter consumes its cost. A plain request never shares a key between two counters: the
service adds up the costs of descriptors on one counter before it asks.
Reference counting: each counter in order adds its cost whatever the others do, and fits when
its count after that is at most L; remaining is that count. Two counters of one key are one
count, the later one after the earlier.

Reset: W - e; -1 for a plain counter whose cost exceeds L. TTL: the rest of the window, plus the
slack, set by the window's first write (see expire_once in lib.lua). TIME and the writes fail the
whole call on error, and a refused command is named, as in dispatch.lua. This script has no
refund mode: a request that spans cluster slots goes to dispatch.lua, whose refund gives back
what either script consumed.
--]]

-- The call's keys and arguments, set by the entry point on each call (see lib.lua).
local KEYS, ARGV

-- As lib.lua's refused: an ACL refusal names the command, so health and logs say what is lacking.
local function refused(reply, command)
  local err = reply.err
  if string.find(err, 'NOPERM', 1, true) or string.find(err, "can't run this command", 1, true) then
    return { err = 'NOPERM the Redis user may not run the \'' .. command ..
      '\' command, which checks need' }
  end
  return reply
end

local FOREIGN = { err = 'WRONGTYPE a counter key holds a value that tollgate did not write' }

-- What Redis spends on this code, apart from its commands, is mostly converting between strings
-- and numbers (tonumber is a strtod), making strings (each is hashed and interned) and tables. So:
-- - The texts that repeat from call to call (windows, limits, costs, a window's index) are
--   converted once and kept in `numbers`, which a function keeps between calls. At most 4,096
--   are kept; then it starts again. A script, which would start it afresh on every call, keeps
--   none (the entry point's third argument).
-- - A request formats its time once (Redis would write a number with "%.17g", a slower
--   conversion than string.format's "%d").
-- - The common cost, 1, is compared as a string (interned: one pointer comparison).
-- - A counter still in its window is written without w, which holds that window already.
-- - Tables are made at their size: a table that grows is copied at every power of 2.
local numbers, kept, keeping = {}, 0, true
local function number(text)
  local n = numbers[text]
  if n then return n end
  n = tonumber(text)
  -- x - x is 0 for every finite number, and NaN for NaN and the infinities.
  if not n or n - n ~= 0 then return nil end
  if not keeping then return n end
  if kept == 4096 then numbers, kept = {}, 0 end
  numbers[text], kept = n, kept + 1
  return n
end

-- Writes counter j of the state s below (see decide): its time and count, and, on its first write
-- in a window, the window and the TTL. A failed write fails the whole call, as must() does.
local s
local function write(key, j, at_text, count, ttl)
  local set
  if s[j - 3] then
    set = redis.pcall('HSET', key, 't', at_text, 'c', string.format('%d', count))
  else
    set = redis.pcall('HSET', key, 't', at_text, 'w', string.format('%d', s[j - 5]),
      'c', string.format('%d', count))
  end
  if type(set) == 'table' then error(refused(set, 'hset')) end
  if not s[j - 3] then
    set = redis.pcall('PEXPIRE', key, ttl)
    if type(set) == 'table' then error(refused(set, 'pexpire')) end
    s[j - 3] = true
  end
end

-- Decides one request: its n counters are KEYS[k + 1 .. k + n], their arguments start at ARGV[a],
-- 3 per counter. Returns the reply described above.
local function decide(k, a, n, now, slack, reference)
  -- Per counter, 7 slots: its time, window index, count, whether it holds this window already
  -- (nil when it is another window's: the counter's first write in this window sets w and the
  -- TTL), W, L and cost. Sized for 3 counters, as is the reply.
  s = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }
  local allowed = true
  for i = 1, n do
    local raw = redis.pcall('HMGET', KEYS[k + i], 't', 'w', 'c')
    if raw.err then return refused(raw, 'hmget') end
    local t, w, c = raw[1], raw[2], raw[3]
    local at = now
    if t then
      t = tonumber(t)
      if not t or t - t ~= 0 then return FOREIGN end
      if t > at then at = t end
    end
    if w then
      w = number(w)
      if not w then return FOREIGN end
    end
    if c then
      c = tonumber(c)
      if not c or c - c ~= 0 then return FOREIGN end
    end
    local b = a + 3 * i - 3
    local window, limit, cost = number(ARGV[b]), number(ARGV[b + 1]), ARGV[b + 2]
    if cost == '1' then cost = 1 else cost = number(cost) end
    local index = (at - at % window) / window
    local holds = w == index or nil
    if not holds or not c then c = 0 end
    local j = 7 * i
    s[j - 6], s[j - 5], s[j - 4], s[j - 3], s[j - 2], s[j - 1], s[j] =
      at, index, c, holds, window, limit, cost
    if not reference and c + (cost > 0 and cost or 1) > limit then allowed = false end
  end

  local reply = { 0, 0, 0, 0, 0, 0, 0 }
  -- The reply ends at its first nil.
  reply[2 * n + 2] = nil
  local now_text = string.format('%d', now)
  if reference then
    local first = {}
    for i = 1, n do
      local key, j = KEYS[k + i], 7 * i
      local at, index, window, limit, cost = s[j - 6], s[j - 5], s[j - 2], s[j - 1], s[j]
      -- Two counters of one key are one count: the later one continues the earlier one's.
      local same = first[key]
      if same then j = same else first[key] = j end
      local count = s[j - 4]
      local rest = window - (at - index * window)
      if cost > 0 then
        count = count + cost
        s[j - 4] = count
        write(key, j, at == now and now_text or string.format('%d', at), count, rest + slack)
      end
      if count > limit then allowed = false end
      reply[2 * i], reply[2 * i + 1] = count, rest
    end
  else
    for i = 1, n do
      local j = 7 * i
      local at, index, count, window, limit, cost = s[j - 6], s[j - 5], s[j - 4], s[j - 2],
        s[j - 1], s[j]
      local rest = window - (at - index * window)
      -- A cost that exceeds L never fits: no reset would help.
      if (cost > 0 and cost or 1) > limit then rest = -1 end
      -- Allowed: every counter fits, so its whole cost is added, never past L.
      if allowed and cost > 0 then
        count = count + cost
        write(KEYS[k + i], j, at == now and now_text or string.format('%d', at), count,
          window - (at - index * window) + slack)
      end
      -- A count over L (the limit was lowered since) leaves nothing.
      local remaining = limit - count
      if remaining < 0 then remaining = 0 end
      reply[2 * i], reply[2 * i + 1] = remaining, rest
    end
  end
  reply[1] = allowed and 1 or 0
  return reply
end

-- Redis TIME in ms, read once per call, as dispatch.lua's clock.
local redis_now
local function clock(given, slack)
  if given ~= '' then return tonumber(given), tonumber(slack) end
  if not redis_now then
    local time = redis.pcall('TIME')
    if time.err then error(refused(time, 'time')) end
    local us = tonumber(time[2])
    redis_now = tonumber(time[1]) * 1000 + (us - us % 1000) / 1000
  end
  return redis_now, 0
end
-- The entry point: one call, in decide or batch mode. `script`: run as a script, not a function.
local function plain_fixed_window(keys, argv, script)
  KEYS, ARGV, redis_now, keeping = keys, argv, nil, not script
  if ARGV[1] == 'batch' then
    local replies, k, a = {}, 0, 3
    while a <= #ARGV do
      local n = tonumber(ARGV[a + 1])
      local now, slack = clock(ARGV[a], ARGV[2])
      replies[#replies + 1] = decide(k, a + 3, n, now, slack, ARGV[a + 2] == '1')
      k, a = k + n, a + 3 + 3 * n
    end
    return replies
  end
  local now, slack = clock(ARGV[1], ARGV[2])
  return decide(0, 4, #KEYS, now, slack, ARGV[3] == '1')
end
