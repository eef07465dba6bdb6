--[[
lib.lua: shared helpers for tollgate's decision script.

Why Lua: Redis runs a script to completion before it serves any other command, so reading a
counter, deciding and writing it back is one indivisible step, and a whole request (every
counter it touches) is decided in one round trip. See dispatch.lua for KEYS, ARGV and the reply.

tollgate joins lib.lua, the algorithm files and dispatch.lua (in that order) into one piece of
code, which ends by defining `decision`, the entry point. Redis runs it one of two ways (see
src/store/library.ts):
- as a function of a library loaded once with FUNCTION LOAD (Redis 7+), called by FCALL: the
  code below runs once, at load, and each call runs only `decision`;
- as a script, by EVALSHA, where the whole chunk runs again on every call.
Either way, nothing below keeps state between calls: `decision` sets KEYS, ARGV and every per-call
variable before it reads them. Each algorithm file registers itself in ALGORITHMS under its code.

Redis Lua numbers are doubles: integers are exact below 2^53. Limits stay below 2^32, costs below
2^53, a fixed window's count below 2^52, a sliding window's below 2^33 and windows below 2^36 ms;
their products do not stay below 2^53, so the sliding window compares and divides such products
with the exact helpers below.
--]]

-- The call's keys and arguments, set by the entry point (dispatch.lua) on each call: a function
-- gets them as parameters, a script as globals.
local KEYS, ARGV

local ALGORITHMS = {}

-- Where a refund (is_negative_hits) names the counter it gave back to, so that every process
-- forgets what it remembers of it (src/store/invalidation.ts).
local GIVEN_BACK_CHANNEL = 'tollgate:given-back'

-- The error a request gets when one of its counters holds what tollgate did not write. Keys are
-- left out of messages: they carry descriptor values, which may be secrets.
local FOREIGN = { err = 'WRONGTYPE a counter key holds a value that tollgate did not write' }

-- Redis 7.0 names no command when a script's user may not run one ("The user executing the script
-- can't run this command"), and Valkey's refusal does not start with NOPERM ("ACL failure in
-- script: User u has no permissions to run the 'x' command"): the error that tollgate passes on
-- is a NOPERM naming the command, so that health and logs say what the Redis user lacks.
local function refused(reply, command)
  local err = reply.err
  if string.find(err, 'NOPERM', 1, true) or string.find(err, "can't run this command", 1, true)
    or string.find(err, 'no permissions to run', 1, true) then
    return { err = 'NOPERM the Redis user may not run the \'' .. command ..
      '\' command, which checks need' }
  end
  return reply
end

-- Runs a command that the whole call depends on: TIME, and the writes. Its failure (a missing
-- ACL permission, OOM, READONLY) belongs to Redis, not to a counter, so it fails the whole call.
-- Redis checks memory only at a script's first write, so no request is ever half written for
-- lack of memory.
local function must(command, ...)
  local reply = redis.pcall(command, ...)
  if type(reply) == 'table' and reply.err then error(refused(reply, string.lower(command))) end
  return reply
end

-- A counter's fields, as numbers (nil when absent); or nil and an error reply when the key is not
-- a hash, or a field is not a finite number. Read with pcall, so that such a key fails only the
-- request that touches it, before anything of that request is written.
local function read_fields(key, ...)
  local raw = redis.pcall('HMGET', key, ...)
  if raw.err then return nil, refused(raw, 'hmget') end
  local fields = {}
  for i = 1, select('#', ...) do
    if raw[i] then
      local n = tonumber(raw[i])
      if n == nil or n ~= n or n == math.huge or n == -math.huge then return nil, FOREIGN end
      fields[i] = n
    end
  end
  return fields
end

-- Sets a window counter's TTL on its first write in the window. The TTL ends at a moment fixed
-- by the window (its end, or one window later, plus the slack), so a later write in the same
-- window would set the same moment again: it is skipped, one command less per counter. Redis
-- and the service's clock run at the same rate, and the slack covers instances whose clocks
-- disagree (see dispatch.lua).
local function expire_once(key, state, ttl)
  if state.expiring then return end
  must('PEXPIRE', key, ttl)
  state.expiring = true
end

-- The most an overdraw records: a fixed window's count stays exact below 2^53; a sliding window's,
-- which its products multiply, below 2^33 (see below).
local MAX_FIXED_COUNT = 4503599627370496 -- 2^52
local MAX_SLIDING_COUNT = 8589934591 -- 2^33 - 1

-- Split point for the exact products: factors below 2^33 times halves below 2^20 stay below 2^53.
local SPLIT = 1048576 -- 2^20

-- a*b - c*d, exact whenever the true result is below 2^53 in magnitude, and always of the right
-- sign. Requires 0 <= a, c < 2^33 and 0 <= b, d < 2^36, all integers.
local function product_difference(a, b, c, d)
  local bh, bl = math.floor(b / SPLIT), b % SPLIT
  local dh, dl = math.floor(d / SPLIT), d % SPLIT
  -- Both partial differences are exact; their sum is the correctly rounded true difference.
  return (a * bh - c * dh) * SPLIT + (a * bl - c * dl)
end

-- floor(a*b / c) and the remainder a*b - q*c, exact for a < 2^33, b < 2^36, 0 < c < 2^36 and a
-- quotient below 2^36, when c or the quotient is below 2^33.
local function mul_div(a, b, c)
  local q = math.floor(a * b / c)
  local r
  if q < c then r = product_difference(a, b, q, c) else r = product_difference(a, b, c, q) end
  -- The double estimate is off by at most a unit or two; walk it to the exact quotient.
  while r < 0 do
    q = q - 1
    r = r + c
  end
  while r >= c do
    q = q + 1
    r = r - c
  end
  return q, r
end

local function ceil_div(a, b)
  return math.floor((a + b - 1) / b)
end

local function gcd(a, b)
  while b > 0 do
    a, b = b, a % b
  end
  return a
end

-- Integers go to Redis as decimal strings: Lua's default formatting would round large counts.
local function int(n)
  return string.format('%d', n)
end
