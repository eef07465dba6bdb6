--[[
dispatch.lua: decides every counter of one request, all or nothing.

KEYS[i]  the counter keys, one per distinct counter, all hash-tagged by tenant
ARGV[1]  now in ms, or '' to read Redis TIME (CLOCK=redis)
ARGV[2 + 5(i-1) ..]  per key i: algorithm (1 fixed_window, 2 sliding_window, 3 token_bucket),
         window ms W, limit L, burst B, cost (0 = check only: fits when one unit fits)

Reply, integers: { allowed, fits_1, remaining_1, reset_ms_1, fits_2, ... }
  allowed    1 when every counter fit and every cost was consumed, 0 when nothing was consumed
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

local states, verdicts, allowed = {}, {}, true
for i = 1, #KEYS do
  local a = 2 + 5 * (i - 1)
  local algorithm = ALGORITHMS[tonumber(ARGV[a])]
  local window, limit, burst = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local cost = tonumber(ARGV[a + 4])
  local state = algorithm.load(KEYS[i], now, window)
  local fits = algorithm.fits(state, limit, burst, math.max(cost, 1))
  states[i], verdicts[i] = state, fits
  if not fits then allowed = false end
end

local reply = { allowed and 1 or 0 }
for i = 1, #KEYS do
  local a = 2 + 5 * (i - 1)
  local algorithm = ALGORITHMS[tonumber(ARGV[a])]
  local remaining, reset = algorithm.settle(KEYS[i], states[i], tonumber(ARGV[a + 2]),
    tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), verdicts[i], allowed, slack)
  reply[#reply + 1] = verdicts[i] and 1 or 0
  reply[#reply + 1] = remaining
  reply[#reply + 1] = reset
end
return reply
