--[[
dispatch.lua: decides every counter of one request, all or nothing.

KEYS[i]  the counter keys, one per distinct counter, all hash-tagged by tenant
ARGV[1]  now in ms, or '' to read Redis TIME (CLOCK=redis)
ARGV[2 + 6(i-1) ..]  per key i: algorithm (1 fixed_window, 2 sliding_window, 3 token_bucket),
         window ms W, limit L, burst B, cost (0 = check only: fits when one unit fits), and flags:
           1 shadow    outside the gate: consumed when it fits, never blocks the others
           2 quota     blocks only when every quota counter of the request is over
           4 overdraw  consumed even when over, saturating at the limit

The request is allowed when every enforced counter (neither shadow nor quota) fits, and, if there
are quota counters, at least one of them fits. Then the enforced counters and the quota counters
that fit are consumed; otherwise none of them is.

Reply, integers: { allowed, fits_1, remaining_1, reset_ms_1, fits_2, ... }
  allowed    1 when the request is allowed as above, 0 when it is denied
  fits_i     1 when counter i fit its cost, 0 otherwise
  reset_ms_i milliseconds until it resets; -1 when the cost exceeds the limit and never fits

Every written key gets a TTL in this same script. With CLOCK=local, the TTL carries one second
of slack, because Redis expires keys by its own clock, which may run ahead of the service's.
--]]

local now, slack = tonumber(ARGV[1]), 1000
if not now then
  local time = redis.call('TIME')
  now, slack = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000), 0
end

local SHADOW, QUOTA, OVERDRAW = 1, 2, 4
local function has(flags, flag)
  return flags % (2 * flag) >= flag
end

local states, verdicts, enforced, quotas, quota_fits = {}, {}, true, 0, false
for i = 1, #KEYS do
  local a = 2 + 6 * (i - 1)
  local algorithm = ALGORITHMS[tonumber(ARGV[a])]
  local window, limit, burst = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local cost, flags = tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5])
  local state = algorithm.load(KEYS[i], now, window)
  local fits = algorithm.fits(state, limit, burst, math.max(cost, 1))
  states[i], verdicts[i] = state, fits
  if has(flags, SHADOW) then
    -- outside the gate
  elseif has(flags, QUOTA) then
    quotas = quotas + 1
    if fits then quota_fits = true end
  elseif not fits then
    enforced = false
  end
end
local allowed = enforced and (quotas == 0 or quota_fits)

local reply = { allowed and 1 or 0 }
for i = 1, #KEYS do
  local a = 2 + 6 * (i - 1)
  local algorithm = ALGORITHMS[tonumber(ARGV[a])]
  local flags, fits = tonumber(ARGV[a + 5]), verdicts[i]
  local commit = allowed
  if has(flags, SHADOW) then
    commit = fits and true or false
  elseif has(flags, QUOTA) then
    commit = allowed and fits and true or false
  end
  if has(flags, OVERDRAW) then commit = true end
  local remaining, reset = algorithm.settle(KEYS[i], states[i], tonumber(ARGV[a + 2]),
    tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), fits, commit, slack)
  reply[#reply + 1] = verdicts[i] and 1 or 0
  reply[#reply + 1] = remaining
  reply[#reply + 1] = reset
end
return reply
