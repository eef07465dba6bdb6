--[[
sliding_window.lua: sliding window counter. The previous window's count p is weighted by the
part of it that still overlaps the sliding window: allowed when p*(W-e)/W + c + need <= L,
compared exactly as p*(W-e) <= (L-c-need)*W.

State, a hash per counter: t = last decision time (ms), w = window index of c, c = count in
window w, p = count in window w-1.

  load(key, now, W)                 -> state (now raised to t: time never runs backwards), or nil
                                       and an error reply when the key is not a counter
  fits(state, L, B, need)           -> boolean; nil when need > L (never fits)
  settle(key, state, L, B, cost, fits, commit, slack)
                                    -> remaining, reset_ms, past; writes only when commit and
                                       cost > 0; past is the weighted count past L (0 within it)

Consuming adds the cost. Only an overdraw commits a cost that does not fit: it is recorded in
full, past L (a window's count up to 2^33 - 1, which keeps the products exact).

Reset, in whole milliseconds rounded up (X = L - c - need):
  allowed: 2W - e while the current window counts anything, else W - e
  denied, c + need <= L: W - floor(X*W/p) - e           (p's weight falls enough in this window)
  denied, c + need >  L: (W - e) + W - floor((L-need)*W/c)   (c, as next window's p, must fall)

  give_back(key, state, L, B, cost, slack)
                                    -> remaining, reset_ms after giving the cost back
  refund(key, at, W, L, B, cost)    -> true when it gave the cost back

Give back (is_negative_hits): the cost comes off the current window's count c, never below 0;
the previous window's p is what it is. A counter with nothing counted in the current window is
not written. Its remaining and reset are then those of a check that fits.

Refund: the cost was consumed in window floor(at / W). While that is still the current window, it
comes off c; once the next window has begun, the count it landed in is p, and it comes off p, so
its remaining weight is given back too. Two windows on, it weighs nothing and nothing is given
back. A key older than `at` (expired, or its write lost in a failover) no longer holds it.
--]]

ALGORITHMS[2] = {
  load = function(key, now, window)
    local v, err = read_fields(key, 't', 'w', 'c', 'p')
    if not v then return nil, err end
    local t = v[1]
    if t and t > now then now = t end
    local index = math.floor(now / window)
    local w = v[2]
    local current, previous = 0, 0
    if w == index then
      current, previous = v[3] or 0, v[4] or 0
    elseif w == index - 1 then
      previous = v[3] or 0
    end
    -- A key already written in this window already expires one window after it.
    return { now = now, window = window, index = index, e = now - index * window,
             c = current, p = previous, expiring = w == index }
  end,

  fits = function(s, limit, _, need)
    if need > limit then return nil end
    local spare = limit - s.c - need
    if spare < 0 then return false end
    return product_difference(s.p, s.window - s.e, spare, s.window) <= 0
  end,

  settle = function(key, s, limit, _, cost, fits, commit, slack)
    local W, e = s.window, s.e
    local weighted, rest = mul_div(s.p, W - e, W)
    if rest > 0 then weighted = weighted + 1 end
    if commit and cost > 0 then
      s.c = math.min(s.c + cost, MAX_SLIDING_COUNT)
      must('HSET', key, 't', int(s.now), 'w', int(s.index), 'c', int(s.c), 'p', int(s.p))
      expire_once(key, s, 2 * W - e + slack)
    end
    local remaining = math.max(0, limit - s.c - weighted)
    local past = math.max(0, s.c + weighted - limit)

    local need = math.max(cost, 1)
    local reset
    if fits == nil then
      reset = -1
    elseif fits then
      reset = (s.c > 0) and (2 * W - e) or (W - e)
    elseif s.c + need <= limit then
      reset = W - mul_div(limit - s.c - need, W, s.p) - e
    else
      reset = (W - e) + math.max(0, W - mul_div(limit - need, W, s.c))
    end
    return remaining, reset, past
  end,

  give_back = function(key, s, limit, burst, cost, slack)
    if cost > 0 and s.c > 0 then
      s.c = math.max(0, s.c - cost)
      must('HSET', key, 't', int(s.now), 'w', int(s.index), 'c', int(s.c), 'p', int(s.p))
      expire_once(key, s, 2 * s.window - s.e + slack)
    end
    return ALGORITHMS[2].settle(key, s, limit, burst, 0, true, false, slack)
  end,

  refund = function(key, at, window, _, _, cost)
    local v = read_fields(key, 't', 'w', 'c', 'p')
    if not v then return false end
    local t, w = v[1], v[2]
    if not t or t < at then return false end
    local index = math.floor(at / window)
    if w == index then
      must('HSET', key, 'c', int(math.max(0, (v[3] or 0) - cost)))
    elseif w == index + 1 then
      must('HSET', key, 'p', int(math.max(0, (v[4] or 0) - cost)))
    else
      return false
    end
    return true
  end,
}
