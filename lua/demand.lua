-- RLQS demand: one pool's consumers (a bucket on a stream) and their recent demand, in one hash,
-- so every worker and every instance splits the pool over the same clients.
-- KEYS[1]: the pool's hash. ARGV: consumer, demand, ttl_ms, now_ms ('' for Redis TIME),
-- max_consumers. Each field is "demand:expires_at_ms". Records the consumer (unless the pool is
-- full and it is new), drops the expired ones, and returns {total demand, live consumers,
-- recorded '1' or '0'} as strings, the consumer included when it was recorded. The hash lives as
-- long as its longest-lived consumer.
local key = KEYS[1]
local consumer = ARGV[1]
local demand = tonumber(ARGV[2])
local ttl = tonumber(ARGV[3])
local now = tonumber(ARGV[4])
if now == nil then
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
local max_consumers = tonumber(ARGV[5])

local fields = redis.call('HGETALL', key)
local total, live, known, last = 0, 0, false, now + ttl
for i = 1, #fields, 2 do
  local value = fields[i + 1]
  local sep = string.find(value, ':', 1, true)
  local expires = sep and tonumber(string.sub(value, sep + 1)) or 0
  if fields[i] == consumer then
    known = true
  elseif expires <= now then
    redis.call('HDEL', key, fields[i])
  else
    live = live + 1
    total = total + (tonumber(string.sub(value, 1, sep - 1)) or 0)
    if expires > last then last = expires end
  end
end
local recorded = known or live < max_consumers
if recorded then
  redis.call('HSET', key, consumer, string.format('%.17g', demand) .. ':' .. tostring(now + ttl))
  live = live + 1
  total = total + demand
end
redis.call('PEXPIRE', key, last - now)
return {string.format('%.17g', total), tostring(live), recorded and '1' or '0'}
