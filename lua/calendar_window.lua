--[[
calendar_window.lua: a fixed window on the calendar of a time zone (a day, an ISO week, a month or
a year there; src/rules/calendar.ts). The service cannot ask Redis what day it is in a zone, so it
sends the window argument as four boundaries in ms, "b0,b1,b2,b3": the starts of the period before
the one its own clock is in, of that one, and of the two after. The window is the one of them that
holds now, Redis's clock or the one the call names: clocks that disagree by less than a period
find the same window. A now outside all four (a clock a period or more away) takes the first or
the last, with at least a millisecond to its reset.

State, as a fixed window's: t, c, and w, which holds the window's start in ms instead of an
index. Deciding, consuming, giving back and the TTL are the fixed window's (fixed_window.lua);
the window's length is that period's own, so a day across a DST change lasts 23 or 25 hours.

  refund(key, at, bounds, L, B, cost)  -> as the fixed window's, in the window that holds `at`
--]]

local function calendar_window(bounds, at)
  local b = {}
  for n in string.gmatch(bounds, '[^,]+') do b[#b + 1] = tonumber(n) end
  local i = 1
  while i < 3 and at >= b[i + 1] do i = i + 1 end
  return b[i], b[i + 1]
end

ALGORITHMS[4] = {
  load = function(key, now, bounds)
    local v, err = read_fields(key, 't', 'w', 'c')
    if not v then return nil, err end
    local t = v[1]
    if t and t > now then now = t end
    local start, finish = calendar_window(bounds, now)
    local window = finish - start
    local e = math.min(math.max(now - start, 0), window - 1)
    local count = 0
    if v[2] == start then count = v[3] or 0 end
    return { now = now, window = window, index = start, e = e, c = count,
             expiring = v[2] == start }
  end,

  fits = ALGORITHMS[1].fits,
  settle = ALGORITHMS[1].settle,
  give_back = ALGORITHMS[1].give_back,

  refund = function(key, at, bounds, _, _, cost)
    local v = read_fields(key, 't', 'w', 'c')
    if not v then return false end
    local t = v[1]
    if not t or t < at or v[2] ~= calendar_window(bounds, at) then return false end
    must('HSET', key, 'c', int(math.max(0, (v[3] or 0) - cost)))
    return true
  end,
}
