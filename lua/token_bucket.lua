--[[
token_bucket.lua: a bucket of B tokens refilled at L tokens per window W.

Tokens are kept as exact integers scaled by s = W / gcd(L, W), so the refill is r = L / gcd(L, W)
scaled tokens per millisecond. tollgate refuses rules where B*s would pass 2^52, so that every
scaled amount, and the rounding-up division below, stays exact.

State, a hash per counter: t = last decision time (ms), k = scaled tokens at t, s = the scale k
was written with (a changed limit keeps its whole tokens).

  load(key, now, W)                 -> state (now raised to t: time never runs backwards), or nil
                                       and an error reply when the key is not a counter
  fits(state, L, B, need)           -> true when tokens >= need after refilling;
                                       nil when need > B (never fits)
  settle(key, state, L, B, cost, fits, commit, slack, deep)
                                    -> remaining, reset_ms, past; writes only when commit and
                                       cost > 0; past is the debt in whole tokens (0 without)

Consuming takes the cost. Only an overdraw commits a cost that does not fit: the bucket goes
into debt, at most one burst deep (-B), so that it is full again at most 2B/R after the last
overdraw; a deep overdraw (`deep`: requests already admitted elsewhere, which must land in full)
goes up to DEEP_DEBT_MS of refills deeper, full again at most 2B/R plus that after it. Until the
debt is paid back by refills or refunds it denies everything, peeks included, and remaining
reads 0.

Reset: allowed, the time until the bucket is full, ceil((B*s - k)/r); denied, the time until
need tokens are there, ceil((need*s - k)/r).

  give_back(key, state, L, B, cost, slack)
                                    -> remaining, reset_ms after giving the cost back
  refund(key, at, W, L, B, cost)    -> true when it gave tokens back

Give back (is_negative_hits): the cost goes back into the bucket as it stands now, refilled, and
never above B. A bucket that does not exist is full and is not written; a full one is not either.
The TTL is the time the bucket then takes to fill.

Refund: the cost goes back into the bucket, capped at B. Had the tokens not been taken, the
refills written since `at` might have met the cap and been lost; those refills, (t - at)*r, are
kept back, so a refund never leaves more tokens than there would have been. When nothing was
written since the consumption (t = at), the whole cost goes back. The time t stays as it is. A
key older than `at` (expired: the bucket is full; or its write lost in a failover), or one
written with another scale (the limit changed), gets nothing.
--]]

-- How much deeper than one burst a deep overdraw may take a bucket into debt, in ms of its
-- refills: the longest time a report of admitted requests covers (src/rlqs/trust.ts).
local DEEP_DEBT_MS = 300000

ALGORITHMS[3] = {
  load = function(key, now, window)
    local v, err = read_fields(key, 't', 'k', 's')
    if not v then return nil, err end
    local t = v[1]
    -- A bucket written by tollgate has all three, with a positive scale.
    if t and not (v[2] and v[3] and v[3] > 0) then return nil, FOREIGN end
    if t and t > now then now = t end
    return { now = now, window = window, t = t, k = v[2], s = v[3] }
  end,

  fits = function(st, limit, burst, need)
    local g = gcd(limit, st.window)
    local scale, refill = st.window / g, limit / g
    local full = burst * scale
    local tokens = full
    if st.t then
      tokens = st.k
      if st.s ~= scale then tokens = math.floor(tokens / st.s) * scale end
      local missing = full - tokens
      if missing <= 0 or (st.now - st.t) * refill >= missing then
        tokens = full
      else
        tokens = tokens + (st.now - st.t) * refill
      end
    end
    st.scale, st.refill, st.full, st.tokens = scale, refill, full, tokens
    if need > burst then return nil end
    return tokens >= need * scale
  end,

  settle = function(key, st, _, _, cost, fits, commit, slack, deep)
    -- A bucket of no capacity (rate 0) holds nothing to store, even for an overdraw.
    if commit and cost > 0 and st.full > 0 then
      local floor = -st.full
      if deep then floor = floor - DEEP_DEBT_MS * st.refill end
      st.tokens = math.max(floor, st.tokens - cost * st.scale)
      must('HSET', key, 't', int(st.now), 'k', int(st.tokens), 's', int(st.scale))
      must('PEXPIRE', key, ceil_div(st.full - st.tokens, st.refill) + slack)
    end
    local reset
    if fits == nil then
      reset = -1
    elseif fits then
      reset = ceil_div(st.full - st.tokens, st.refill)
    else
      reset = ceil_div(math.max(cost, 1) * st.scale - st.tokens, st.refill)
    end
    local past = 0
    if st.tokens < 0 then past = ceil_div(-st.tokens, st.scale) end
    return math.max(0, math.floor(st.tokens / st.scale)), reset, past
  end,

  give_back = function(key, st, limit, burst, cost, slack)
    local fits = ALGORITHMS[3].fits(st, limit, burst, 1)
    if fits ~= nil then fits = true end
    if cost > 0 and st.t and st.tokens < st.full then
      st.tokens = math.min(st.full, st.tokens + cost * st.scale)
      must('HSET', key, 't', int(st.now), 'k', int(st.tokens), 's', int(st.scale))
      must('PEXPIRE', key, ceil_div(st.full - st.tokens, st.refill) + slack)
    end
    return ALGORITHMS[3].settle(key, st, limit, burst, 0, fits, false, slack)
  end,

  refund = function(key, at, window, limit, burst, cost)
    local v = read_fields(key, 't', 'k', 's')
    if not v then return false end
    local t, k = v[1], v[2]
    if not t or not k or t < at then return false end
    local g = gcd(limit, window)
    local scale, refill = window / g, limit / g
    if v[3] ~= scale then return false end
    local back = cost * scale - (t - at) * refill
    if back <= 0 then return false end
    must('HSET', key, 'k', int(math.min(burst * scale, k + back)))
    return true
  end,
}
