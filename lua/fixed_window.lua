--[[
fixed_window.lua: count per window, windows aligned to the epoch (floor(now / W)).

State, a hash per counter: t = last decision time (ms), w = window index, c = count in window w.

  load(key, now, W)                 -> state (now raised to t: time never runs backwards), or nil
                                       and an error reply when the key is not a counter
  fits(state, L, B, need)           -> true when c + need <= L; nil when need > L (never fits)
  settle(key, state, L, B, cost, fits, commit, slack)
                                    -> remaining, reset_ms, past; writes only when commit and
                                       cost > 0; past is the count past L (0 within it)

Consuming adds the cost. Only an overdraw commits a cost that does not fit: it is recorded in
full, past L (up to 2^52), so the counter stays over until the window ends or refunds bring it
back under.

Reset: W - e, whether allowed or denied (e = time elapsed in the window); -1 when the cost
exceeds the limit and never fits.

TTL: the rest of the window (plus the slack), set by the first write of each window only: every
later write in it would set the same moment again (see expire_once in lib.lua).

  give_back(key, state, L, B, cost, slack)
                                    -> remaining, reset_ms after giving the cost back
  refund(key, at, W, L, B, cost)    -> true when it gave the cost back to window floor(at / W)

Give back (is_negative_hits): the cost comes off the current window's count, never below 0. A
counter with nothing counted in the current window (none, or an older window's) is not written.
The key expires when the window ends, as before.

Refund: the cost comes off c while the window it was consumed in is still the current one. Once
the window has rolled over, that count no longer decides anything and nothing is given back. A
key older than `at` (expired, or its write lost in a failover) no longer holds the consumption.
--]]

ALGORITHMS[1] = {
  load = function(key, now, window)
    local v, err = read_fields(key, 't', 'w', 'c')
    if not v then return nil, err end
    local t = v[1]
    if t and t > now then now = t end
    local index = math.floor(now / window)
    local count = 0
    if v[2] == index then count = v[3] or 0 end
    -- A key already written in this window already expires when the window does.
    return { now = now, window = window, index = index, e = now - index * window, c = count,
             expiring = v[2] == index }
  end,

  fits = function(s, limit, _, need)
    if need > limit then return nil end
    return s.c + need <= limit
  end,

  settle = function(key, s, limit, _, cost, fits, commit, slack)
    local rest = s.window - s.e
    if commit and cost > 0 then
      s.c = math.min(s.c + cost, MAX_FIXED_COUNT)
      must('HSET', key, 't', int(s.now), 'w', int(s.index), 'c', int(s.c))
      expire_once(key, s, rest + slack)
    end
    local past = math.max(0, s.c - limit)
    if fits == nil then return math.max(0, limit - s.c), -1, past end
    return math.max(0, limit - s.c), rest, past
  end,

  give_back = function(key, s, limit, _, cost, slack)
    if cost > 0 and s.c > 0 then
      s.c = math.max(0, s.c - cost)
      must('HSET', key, 't', int(s.now), 'w', int(s.index), 'c', int(s.c))
      expire_once(key, s, s.window - s.e + slack)
    end
    return math.max(0, limit - s.c), s.window - s.e
  end,

  refund = function(key, at, window, _, _, cost)
    local v = read_fields(key, 't', 'w', 'c')
    if not v then return false end
    local t = v[1]
    if not t or t < at or v[2] ~= math.floor(at / window) then return false end
    must('HSET', key, 'c', int(math.max(0, (v[3] or 0) - cost)))
    return true
  end,
}
