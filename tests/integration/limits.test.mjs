// Rate limits shared through a real Redis (redis-server started here): the articles'
// two-instance experiment, no over-admission under concurrency for each algorithm, Redis
// outages with fail-open and fail-closed, response headers and Retry-After.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { BIN, KEY, chat, delay, metricValue, rawRequest, startGateway, startRedis, tempDir, toYaml, USER, waitFor } from './lib.mjs';

const SIM = { alias: 'demo', provider: 'simulated', sim: { ttft: '2ms', inter_token: '1ms', jitter: 0 } };
const BODY = { model: 'demo', messages: USER, max_tokens: 3 };

function keys() {
  return [
    { name: 'free-app', key: KEY, tenant: 'acme', tier: 'free' },
    { name: 'other-app', key: 'sk-other-1111222233334444', tenant: 'acme', tier: 'free' },
  ];
}

function limitsConfig(redis, rateLimits, extra = {}) {
  return {
    keys: keys(),
    models: [SIM],
    redis: { url: redis.url, retry_interval: '500ms' },
    rate_limits: rateLimits,
    ...extra,
  };
}

async function infra(gw) {
  const r = await rawRequest({ port: gw.adminPort, path: '/infra' });
  assert.equal(r.status, 200);
  return JSON.parse(r.body);
}

async function statuses(gw, n, opts = {}) {
  const out = [];
  for (let i = 0; i < n; i++) out.push((await chat(gw, BODY, opts)).status);
  return out;
}

describe('two instances share one quota through Redis (the articles experiment)', () => {
  let redis;
  const gws = [];
  before(async () => {
    redis = await startRedis();
  });
  after(async () => {
    await Promise.all(gws.map((g) => g.stop()));
    await redis.stop();
  });

  test('redis: 6 requests to each of two instances give exactly 10 successes and 2 429s', async () => {
    const rl = { backend: 'redis', requests: [{ scope: 'key', tier: 'free', limit: 10, window: '1h' }] };
    const a = await startGateway(limitsConfig(redis, rl));
    const b = await startGateway(limitsConfig(redis, rl));
    gws.push(a, b);
    const sa = await statuses(a, 6);
    const sb = await statuses(b, 6);
    assert.deepEqual(sa, [200, 200, 200, 200, 200, 200]);
    assert.deepEqual(sb, [200, 200, 200, 200, 429, 429]);
    // The counter lives in Redis, under the tenant's hash tag.
    const keysInRedis = (await redis.raw('KEYS', 'sluice:*')).split('\n');
    const counter = keysInRedis.find((k) => k.startsWith('sluice:{t:acme}:k:free-app:'));
    assert.ok(counter, `no counter key in ${keysInRedis}`);
    assert.equal(await redis.raw('GET', counter), '10');
  });

  test('memory: the same 12 requests all pass (each instance counts alone)', async () => {
    const rl = { backend: 'memory', requests: [{ scope: 'key', tier: 'free', limit: 10, window: '1h' }] };
    const a = await startGateway(limitsConfig(redis, rl));
    const b = await startGateway(limitsConfig(redis, rl));
    gws.push(a, b);
    const all = [...(await statuses(a, 6)), ...(await statuses(b, 6))];
    assert.equal(all.filter((s) => s === 200).length, 12);
  });
});

describe('no over-admission under concurrency: 3 instances, 300 concurrent requests, quota 50', () => {
  let redis;
  before(async () => {
    redis = await startRedis();
  });
  after(async () => {
    await redis.stop();
  });

  for (const algorithm of ['fixed_window', 'sliding_window', 'sliding_log', 'token_bucket']) {
    test(algorithm, async () => {
      await redis.raw('FLUSHALL');
      // A long window: the run (about a second) is far from a window edge, and the bucket
      // refills less than one request's worth meanwhile.
      const rl = { backend: 'redis', requests: [{ scope: 'tenant', algorithm, limit: 50, window: '1h' }] };
      const gws = await Promise.all([0, 1, 2].map(() => startGateway(limitsConfig(redis, rl))));
      try {
        const results = await Promise.all(
          Array.from({ length: 300 }, (_, i) => chat(gws[i % 3], BODY, { timeout: 30000 })),
        );
        const counts = {};
        for (const r of results) counts[r.status] = (counts[r.status] ?? 0) + 1;
        assert.deepEqual(counts, { 200: 50, 429: 250 }, JSON.stringify(counts));
        for (const r of results.filter((x) => x.status === 429)) {
          assert.equal(r.json.error.code, 'rate_limit_exceeded');
          assert.ok(Number(r.headers.get('retry-after')) >= 1);
        }
      } finally {
        await Promise.all(gws.map((g) => g.stop()));
      }
    });
  }
});

describe('leases: units taken from Redis in advance, admitted without a Redis call', () => {
  let redis;
  before(async () => {
    redis = await startRedis();
  });
  after(async () => {
    await redis.stop();
  });

  for (const algorithm of ['fixed_window', 'token_bucket']) {
    test(`${algorithm}: never over the limit, at most the unused leases under it`, async () => {
      await redis.raw('FLUSHALL');
      const limit = 2000;
      const lease = 20;
      // A day's window: the bucket refills about 0.1 request during the run, so the limit
      // is what the run can get.
      const rl = { backend: 'redis', requests: [{ scope: 'tenant', algorithm, limit, window: '24h', lease }] };
      const gws = await Promise.all([0, 1, 2].map(() => startGateway(limitsConfig(redis, rl))));
      try {
        const counts = {};
        let next = 0;
        const total = 2400;
        // 48 clients, 16 per instance, until `total` requests were sent.
        await Promise.all(
          Array.from({ length: 48 }, async (_, c) => {
            while (next < total) {
              next++;
              const r = await chat(gws[c % 3], BODY, { timeout: 30000 });
              counts[r.status] = (counts[r.status] ?? 0) + 1;
            }
          }),
        );
        const ok = counts[200] ?? 0;
        assert.equal(ok + (counts[429] ?? 0), total, JSON.stringify(counts));
        // Never over; under by at most the units each instance may hold unused (the lease
        // it uses and the one it fetches).
        assert.ok(ok <= limit, `${ok} admitted, limit ${limit}`);
        assert.ok(ok >= limit - 3 * 2 * lease, `${ok} admitted, limit ${limit}`);
        let leased = 0;
        let refills = 0;
        for (const gw of gws) {
          const m = await gw.metrics();
          leased += metricValue(m, 'sluice_ratelimit_counted_total', { backend: 'lease' });
          refills += metricValue(m, 'sluice_ratelimit_lease_refills_total');
        }
        // Most admissions needed no Redis call; leases were refilled before they ran out.
        assert.ok(leased > ok / 2, `${leased} of ${ok} admitted from leases`);
        assert.ok(refills > 0, 'no lease was refilled in the background');
      } finally {
        await Promise.all(gws.map((g) => g.stop()));
      }
    });
  }
});

describe('Redis goes away and comes back', () => {
  let redis;
  before(async () => {
    redis = await startRedis();
  });
  after(async () => {
    await redis.stop();
  });

  test('fail open (auto): every request is served, local limits still apply, shared counting resumes within 5 s', async () => {
    const rl = { backend: 'auto', requests: [{ scope: 'key', limit: 5, window: '1h' }] };
    const gw = await startGateway(limitsConfig(redis, rl));
    try {
      assert.deepEqual(await statuses(gw, 3), [200, 200, 200]);
      assert.equal((await infra(gw)).rate_limiter.active, 'redis');
      await redis.stop();
      // Served, counted per instance from zero: 5 pass, then 429. Never a 5xx.
      const down = await statuses(gw, 7);
      assert.deepEqual(down, [200, 200, 200, 200, 200, 429, 429]);
      const i1 = await infra(gw);
      assert.equal(i1.rate_limiter.redis.up, false);
      assert.equal(i1.rate_limiter.active, 'memory');
      assert.ok(i1.rate_limiter.counts.counted_local >= 7);
      const metrics = await gw.metrics();
      assert.equal(metricValue(metrics, 'sluice_redis_up'), 0);
      assert.equal(metricValue(metrics, 'sluice_ratelimit_backend', { configured: 'auto', active: 'memory' }), 1);

      // Back (empty: this Redis kept nothing): shared counting resumes by itself.
      const t0 = Date.now();
      await redis.start();
      await waitFor(async () => (await infra(gw)).rate_limiter.active === 'redis', {
        timeout: 5000,
        interval: 100,
        what: 'the limiter to return to Redis',
      });
      const recovered = Date.now() - t0;
      assert.ok(recovered <= 5000, `recovered after ${recovered} ms`);
      assert.deepEqual(await statuses(gw, 6), [200, 200, 200, 200, 200, 429]);
      const counter = (await redis.raw('KEYS', 'sluice:*')).split('\n').find((k) => k.includes(':k:free-app:'));
      assert.ok(counter);
      assert.equal(await redis.raw('GET', counter), '5');
      assert.equal(metricValue(await gw.metrics(), 'sluice_redis_up'), 1);
    } finally {
      await gw.stop();
    }
  });

  test('fail closed: requests are refused with a clear 503 while Redis is down', async () => {
    if (!redis.proc) await redis.start();
    const rl = {
      backend: 'redis',
      requests: [{ scope: 'key', limit: 100, window: '1h' }],
    };
    const gw = await startGateway(limitsConfig(redis, rl));
    try {
      assert.equal((await chat(gw, BODY)).status, 200);
      await redis.stop();
      const r = await chat(gw, BODY);
      assert.equal(r.status, 503);
      assert.equal(r.json.error.code, 'rate_limiter_unavailable');
      assert.match(r.json.error.message, /cannot reach Redis/);
      assert.ok(Number(r.headers.get('retry-after')) >= 1);
      const i = await infra(gw);
      assert.equal(i.rate_limiter.active, 'refusing');
      assert.equal(i.rate_limiter.on_redis_down, 'closed');
      assert.ok(i.rate_limiter.counts.refused_redis_down >= 1);
      // Every limited request would be refused: the instance says it is not ready.
      const ready = await rawRequest({ port: gw.port, path: '/ready' });
      assert.equal(ready.status, 503);
      assert.deepEqual(JSON.parse(ready.body), { status: 'not_ready', checks: { draining: false, rate_limiter: 'refusing' } });
      const line = await gw.logFor(r.headers.get('x-request-id'));
      assert.equal(line.status, 503);
      assert.equal(line.reason, 'rate_limiter_unavailable');
      await redis.start();
      await waitFor(async () => (await chat(gw, BODY)).status === 200, {
        timeout: 5000,
        interval: 100,
        what: 'requests to pass again once Redis is back',
      });
      assert.equal((await rawRequest({ port: gw.port, path: '/ready' })).status, 200);
    } finally {
      await gw.stop();
    }
  });

  test('a limit can fail closed while the others fail open', async () => {
    if (!redis.proc) await redis.start();
    const rl = {
      backend: 'auto',
      requests: [
        { scope: 'key', limit: 100, window: '1h' },
        { scope: 'key', key: 'other-app', limit: 100, window: '1h', on_redis_down: 'closed' },
      ],
    };
    const gw = await startGateway(limitsConfig(redis, rl));
    try {
      await redis.stop();
      assert.equal((await chat(gw, BODY)).status, 200);
      const other = await chat(gw, BODY, { key: 'sk-other-1111222233334444' });
      assert.equal(other.status, 503);
      assert.match(other.json.error.message, /requests\[1\]/);
      // Not every limited request is refused: the instance stays ready, and says why.
      assert.equal((await rawRequest({ port: gw.port, path: '/ready' })).status, 200);
      const i = await infra(gw);
      assert.equal(i.rate_limiter.active, 'memory');
      assert.match(i.rate_limiter.reason, /1 of 2 limits refuse meanwhile/);
    } finally {
      await gw.stop();
      await redis.start();
    }
  });

  test('limits that fail open keep the instance ready though the default is closed', async () => {
    if (!redis.proc) await redis.start();
    const rl = {
      backend: 'redis', // its default: on_redis_down closed
      requests: [{ scope: 'key', limit: 100, window: '1h', on_redis_down: 'open' }],
    };
    const gw = await startGateway(limitsConfig(redis, rl));
    try {
      assert.equal((await chat(gw, BODY)).status, 200);
      await redis.stop();
      assert.equal((await chat(gw, BODY)).status, 200);
      const i = await infra(gw);
      assert.equal(i.rate_limiter.on_redis_down, 'closed');
      assert.equal(i.rate_limiter.active, 'memory');
      const ready = await rawRequest({ port: gw.port, path: '/ready' });
      assert.equal(ready.status, 200, ready.body);
    } finally {
      await gw.stop();
      await redis.start();
    }
  });
});

describe('headers', () => {
  let redis;
  let gw;
  before(async () => {
    redis = await startRedis();
    gw = await startGateway(
      limitsConfig(redis, {
        backend: 'redis',
        requests: [
          // An hour's window: a run never straddles two windows in practice.
          { scope: 'key', limit: 3, window: '1h' },
          { scope: 'tenant', limit: 100, window: '1h' },
        ],
        tokens: [{ scope: 'key', limit: 100000, per: 'minute' }],
      }),
    );
  });
  after(async () => {
    await gw.stop();
    await redis.stop();
  });

  test('x-ratelimit-* on success and on 429, Retry-After within the window', async () => {
    const r1 = await chat(gw, BODY);
    assert.equal(r1.status, 200);
    const h = r1.headers;
    // The tightest request limit (3 per minute) leads the generic headers.
    assert.equal(h.get('x-ratelimit-limit'), '3');
    assert.equal(h.get('x-ratelimit-remaining'), '2');
    const reset = Number(h.get('x-ratelimit-reset'));
    assert.ok(reset >= 1 && reset <= 3600, `reset ${reset}`);
    assert.equal(h.get('x-ratelimit-limit-requests'), '3');
    assert.equal(h.get('x-ratelimit-remaining-requests'), '2');
    // OpenAI's format: 1h2m3s, 4m5s, 6s or 789ms.
    assert.match(h.get('x-ratelimit-reset-requests'), /^(\d+h)?(\d+m)?\d+s$|^\d+ms$/);
    assert.equal(h.get('x-ratelimit-limit-tokens'), '100000');
    const remainingTokens = Number(h.get('x-ratelimit-remaining-tokens'));
    assert.ok(remainingTokens < 100000 && remainingTokens > 90000, `remaining tokens ${remainingTokens}`);
    assert.match(h.get('x-ratelimit-reset-tokens'), /^(1m0s|\d+s|\d+ms)$/);

    assert.equal((await chat(gw, BODY)).headers.get('x-ratelimit-remaining'), '1');
    assert.equal((await chat(gw, BODY)).headers.get('x-ratelimit-remaining'), '0');
    const denied = await chat(gw, BODY);
    assert.equal(denied.status, 429);
    assert.equal(denied.json.error.type, 'rate_limit_error');
    assert.equal(denied.json.error.code, 'rate_limit_exceeded');
    assert.match(denied.json.error.message, /requests\[0\].*3 requests per 1h0m0s/);
    assert.equal(denied.headers.get('x-ratelimit-remaining'), '0');
    const retry = Number(denied.headers.get('retry-after'));
    const resetNow = Number(denied.headers.get('x-ratelimit-reset'));
    // Retry-After is when the refusing window ends: whole seconds, at least 1.
    assert.ok(retry >= 1 && retry <= 3600, `retry-after ${retry}`);
    assert.ok(Math.abs(retry - resetNow) <= 1, `retry-after ${retry} vs reset ${resetNow}`);
    const line = await gw.logFor(denied.headers.get('x-request-id'));
    assert.equal(line.status, 429);
    assert.equal(line.reason, 'rate_limit_exceeded');
    assert.equal(line.limiter, 'redis');
  });

  test('token bucket: Retry-After is the time to refill one request', async () => {
    await redis.raw('FLUSHALL');
    const g2 = await startGateway(
      limitsConfig(redis, {
        backend: 'redis',
        // 2 per 10 s: one every 5 s.
        requests: [{ scope: 'key', algorithm: 'token_bucket', limit: 2, window: '10s' }],
      }),
    );
    try {
      assert.deepEqual(await statuses(g2, 3), [200, 200, 429]);
      const denied = await chat(g2, BODY);
      assert.equal(denied.status, 429);
      const retry = Number(denied.headers.get('retry-after'));
      assert.ok(retry >= 4 && retry <= 5, `retry-after ${retry}`);
    } finally {
      await g2.stop();
    }
  });

  test('a key without any limit that applies gets no rate-limit headers', async () => {
    const g3 = await startGateway(
      limitsConfig(redis, {
        backend: 'redis',
        requests: [{ scope: 'key', key: 'other-app', limit: 1, window: '1m' }],
      }),
    );
    try {
      const r = await chat(g3, BODY);
      assert.equal(r.status, 200);
      assert.equal(r.headers.get('x-ratelimit-limit'), null);
      assert.equal(r.headers.get('retry-after'), null);
    } finally {
      await g3.stop();
    }
  });
});

describe('sliding_log: exact, in Redis and in memory', () => {
  let redis;
  before(async () => {
    redis = await startRedis();
  });
  after(async () => {
    await redis.stop();
  });

  for (const backend of ['redis', 'memory']) {
    test(`${backend}: the limit-th request fills the window; Retry-After is when the oldest leaves`, async () => {
      const rl = { backend, requests: [{ scope: 'key', tier: 'free', algorithm: 'sliding_log', limit: 3, window: '2s' }] };
      const gw = await startGateway(limitsConfig(redis, rl));
      try {
        for (let i = 0; i < 3; ++i) assert.equal((await chat(gw, BODY)).status, 200);
        const refused = await chat(gw, BODY);
        assert.equal(refused.status, 429, refused.text);
        const retry = Number(refused.headers.get('retry-after'));
        assert.ok(retry >= 1 && retry <= 2, `Retry-After ${retry}`);
        assert.match(refused.json.error.message, /3 requests per 2s/);
        await delay(retry * 1000 + 100);
        assert.equal((await chat(gw, BODY)).status, 200, 'passes once the oldest entries left');
      } finally {
        await gw.stop();
      }
    });
  }

  test('a limit too large for a log, or a lease, is refused with its line', async () => {
    const dir = tempDir();
    const file = path.join(dir, 'c.yaml');
    fs.writeFileSync(
      file,
      toYaml({
        ...limitsConfig(redis, { backend: 'memory', requests: [
          { scope: 'key', algorithm: 'sliding_log', limit: 200000, window: '1m' },
          { scope: 'key', algorithm: 'sliding_log', limit: 10, window: '1m', lease: 5 },
        ] }),
      }),
    );
    const r = spawnSync(BIN, ['check-config', file], { encoding: 'utf8' });
    assert.notEqual(r.status, 0);
    assert.match(r.stderr + r.stdout, /rate_limits\.requests\[0\]\.limit.*sliding_log keeps one entry per request of the window: limit at most 100000/);
    assert.match(r.stderr + r.stdout, /rate_limits\.requests\[1\]\.lease.*never leased/);
  });
});
