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

Batch mode: each key, and each counter (a key with its W, L and cost), is sent once per call,
however many requests name it. KEYS holds the call's keys, each once. ARGV[1] = 'batch', ARGV[2] =
the clock skew tolerated, ARGV[3] = m, the number of counters, then per counter c: the index of
its key in KEYS, W, L and cost; then per request j: its now (or ''), its number of counters n_j,
its counting, and the index of each of its counters among the m. Requests are decided in order,
and Redis TIME is read once, as in dispatch.lua. A counter that several requests of a call share is read once and
written once, after the last of them (see `st`).

Reply: { allowed, remaining_1, reset_ms_1, remaining_2, ... }, or, for a request whose counter
key holds what tollgate did not write, an error reply, with nothing of that request written.
Whether each counter fits is not sent: the caller knows it from the rest
(src/store/fixedWindowScript.ts). Plain: a counter of an allowed request fits; of a denied one,
nothing was consumed and it fits when its cost fits what remains. Reference: it fits when its
count, which remaining is, is at most L.
Batch mode replies with one flat array (each table in a reply costs Redis a conversion of its
own): per request, an error reply, or allowed and each counter's remaining, each followed by its
reset when the request gave its own time; then, per counter c of the call, its reset for the
requests on Redis TIME. Those requests share one time, and a counter's time only moves forward to
it, so a counter has one reset for all of them.

Plain counting: the request is allowed when every counter fits (c + max(cost, 1) <= L), and then
each counter consumes its cost. A plain request never shares a key between two counters: the
service adds up the costs of descriptors on one counter before it asks.
Reference counting: each counter in order adds its cost whatever the others do, and fits when
its count after that is at most L; remaining is that count. Two counters of one key are one
count, the later one after the earlier.

Reset: W - e (the caller reports -1 for a plain counter whose cost exceeds L, which no reset
would help). TTL: the rest of the window, plus the
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
  if string.find(err, 'NOPERM', 1, true) or string.find(err, "can't run this command", 1, true)
    or string.find(err, 'no permissions to run', 1, true) then
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

-- The counters of the call: what Redis holds of each when first read, then as the call's requests
-- so far have left it. A batch's requests on one counter (a tenant's, under load) read it once and
-- write it once, at the end of the call (flush): the same end state as writing after each request,
-- since nothing else runs until the call returns, for a fraction of the commands. Each counter has
-- 6 slots in `st` (an array, cheaper than a table per counter):
--   key
--   t, w, c  the counter's fields as numbers (false: absent)
--   written  false, or t's text once a request of this call wrote it: flush writes t and c
--   ttl      false, or the TTL of the new window that this call started: flush writes w too
-- A request's write sets t, c and written, and, on the first write of a window, w and ttl (the
-- rest of the window plus the slack).
-- `st` is made once, at FUNCTION LOAD (once per call for a script), and reused: a call writes the
-- slots it reads, and allocates none (what a call allocates, Redis's Lua also spends collecting).
-- A key is looked for among the call's counters so far, or, past 8 of them, in `slot_of`.
local st, loaded, slot_of = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }, 0, nil
local function load(key)
  if slot_of then
    local b = slot_of[key]
    if b then return b end
  else
    for b = 1, 6 * loaded, 6 do
      if st[b] == key then return b end
    end
  end
  local raw = redis.pcall('HMGET', key, 't', 'w', 'c')
  if raw.err then return nil, refused(raw, 'hmget') end
  local t, w, c = raw[1], raw[2], raw[3]
  if t then
    t = tonumber(t)
    if not t or t - t ~= 0 then return nil, FOREIGN end
  end
  if w then
    w = number(w)
    if not w then return nil, FOREIGN end
  end
  if c then
    c = tonumber(c)
    if not c or c - c ~= 0 then return nil, FOREIGN end
  end
  local b = 6 * loaded + 1
  loaded = loaded + 1
  st[b], st[b + 1], st[b + 2], st[b + 3], st[b + 4], st[b + 5] = key, t or false, w or false,
    c or false, false, false
  if slot_of then
    slot_of[key] = b
  elseif loaded > 8 then
    slot_of = {}
    for x = 1, b, 6 do slot_of[st[x]] = x end
  end
  return b
end

-- Writes what the call's requests left of each counter they wrote, in the order first read. A
-- failed write fails the whole call, as must() does in lib.lua.
local function flush()
  for b = 1, 6 * loaded, 6 do
    if st[b + 4] then
      local key, ttl, set = st[b], st[b + 5], nil
      if ttl then
        set = redis.pcall('HSET', key, 't', st[b + 4],
          'w', string.format('%d', st[b + 2]), 'c', string.format('%d', st[b + 3]))
      else
        set = redis.pcall('HSET', key, 't', st[b + 4],
          'c', string.format('%d', st[b + 3]))
      end
      if type(set) == 'table' then error(refused(set, 'hset')) end
      if ttl then
        set = redis.pcall('PEXPIRE', key, ttl)
        if type(set) == 'table' then error(refused(set, 'pexpire')) end
      end
    end
  end
end

-- Decides one request of n counters: specs 1 .. n, or in batch mode the specs whose indexes are
-- ARGV[a .. a + n - 1]. Returns the reply described above; its writes are left to flush.
-- The call's counters as specs (key, W, L, cost), each converted once however many checks name
-- it: in decide mode one per counter of the request, in batch mode as the batch lists them.
local ck, cw, cl, cc = { 0, 0, 0 }, { 0, 0, 0 }, { 0, 0, 0 }, { 0, 0, 0 }
local function spec(c, key, window, limit, cost)
  ck[c], cw[c], cl[c] = key, numbers[window] or number(window), numbers[limit] or number(limit)
  if cost == '1' then cc[c] = 1 else cc[c] = numbers[cost] or number(cost) end
end

-- Per counter of the request, 7 slots: its slots in `st`, its time, window index, W, L, cost and
-- spec.
local s = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }
-- In batch mode, each spec's time to its reset (see the header), as its last check left it.
local cr = { 0, 0, 0 }
local out = {}
local now_of_text, now_text
-- Decides one request of n counters: specs 1 .. n, or in batch mode the specs whose indexes are
-- ARGV[a .. a + n - 1]. Its writes are left to flush. In decide mode it returns the reply
-- described above. In batch mode it appends the request's reply to `reply` from index p + 1 and
-- returns the last index written; `paired`: each remaining is followed by its reset, as its time
-- was given, rather than Redis TIME that the call's checks share.
local function decide(n, a, now, slack, reference, reply, p, paired)
  local allowed = true
  for i = 1, n do
    -- Counter i of the request is spec c of the call: i itself, or the index the batch names.
    local c = i
    if a then
      c = ARGV[a + i - 1]
      c = numbers[c] or number(c)
    end
    local b, err = load(ck[c])
    if not b then
      if not reply then return err end
      reply[p + 1] = err
      return p + 1
    end
    local at = now
    if st[b + 1] and st[b + 1] > at then at = st[b + 1] end
    local window, limit, cost = cw[c], cl[c], cc[c]
    local index = (at - at % window) / window
    local j = 7 * i
    s[j - 6], s[j - 5], s[j - 4], s[j - 3], s[j - 2], s[j - 1], s[j] = b, at, index, window,
      limit, cost, c
    if not reference then
      local c = st[b + 2] == index and st[b + 3] or 0
      if c + (cost > 0 and cost or 1) > limit then allowed = false end
    end
  end

  -- Where counter i's remaining goes, and its reset after it when `step` is 2.
  local step, own = 2, not reply
  if own then
    -- The reply is sized for 3 counters, and ends at its first nil.
    reply, p = { 0, 0, 0, 0, 0, 0, 0 }, 0
    reply[2 * n + 2] = nil
  elseif not paired then
    step = 1
  end
  -- A batch's checks share Redis TIME: its text is made once.
  if now ~= now_of_text then now_of_text, now_text = now, string.format('%d', now) end
  for i = 1, n do
    local j = 7 * i
    local b, at, index, window, limit, cost = s[j - 6], s[j - 5], s[j - 4], s[j - 3], s[j - 2],
      s[j - 1]
    -- Two counters of one key (the reference's counting) are one count: the later one continues
    -- the earlier one's, as they share their slots.
    local count = st[b + 2] == index and st[b + 3] or 0
    local rest = window - (at - index * window)
    local at_reply = p + step * (i - 1) + 2
    if reference then
      if cost > 0 then
        -- Exact below 2^53: a count stops at 2^52, as dispatch.lua's does.
        count = count + cost
        if count > 4503599627370496 then count = 4503599627370496 end
        if st[b + 2] ~= index then st[b + 2], st[b + 5] = index, rest + slack end
        st[b + 1], st[b + 3], st[b + 4] = at, count, at == now and now_text or
          string.format('%d', at)
      end
      if count > limit then allowed = false end
      reply[at_reply] = count
    else
      -- Allowed: every counter fits, so its whole cost is added, never past L.
      if allowed and cost > 0 then
        count = count + cost
        if st[b + 2] ~= index then st[b + 2], st[b + 5] = index, rest + slack end
        st[b + 1], st[b + 3], st[b + 4] = at, count, at == now and now_text or
          string.format('%d', at)
      end
      -- A count over L (the limit was lowered since) leaves nothing.
      local remaining = limit - count
      if remaining < 0 then remaining = 0 end
      reply[at_reply] = remaining
    end
    if step == 2 then reply[at_reply + 1] = rest else cr[s[j]] = rest end
  end
  reply[p + 1] = allowed and 1 or 0
  if own then return reply end
  return p + step * n + 1
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
  loaded, slot_of = 0, nil
  local reply
  if ARGV[1] == 'batch' then
    local m = tonumber(ARGV[3])
    for c = 1, m do
      local v = 4 * c
      spec(c, KEYS[tonumber(ARGV[v])], ARGV[v + 1], ARGV[v + 2], ARGV[v + 3])
      cr[c] = 0
    end
    local a = 4 * m + 4
    -- The batch's reply is one flat array, made once and reused: it ends at its first nil.
    reply = out
    local p, last = 0, #ARGV
    while a <= last do
      local n, given = tonumber(ARGV[a + 1]), ARGV[a]
      local now, slack = clock(given, ARGV[2])
      p = decide(n, a + 3, now, slack, ARGV[a + 2] == '1', reply, p, given ~= '')
      a = a + 3 + n
    end
    for c = 1, m do reply[p + c] = cr[c] end
    reply[p + m + 1] = nil
  else
    local n = #KEYS
    for c = 1, n do
      local v = 3 * c + 1
      spec(c, KEYS[c], ARGV[v], ARGV[v + 1], ARGV[v + 2])
    end
    local now, slack = clock(ARGV[1], ARGV[2])
    reply = decide(n, nil, now, slack, ARGV[3] == '1')
  end
  flush()
  return reply
end
