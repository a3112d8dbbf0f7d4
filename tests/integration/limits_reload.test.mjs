// Rate limits reloaded (docs/limits.md, "Reload"): SIGHUP and POST /admin/reload replace
// the limits without a restart and without dropping a request. A named limit keeps its
// count when the list around it changes; limits added to a gateway that had none count
// (in Redis, when that is the backend); removed ones stop counting; a reservation made
// before the reload is settled after it; a broken file changes nothing.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { KEY, USER, chat, reloadWith, startGateway, startRedis, underLoad, waitFor } from './lib.mjs';

const OTHER = 'sk-other-0000000000000000';
const body = { model: 'demo', messages: USER, max_tokens: 2 };
const keys = [
  { name: 'app', key: KEY, tenant: 'acme' },
  { name: 'other', key: OTHER, tenant: 'beta' },
];
const models = [{ alias: 'demo', provider: 'simulated', sim: { ttft: '2ms', inter_token: '1ms', jitter: 0 } }];

async function statuses(gw, n, key = KEY) {
  const out = [];
  for (let i = 0; i < n; i++) out.push((await chat(gw, body, { key })).status);
  return out;
}

describe('rate limits reloaded, in memory', () => {
  let gw;
  const base = { keys, models, rate_limits: { backend: 'memory', requests: [{ name: 'per-key', scope: 'key', key: 'app', limit: 3, window: '1h' }] } };
  before(async () => {
    gw = await startGateway(base);
  });
  after(async () => {
    await gw?.stop();
  });

  test('a named limit keeps its count when it is raised and another is put before it', async () => {
    assert.deepEqual(await statuses(gw, 2), [200, 200]);
    const r = await reloadWith(gw, {
      ...base,
      rate_limits: {
        backend: 'memory',
        requests: [
          { scope: 'key', key: 'other', limit: 1, window: '1h' },
          { name: 'per-key', scope: 'key', key: 'app', limit: 5, window: '1h' },
        ],
      },
    });
    assert.equal(r.reloaded, true, r.message);
    assert.doesNotMatch(r.message, /after a restart/);
    // 2 counted before, 3 more up to the new limit of 5.
    assert.deepEqual(await statuses(gw, 4), [200, 200, 200, 429]);
    const refused = await chat(gw, body);
    assert.match(refused.json.error.message, /rate limit per-key reached: 5 requests per/);
    // The new limit counts from the reload.
    assert.deepEqual(await statuses(gw, 2, OTHER), [200, 429]);
  });

  test('removed limits stop counting; a broken file changes nothing', async () => {
    const none = await reloadWith(gw, { ...base, rate_limits: { backend: 'memory' } });
    assert.equal(none.reloaded, true, none.message);
    assert.deepEqual(await statuses(gw, 3), [200, 200, 200]);
    assert.equal((await gw.infra()).rate_limiter.active, 'none');

    const broken = await reloadWith(gw, { ...base, rate_limits: { backend: 'memory', requests: [{ name: 'bad name!', scope: 'key', limit: 1, window: '1h' }] } });
    assert.equal(broken.status, 422);
    assert.match(broken.error.message, /name is 1 to 64 letters/);
    assert.deepEqual(await statuses(gw, 2), [200, 200], 'still no limit');

    const backend = await reloadWith(gw, { ...base, rate_limits: { ...base.rate_limits, backend: 'redis' } });
    assert.equal(backend.status, 422);
    assert.match(backend.error.message, /rate_limits\.backend changes only with a restart \(running memory, the file says redis\)/);
    const ttl = await reloadWith(gw, { ...base, timeouts: { total: '30s' }, rate_limits: { ...base.rate_limits, reservation_ttl: '1m' } });
    assert.equal(ttl.status, 422);
    assert.match(ttl.error.message, /reservation_ttl \(60000 ms\) is below the running timeouts\.total/);

    const twice = await reloadWith(gw, {
      ...base,
      rate_limits: {
        backend: 'memory',
        requests: [
          { name: 'same', scope: 'key', limit: 1, window: '1h' },
          { name: 'same', scope: 'tenant', limit: 1, window: '1h' },
        ],
      },
    });
    assert.equal(twice.status, 422);
    assert.match(twice.error.message, /another limit of this list is named 'same'/);
  });

  test('requests under load across reloads: none dropped', async () => {
    const seen = [];
    const load = underLoad(() => chat(gw, body), seen, { clients: 4, pause: 1 });
    for (let i = 0; i < 6; i++) {
      // Requests answered between every two reloads, however slow the build (a sanitizer
      // build answered 17 in all while six reloads ran back to back).
      const mark = seen.length;
      await waitFor(() => seen.length >= mark + 4, { timeout: 10000, what: 'requests between reloads' });
      const limit = i % 2 ? 1000000 : 2000000;
      const r = await reloadWith(gw, { ...base, rate_limits: { backend: 'memory', requests: [{ name: 'wide', scope: 'tenant', limit, window: '1m' }] } });
      assert.equal(r.reloaded, true, r.message);
    }
    await load.stop();
    assert.ok(seen.length >= 24, `${seen.length} requests`);
    assert.deepEqual([...new Set(seen)], [200]);
  });
});

describe('rate limits reloaded, in Redis', () => {
  let redis;
  let gw;
  const base = (rate_limits) => ({ keys, models, redis: { url: redis.url, retry_interval: '200ms' }, rate_limits: { backend: 'redis', ...rate_limits } });
  before(async () => {
    redis = await startRedis();
    // Started with no limit at all: the reload brings the first ones.
    gw = await startGateway(base({}));
  });
  after(async () => {
    await gw?.stop();
    await redis?.stop();
  });

  test('limits added by a reload count in Redis; a token quota reserved before a reload is settled after it', async () => {
    assert.equal((await gw.infra()).rate_limiter.active, 'none');
    // The workers hold their connections with no limit in force: /infra says them up.
    await waitFor(async () => (await gw.infra()).rate_limiter.redis?.up === true, { what: 'Redis seen up with no limit' });
    const quota = { name: 'daily', scope: 'tenant', limit: 1000000, per: 'day', lease: 0 };
    const r = await reloadWith(gw, base({ requests: [{ name: 'per-key', scope: 'key', key: 'app', limit: 2, window: '1h', lease: 0 }], tokens: [quota] }));
    assert.equal(r.reloaded, true, r.message);
    assert.deepEqual(await statuses(gw, 3), [200, 200, 429]);
    const counters = (await redis.raw('KEYS', 'sluice:{t:acme}:k:app:r-per-key*')).split('\n').filter(Boolean);
    assert.equal(counters.length, 1, 'counted in Redis under its name');
    assert.equal(Number(await redis.raw('GET', counters[0])), 2);
    assert.equal((await gw.infra()).rate_limiter.active, 'redis');

    // A request of the other tenant holds a reservation across a reload that changes the
    // quota's limit (same name: same counter); it is settled after it.
    const slow = chat(gw, { ...body, max_tokens: 60 }, { key: OTHER });
    const again = await reloadWith(gw, base({ tokens: [{ ...quota, limit: 2000000 }] }));
    assert.equal(again.reloaded, true, again.message);
    const done = await slow;
    assert.equal(done.status, 200);
    const used = done.json.usage.total_tokens;
    const ledger = async () => {
      const keys = (await redis.raw('KEYS', 'sluice:{t:beta}:t:q-daily.day:*')).split('\n').filter(Boolean);
      return keys.length === 1 ? { used: Number(await redis.raw('HGET', keys[0], 'used')), reserved: Number(await redis.raw('HGET', keys[0], 'reserved')) } : null;
    };
    await waitFor(async () => (await ledger())?.used === used, { timeout: 5000, what: 'the reservation settled after the reload' });
    assert.equal((await ledger()).reserved, 0);
    // The request limit was removed by that reload: app is no longer limited.
    assert.deepEqual(await statuses(gw, 2), [200, 200]);
  });
});
