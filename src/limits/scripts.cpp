#include "limits/scripts.hpp"

namespace sluice::limits {

namespace {

// Where calendar month `idx` (months since 1970-01, UTC) starts, in Unix ms: the admission
// script's period ends and the settlement script's counter expiries (check.cpp's
// month_start_ms, in Lua).
constexpr std::string_view kMonthStart = R"lua(
local function month_start(idx)
  local y = 1970 + math.floor(idx / 12)
  local m = idx - (y - 1970) * 12 + 1
  if m <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local mp = m > 2 and m - 3 or m + 9
  local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + math.floor((153 * mp + 2) / 5)
  return (era * 146097 + doe - 719468) * 86400000
end
)lua";

std::string with_month_start(std::string_view body) {
  std::string s(kMonthStart);
  s += body;
  return s;
}

}  // namespace

// The same algorithms as LocalCounters (local.cpp); a change to one is a change to both
// (tests/integration/limits.test.mjs compares them through the gateway).
const std::string kAdmitScript = with_month_start(R"lua(
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local id = ARGV[1]
local n = #KEYS
-- How long the admission's record is kept (ms), after the checks' arguments.
local record_ms = tonumber(ARGV[6 * n + 2]) or 60000
-- The admission's record (see kAdmitScript's comment in scripts.hpp): one already there
-- means the gateway gave this call up and voided it first; it then does nothing.
local mark = (string.match(KEYS[1], '^.-{[^}]*}') or KEYS[1]) .. ':a:' .. id
if redis.call('EXISTS', mark) == 1 then return {-1} end

local function month_index(ms)
  local z = math.floor(ms / 86400000) + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local y = yoe + era * 400
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local m = mp < 10 and mp + 3 or mp - 9
  if m <= 2 then y = y + 1 end
  return (y - 1970) * 12 + (m - 1)
end

local out = {0, 0, now}
local plan = {}
local denied = 0
local retry = 0
for i = 1, n do
  local b = 1 + (i - 1) * 6
  local kind = ARGV[b + 1]
  local limit = tonumber(ARGV[b + 2])
  local w = tonumber(ARGV[b + 3])
  local cost = tonumber(ARGV[b + 4])
  local extra = tonumber(ARGV[b + 5])
  local want = tonumber(ARGV[b + 6])
  local key = KEYS[i]
  local ok, remaining, reset
  local wait = 0
  local period = 0
  local grant = 0
  if kind == 'fw' then
    local idx = math.floor(now / w)
    local k = key .. ':' .. idx
    local cur = tonumber(redis.call('GET', k) or '0')
    ok = cur + cost <= limit
    remaining = limit - cur
    reset = (idx + 1) * w - now
    wait = reset
    -- A lease only while the last tenth of the window's limit stays untouched by leases.
    if want > 0 and limit - cur - cost - want >= math.ceil(limit / 10) then grant = want end
    period = idx
    plan[i] = {k, (idx + 1) * w + 1000}
  elseif kind == 'sw' then
    local idx = math.floor(now / w)
    local k = key .. ':' .. idx
    local v = redis.call('MGET', k, key .. ':' .. (idx - 1))
    local cur = tonumber(v[1] or '0')
    local prev = tonumber(v[2] or '0')
    local elapsed = now - idx * w
    local est = prev * (w - elapsed) / w + cur
    ok = est + cost <= limit
    remaining = math.floor(limit - est)
    reset = (idx + 1) * w - now
    if want > 0 and limit - est - cost - want >= math.ceil(limit / 10) then grant = want end
    period = idx
    if not ok then
      if cur + cost > limit then
        wait = reset + math.ceil(w * (cur - (limit - cost)) / cur)
      else
        wait = math.ceil((w * (prev - (limit - cur - cost)) - elapsed * prev) / prev)
      end
    end
    plan[i] = {k, (idx + 2) * w + 1000}
  elseif kind == 'sl' then
    -- The time of every request admitted in the window (now - w, now], one member each.
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now - w)
    local cur = redis.call('ZCARD', key)
    ok = cur + cost <= limit
    remaining = limit - cur
    -- Until the oldest entry leaves (this request's own, if the log was empty).
    reset = w
    if cur > 0 then reset = tonumber(redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2]) + w - now end
    if not ok then
      -- Until enough entries have left for this request's cost.
      local need = cur + cost - limit
      if need <= cur then
        wait = tonumber(redis.call('ZRANGE', key, need - 1, need - 1, 'WITHSCORES')[2]) + w - now
      else
        wait = w
      end
    end
    plan[i] = {key, now + w + 1000}
  elseif kind == 'tb' then
    -- "<tokens> <last refill ms>" in one string: one GET, one SET.
    local v = redis.call('GET', key)
    local tokens, ts = extra, now
    if v then
      local sp = string.find(v, ' ', 1, true)
      tokens = tonumber(string.sub(v, 1, sp - 1))
      ts = tonumber(string.sub(v, sp + 1))
    end
    if now > ts then tokens = math.min(extra, tokens + (now - ts) * limit / w) end
    ok = tokens >= cost
    if want > 0 and tokens - cost - want >= math.ceil(extra / 10) then grant = want end
    local left = tokens - (ok and cost + grant or 0)
    remaining = math.floor(tokens)
    reset = math.ceil((extra - left) * w / limit)
    if not ok then wait = math.ceil((cost - tokens) * w / limit) end
    plan[i] = {key, left, reset}
  else
    local idx, ends
    if w == 0 then
      idx = month_index(now)
      ends = month_start(idx + 1)
    else
      idx = math.floor(now / w)
      ends = (idx + 1) * w
    end
    local k = key .. ':' .. idx
    local z = k .. ':r'
    -- next: the earliest expiry in the reservation set (0 = none), so the set is scanned
    -- only when something may have expired.
    local h = redis.call('HMGET', k, 'used', 'reserved', 'next')
    local used = tonumber(h[1] or '0')
    local reserved = tonumber(h[2] or '0')
    local nxt = tonumber(h[3] or '0')
    if nxt ~= 0 and nxt <= now then
      -- Reservations whose request never settled are released when they expire.
      local expired = redis.call('ZRANGEBYSCORE', z, '-inf', now)
      for _, m in ipairs(expired) do
        local amount = tonumber(string.match(m, ':(%d+)$'))
        local lease = string.match(m, '^(.*):L:%d+$')
        if lease then
          -- A lease: what its requests consumed left `reserved` when they settled.
          amount = amount - tonumber(redis.call('HGET', k, 'c:' .. lease) or '0')
          redis.call('HDEL', k, 'c:' .. lease)
        end
        reserved = reserved - amount
      end
      if reserved < 0 then reserved = 0 end
      redis.call('ZREMRANGEBYSCORE', z, '-inf', now)
      local first = redis.call('ZRANGE', z, 0, 0, 'WITHSCORES')
      nxt = tonumber(first[2] or '0')
      redis.call('HSET', k, 'reserved', reserved, 'next', nxt)
    end
    ok = used + reserved + cost <= limit
    -- A lease: this request's tokens plus `want` more, reserved as one holding the process
    -- draws on; only while the last tenth of the limit stays untouched by leases.
    if want > 0 and used + reserved + cost + want <= limit - math.ceil(limit / 10) then grant = want end
    remaining = limit - used - reserved
    if remaining < 0 then remaining = 0 end
    reset = ends - now
    wait = reset
    period = idx
    plan[i] = {k, z, ends + extra, now + extra, nxt, h[1] == false and h[2] == false}
  end
  out[#out + 1] = remaining
  out[#out + 1] = reset
  out[#out + 1] = period
  out[#out + 1] = grant
  plan[i].grant = grant
  if not ok then
    if denied == 0 then denied = i end
    if wait > retry then retry = wait end
  end
end

if denied ~= 0 then
  out[1] = denied
  out[2] = math.max(retry, 1)
  for i = 1, n do out[3 + 4 * i] = 0 end  -- nothing taken, nothing leased
  return out
end
local undo = {}
for i = 1, n do
  local b = 1 + (i - 1) * 6
  local kind = ARGV[b + 1]
  local cost = tonumber(ARGV[b + 4])
  local p = plan[i]
  if kind == 'fw' or kind == 'sw' then
    -- The first increment of a window creates the key: it sets the expiry once.
    local take = cost + p.grant
    if take > 0 then
      if redis.call('INCRBY', p[1], take) == take then redis.call('PEXPIREAT', p[1], p[2]) end
      undo[#undo + 1] = {'f', p[1], take}
    end
  elseif kind == 'sl' then
    if cost > 0 then
      for j = 1, cost do redis.call('ZADD', p[1], now, id .. ':' .. j) end
      redis.call('PEXPIREAT', p[1], p[2])
      undo[#undo + 1] = {'l', p[1], id, cost}
    end
  elseif kind == 'tb' then
    redis.call('SET', p[1], tostring(p[2]) .. ' ' .. now, 'PX', p[3] + 1000)
    undo[#undo + 1] = {'t', p[1], cost + p.grant, tonumber(ARGV[b + 5])}
  else
    -- (A lease request alone, cost 0, that got no lease takes nothing.)
    local take = cost + p.grant
    if take > 0 then
      local member = p.grant > 0 and (id .. ':L:' .. take) or (id .. ':' .. cost)
      redis.call('HINCRBY', p[1], 'reserved', take)
      redis.call('ZADD', p[2], p[4], member)
      redis.call('PEXPIREAT', p[2], p[3])
      if p[5] == 0 then redis.call('HSET', p[1], 'next', p[4]) end
      if p[6] then redis.call('PEXPIREAT', p[1], p[3]) end
      undo[#undo + 1] = {'q', p[1], member, take}
    end
  end
end
-- What a void must give back if the gateway never learns of this answer.
if #undo > 0 then redis.call('SET', mark, cjson.encode(undo), 'PX', record_ms) end
return out
)lua");

const std::string kSettleScript = with_month_start(R"lua(
local keep = tonumber(ARGV[1])
local worker = ARGV[2]
local seq = tonumber(ARGV[3])
local record_ms = tonumber(ARGV[4])
-- (Records are named after the first key's hash tag, "<prefix>:{...}": same Redis
-- Cluster slot, and apart from the counters.)
local function record(k, kind, id) return (string.match(k, '^.-{[^}]*}') or k) .. kind .. id end
-- A worker's batches are numbered and sent one at a time, a lost one again until Redis
-- answers: one that is not newer than the last this worker ran (under this tag) has run.
if worker ~= '' then
  local r = record(KEYS[1], ':s:', worker)
  local last = tonumber(redis.call('GET', r) or '-1')
  if seq <= last then return 0 end
  redis.call('SET', r, seq, 'PX', 10 * record_ms)
end

-- When the period of quota counter k ("...q<i>.<per>:<index>") ends, in Unix ms.
local function period_end(k)
  local per, idx = string.match(k, '%.(%a+):(%d+)$')
  idx = tonumber(idx)
  if not idx then return nil end
  if per == 'minute' then return (idx + 1) * 60000 end
  if per == 'hour' then return (idx + 1) * 3600000 end
  if per == 'day' then return (idx + 1) * 86400000 end
  if per ~= 'month' then return nil end
  return month_start(idx + 1)
end

for i = 1, #KEYS do
  local k = KEYS[i]
  local b = 3 * i + 2
  local op = string.sub(ARGV[b], 1, 1)
  local id = string.sub(ARGV[b], 3)
  local amount = ARGV[b + 1]
  local actual = tonumber(ARGV[b + 2])
  if op == 'v' then
    -- Admission <id> (k: its first counter key) was given up by the gateway: what it
    -- took is given back, and if it has not run yet, its record makes it do nothing.
    local mark = record(k, ':a:', id)
    local undo = redis.call('GET', mark)
    redis.call('SET', mark, 'v', 'PX', record_ms)
    if undo and undo ~= 'v' then
      for _, u in ipairs(cjson.decode(undo)) do
        if u[1] == 'f' then
          if redis.call('EXISTS', u[2]) == 1 and redis.call('DECRBY', u[2], u[3]) < 0 then
            redis.call('SET', u[2], 0, 'KEEPTTL')
          end
        elseif u[1] == 'l' then
          for j = 1, u[4] do redis.call('ZREM', u[2], u[3] .. ':' .. j) end
        elseif u[1] == 't' then
          local v = redis.call('GET', u[2])
          if v then
            local sp = string.find(v, ' ', 1, true)
            local tokens = math.min(u[4], tonumber(string.sub(v, 1, sp - 1)) + u[3])
            redis.call('SET', u[2], tostring(tokens) .. ' ' .. string.sub(v, sp + 1), 'KEEPTTL')
          end
        elseif redis.call('ZREM', u[2] .. ':r', u[3]) == 1 then
          if redis.call('HINCRBY', u[2], 'reserved', -u[4]) < 0 then redis.call('HSET', u[2], 'reserved', 0) end
        end
      end
    end
  else
    if op == 'r' then
      -- A request's own reservation.
      if redis.call('ZREM', k .. ':r', id .. ':' .. amount) == 1 then
        if redis.call('HINCRBY', k, 'reserved', -tonumber(amount)) < 0 then redis.call('HSET', k, 'reserved', 0) end
      end
    elseif op == 'c' then
      -- A request served from lease `id` (of `amount` tokens): its usage leaves the lease's
      -- holding (as far as the holding goes) while the lease is still there.
      if redis.call('ZSCORE', k .. ':r', id .. ':L:' .. amount) then
        local cf = 'c:' .. id
        local take = math.min(actual, tonumber(amount) - tonumber(redis.call('HGET', k, cf) or '0'))
        if take > 0 then
          redis.call('HINCRBY', k, cf, take)
          redis.call('HINCRBY', k, 'reserved', -take)
        end
      end
    elseif op == 'x' then
      -- Lease `id` is given back: what its requests did not consume is released.
      if redis.call('ZREM', k .. ':r', id .. ':L:' .. amount) == 1 then
        local cf = 'c:' .. id
        local left = tonumber(amount) - tonumber(redis.call('HGET', k, cf) or '0')
        redis.call('HDEL', k, cf)
        if redis.call('HINCRBY', k, 'reserved', -left) < 0 then redis.call('HSET', k, 'reserved', 0) end
      end
    end
    -- ('u': usage only, of a request counted in memory while Redis was unreachable.)
    if actual > 0 then redis.call('HINCRBY', k, 'used', actual) end
    -- A counter created here (no admission made it this period: Redis restarted, or it
    -- was down; or the period is over) lasts until its period ends, plus `keep`.
    if redis.call('PTTL', k) == -1 then
      local ends = period_end(k)
      if ends then redis.call('PEXPIREAT', k, ends + keep) else redis.call('PEXPIRE', k, keep) end
    end
  end
end
return 1
)lua");

const std::string_view kLedgerScript = R"lua(
local out = {}
for _, k in ipairs(KEYS) do
  local h = redis.call('HMGET', k, 'used', 'reserved')
  out[#out + 1] = h[1] or ''
  out[#out + 1] = h[2] or ''
end
return out
)lua";

}  // namespace sluice::limits
