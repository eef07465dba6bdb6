--[[
dispatch.lua: decides every counter of one request, all or nothing; in batch mode, several
requests one after another; or, in refund mode, gives back what an earlier call of a multi-slot
request consumed.

Decide mode
KEYS[i]  the counter keys, one per distinct counter, all hash-tagged by tenant
ARGV[1]  now in ms, or '' to read Redis TIME (CLOCK=redis)
ARGV[2]  with a given now: the clock skew tolerated, in ms (CLOCK_SKEW_TOLERANCE)
ARGV[3 + 6(i-1) ..]  per key i: algorithm (1 fixed_window, 2 sliding_window, 3 token_bucket,
         4 a calendar window), window ms W (for a calendar window its four boundaries,
         "b0,b1,b2,b3"), limit L, burst B, cost (0 = check only: fits when one unit fits), and
         flags:
           1 shadow    outside the gate: consumed when it fits, never blocks the others
           2 quota     blocks only when every quota counter of the request is over
           4 overdraw  consumed even when over, recorded in full (see each algorithm)
           8 part      the request spans several Redis Cluster slots and this call holds only some
                       of its counters: a quota counter does not gate here (the caller combines
                       the quota verdicts of every call), and the reply says what the counter
                       would report had it not been consumed, for when the caller refunds it
          16 reference counted as envoyproxy/ratelimit counts (COMPAT_MODE=reference; fixed
                       windows only): see "The reference's counting" below
          32 stop      with reference: STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT
          64 held      with reference and stop: another counter of the request is remembered over
                       by the service, so this one is read and not incremented
         128 cached    with reference: the service remembers this counter over; it is neither read
                       for the gate's sake nor incremented, and it denies (unless shadow or quota)
         256 renew     set the TTL on this write even when the window's first write set it already
                       (the health probe: so that it runs every command a new counter needs)
         512 give back is_negative_hits: outside the gate, the cost is given back to the counter
                       instead of taken (see "Giving back" below); its other flags are not read
        1024 deep      with overdraw: a token bucket goes deeper into debt (token_bucket.lua),
                       for requests already admitted elsewhere, which must land in full

The call is allowed when every enforced counter (neither shadow nor quota) fits, and, if there
are quota counters that gate here, at least one of them fits. Then the enforced counters and the
quota counters that fit are consumed; otherwise none of them is.

The reference's counting: a reference counter is incremented by its cost whether or not the
request is allowed, so its count may pass the limit, and it fits when its count after the increment
is at most the limit (a cost of 0 reads: it fits when the count is at most the limit). With stop,
the counters whose count before the call plus their cost would pass the limit are "near"; when
any is, only the near ones are incremented, and with held none is. Reference counters are settled
first, in order, so that two descriptors on one key count one after the other, as the reference's
pipelined INCRBYs do. Their verdicts gate the other counters like any counter's; they are never
refunded. Their reply's remaining is the count after the call, which the caller turns into the
reference's remaining and statistics.

Giving back: a give-back counter is settled after every other counter of the request, in
order: the request's charges are judged on what the counters held before it, and a give-back
gives back from what the charges left (a reply's charge and its refund, sent together, net out
even on an empty counter). Two give-backs on one key add up. Each algorithm gives back what its current window holds (see its give_back): a
counter that does not exist, or whose window has rolled over, has nothing to give and is not
written. It always fits: it never denies the request, whatever the others decide. With
reference, it is counted in its place among the reference counters instead, as the reference's
refunds are: the count goes down by the cost, never below 0, it is never held nor cached, and
its reply's remaining is the count after it. Each given-back key is published on the channel
tollgate:given-back, for the services' caches.

Reply, integers: { allowed, fits_1, remaining_1, reset_ms_1, [kept_1, kept_reset_ms_1,]
                   fits_2, ..., now }
  or an error reply when a counter key holds something that is not one of tollgate's counters (a
  string, say): every key of the request is read and checked before any is written, so such a
  request fails untouched.
  allowed    1 when the call is allowed as above, 0 when it is denied
  fits_i     1 when counter i fit its cost, 0 otherwise
  remaining_i  whole units left; for an overdraw counter past its limit, minus how far past it
             is (a window's count past L, a token bucket's debt), so that a charge can tell what
             of it landed past the limit
  reset_ms_i milliseconds until it resets; -1 when the cost exceeds the limit and never fits
  kept_i, kept_reset_ms_i   only for part counters: remaining and reset_ms as if not consumed
  now        the time the call decided at (ms), which a refund names

Batch mode: ARGV[1] = 'batch', ARGV[2] = the clock skew tolerated, then per request j: its now
(or ''), its number of counters n_j, and 6 arguments per counter as above. KEYS holds the
requests' keys one request after another. Each request is decided as in decide mode, in order,
so a later request sees what an earlier one consumed; requests made at the same moment on
different connections are decided in some order too. Reply: { reply_1, reply_2, ... }, each as
in decide mode; a request whose counter is not one of tollgate's gets its error reply in its
place, and the other requests are decided as usual. Redis TIME is read once, for every request
that passes ''.

TIME and the writes go through must() (lib.lua), so an error there (OOM, READONLY, a missing ACL
permission) fails the whole call: such errors belong to Redis, not to one counter. Redis checks
memory only at a script's first write, so an out-of-memory Redis fails a call before it has
written anything.

Refund mode: ARGV[1] = 'refund', ARGV[2] = the decide call's now, then per key i the 6 arguments
of that call's counter; its cost is what the call consumed, and its flags are not read. Each
algorithm undoes the consumption as far as it still can without ever giving back more than it
took (see its refund). Reply: { refunded_1, ... }, 1 when counter i got something back, 0 when
there was nothing left to give back.

Every written key gets a TTL in this same script. With CLOCK=local, the TTL carries the tolerated
skew as slack. Redis expires keys by its own clock, which may run ahead of the service's; and a
counter gone early would let an instance whose clock lags decide it afresh, in a window that
another instance has already spent. Kept that much longer, a counter still holds the latest time
written to it, and the lagging instance decides at that time instead.
A refund keeps the key's TTL: less consumed never needs longer.
--]]

-- A counter's window argument: ms, or a calendar window's four boundaries (calendar_window.lua).
local function window_arg(raw)
  return tonumber(raw) or raw
end

local function refund()
  local at, refunded = tonumber(ARGV[2]), {}
  for i = 1, #KEYS do
    local a = 3 + 6 * (i - 1)
    local algorithm = ALGORITHMS[tonumber(ARGV[a])]
    refunded[i] = algorithm.refund(KEYS[i], at, window_arg(ARGV[a + 1]), tonumber(ARGV[a + 2]),
      tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])) and 1 or 0
  end
  return refunded
end

local SHADOW, QUOTA, OVERDRAW, PART = 1, 2, 4, 8
local REFERENCE, STOP, HELD, CACHED, RENEW, GIVE_BACK, DEEP = 16, 32, 64, 128, 256, 512, 1024
local function has(flags, flag)
  return flags % (2 * flag) >= flag
end

-- Settles the request's reference counters in order (see "The reference's counting"), after every
-- counter was loaded into states. Returns each one's verdict and count, by index.
local function count_as_reference(k, a, n, states, slack)
  local near, near_any = {}, false
  for i = 1, n do
    local b = a + 6 * (i - 1)
    local flags = tonumber(ARGV[b + 5])
    if has(flags, REFERENCE) and has(flags, STOP) and not has(flags, CACHED)
        and not has(flags, GIVE_BACK) then
      near[i] = states[i].c + tonumber(ARGV[b + 4]) > tonumber(ARGV[b + 2])
      if near[i] then near_any = true end
    end
  end
  local live, verdicts, counts = {}, {}, {}
  for i = 1, n do
    local b = a + 6 * (i - 1)
    local flags = tonumber(ARGV[b + 5])
    if has(flags, REFERENCE) then
      local key, limit, cost = KEYS[k + i], tonumber(ARGV[b + 2]), tonumber(ARGV[b + 4])
      -- Two counters of one key are one count: the later one sees the earlier one's increment.
      local s = live[key] or states[i]
      live[key] = s
      if has(flags, GIVE_BACK) then
        -- A refund, in its place among the request's counts, never held and never cached.
        if cost > 0 and s.c > 0 then
          s.c = math.max(0, s.c - cost)
          must('HSET', key, 't', int(s.now), 'w', int(s.index), 'c', int(s.c))
        end
        if cost > 0 then redis.pcall('PUBLISH', GIVEN_BACK_CHANNEL, key) end
        verdicts[i], counts[i] = true, s.c
      elseif has(flags, CACHED) then
        verdicts[i], counts[i] = false, s.c
      else
        local add = cost
        if has(flags, STOP) and (has(flags, HELD) or (near_any and not near[i])) then add = 0 end
        if add > 0 then
          s.c = math.min(s.c + add, MAX_FIXED_COUNT)
          must('HSET', key, 't', int(s.now), 'w', int(s.index), 'c', int(s.c))
          expire_once(key, s, s.window - s.e + slack)
        end
        verdicts[i], counts[i] = s.c <= limit, s.c
      end
    end
  end
  return verdicts, counts
end

-- Gives back every give-back counter of the request, in order, once its charges are settled: each
-- on its key as the charges and the earlier give-backs left it. Fills in each one's remaining and
-- reset at its place in the reply (and its kept values, for a part call).
local function give_back_all(k, a, n, now, reply, places, slack)
  for i = 1, n do
    local at = places[i]
    if at then
      local b = a + 6 * (i - 1)
      local algorithm = ALGORITHMS[tonumber(ARGV[b])]
      local key = KEYS[k + i]
      -- Every key was read already, so the load cannot fail here.
      local state = algorithm.load(key, now, window_arg(ARGV[b + 1]))
      local cost = tonumber(ARGV[b + 4])
      local remaining, reset = algorithm.give_back(key, state, tonumber(ARGV[b + 2]),
        tonumber(ARGV[b + 3]), cost, slack)
      -- Told in this same step, so no process can hear of it late and remember a count from
      -- before it. A user that may not publish does not fail the refund: the service checks
      -- that it may, and otherwise answers nothing from its caches.
      if cost > 0 then redis.pcall('PUBLISH', GIVEN_BACK_CHANNEL, key) end
      reply[at + 1], reply[at + 2] = remaining, reset
      if has(tonumber(ARGV[b + 5]), PART) then reply[at + 3], reply[at + 4] = remaining, reset end
    end
  end
end

-- Decides one request: its n counters are KEYS[k + 1 .. k + n], and their arguments start at
-- ARGV[a], 6 per counter. Returns the reply described above.
local function decide(k, a, n, now, slack)
  local states, verdicts, enforced, quotas, quota_fits = {}, {}, true, 0, false
  local references = false
  for i = 1, n do
    local b = a + 6 * (i - 1)
    local algorithm = ALGORITHMS[tonumber(ARGV[b])]
    local window, limit, burst = window_arg(ARGV[b + 1]), tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3])
    local cost, flags = tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5])
    local state, err = algorithm.load(KEYS[k + i], now, window)
    -- Nothing of the request is written yet: it fails alone, untouched.
    if not state then return err end
    if has(flags, RENEW) then state.expiring = false end
    states[i] = state
    if has(flags, REFERENCE) then
      references = true
    elseif not has(flags, GIVE_BACK) then
      verdicts[i] = algorithm.fits(state, limit, burst, math.max(cost, 1))
    end
  end
  local counts = {}
  if references then
    local reference_verdicts
    reference_verdicts, counts = count_as_reference(k, a, n, states, slack)
    for i, fits in pairs(reference_verdicts) do verdicts[i] = fits end
  end
  for i = 1, n do
    local flags, fits = tonumber(ARGV[a + 6 * (i - 1) + 5]), verdicts[i]
    if has(flags, SHADOW) or has(flags, GIVE_BACK) then
      -- outside the gate
    elseif has(flags, QUOTA) then
      if not has(flags, PART) then
        quotas = quotas + 1
        if fits then quota_fits = true end
      end
    elseif not fits then
      enforced = false
    end
  end
  local allowed = enforced and (quotas == 0 or quota_fits)

  local reply, places = { allowed and 1 or 0 }, nil
  for i = 1, n do
    local b = a + 6 * (i - 1)
    local algorithm = ALGORITHMS[tonumber(ARGV[b])]
    local flags, fits = tonumber(ARGV[b + 5]), verdicts[i]
    local part = has(flags, PART)
    local remaining, reset, kept, kept_reset
    if has(flags, GIVE_BACK) and not has(flags, REFERENCE) then
      -- Filled in below, once every charge of the request is settled.
      places = places or {}
      places[i] = #reply + 1
      fits, remaining, reset, kept, kept_reset = true, 0, 0, 0, 0
    elseif has(flags, REFERENCE) then
      -- Counted already, and never refunded: its count, and the rest of its window.
      local s = states[i]
      remaining, reset = counts[i], s.window - s.e
      kept, kept_reset = remaining, reset
    else
      local commit = allowed
      if has(flags, SHADOW) then
        commit = fits and true or false
      elseif has(flags, QUOTA) then
        commit = allowed and fits and true or false
      end
      if has(flags, OVERDRAW) then commit = true end
      local limit, burst, cost = tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4])
      local key = KEYS[k + i]
      -- Settling without committing writes nothing: it is what a denied request reports.
      if part then
        kept, kept_reset = algorithm.settle(key, states[i], limit, burst, cost, fits, false, slack)
      end
      local past
      remaining, reset, past = algorithm.settle(key, states[i], limit, burst, cost, fits, commit,
        slack, has(flags, DEEP))
      if has(flags, OVERDRAW) and past > 0 then remaining = -past end
    end
    reply[#reply + 1] = fits and 1 or 0
    reply[#reply + 1] = remaining
    reply[#reply + 1] = reset
    if part then
      reply[#reply + 1] = kept
      reply[#reply + 1] = kept_reset
    end
  end
  if places then give_back_all(k, a, n, now, reply, places, slack) end
  reply[#reply + 1] = now
  return reply
end

-- Redis TIME in ms, read once per call: every request of a batch is decided at the same instant.
local redis_now
local function clock(given, slack)
  local now = tonumber(given)
  if now then return now, slack end
  if not redis_now then
    local time = must('TIME')
    redis_now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  end
  return redis_now, 0
end

-- The entry point: one call, in the mode its first argument names.
local function decision(keys, argv)
  KEYS, ARGV, redis_now = keys, argv, nil
  if ARGV[1] == 'refund' then return refund() end
  if ARGV[1] == 'batch' then
    local slack, replies, k, a = tonumber(ARGV[2]), {}, 0, 3
    while a <= #ARGV do
      local now, n = ARGV[a], tonumber(ARGV[a + 1])
      local at, request_slack = clock(now, slack)
      replies[#replies + 1] = decide(k, a + 2, n, at, request_slack)
      k, a = k + n, a + 2 + 6 * n
    end
    return replies
  end
  local now, slack = clock(ARGV[1], tonumber(ARGV[2]))
  return decide(0, 3, #KEYS, now, slack)
end
