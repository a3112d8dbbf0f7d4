// Redis Cluster (docs/redis.md, "Redis Cluster"): three masters with a replica each, made by
// `redis-cli --cluster create` on loopback. The gateway is given two nodes
// (redis-cluster://...), learns the slot map, and counts each limit on the node serving its
// counter's slot: one request's limits (a key's, a tier's, a model's: three hash tags) are
// checked there at once, all or nothing — what one slot took is voided when another
// refuses. When the master of a tenant's slot is killed under load the gateway keeps
// serving (on_redis_down: open), follows the promoted replica, and counts exactly again —
// never more than once per request.
import assert from 'node:assert/strict';
import { setTimeout as delay } from 'node:timers/promises';
import { after, before, describe, test } from 'node:test';

import { KEY, USER, request, startGateway, startRedisCluster, startSim, underLoad, waitFor } from './lib.mjs';

const EXACT = 'sk-exact-0000000000000000';
const GOLD = 'sk-gold-00000000000000000';
const QUOTA = 'sk-quota-0000000000000000';
const LATE = 'sk-late-00000000000000000';

// Every key of the masters now matching `pattern`, with its node.
async function keysOn(cluster, pattern) {
  const out = [];
  for (const node of await cluster.masters()) {
    for (const k of (await node.raw('KEYS', pattern)).split('\n').filter(Boolean)) out.push({ node, key: k });
  }
  return out;
}

// What the fixed-window counters matching `pattern` hold, summed over the masters.
async function counted(cluster, pattern) {
  let n = 0;
  for (const { node, key } of await keysOn(cluster, pattern)) {
    if ((await node.raw('TYPE', key)) === 'string') n += Number(await node.raw('GET', key)) || 0;
  }
  return n;
}

// The quota counters' `used` matching `pattern`, summed over the masters.
async function used(cluster, pattern) {
  let n = 0;
  for (const { node, key } of await keysOn(cluster, pattern)) {
    if ((await node.raw('TYPE', key)) === 'hash') n += Number(await node.raw('HGET', key, 'used')) || 0;
  }
  return n;
}

const ADMIN = 'sk-admin-0000000000000000';

describe('Redis Cluster', () => {
  let sim;
  let slow;
  let cluster;
  let gw;
  let fleet = [];
  before(async () => {
    [sim, slow, cluster] = await Promise.all([
      startSim({ ttft: '5ms', 'inter-token': '1ms' }),
      startSim({ 'inter-token': '100ms' }),
      startRedisCluster({ masters: 3, replicas: 1, nodeTimeout: 1000 }),
    ]);
    // Two more instances sharing the cluster's live registry.
    fleet = await Promise.all(
      ['gw-a', 'gw-b'].map((instance) =>
        startGateway({
          instance,
          keys: [
            { name: 'admin', key: ADMIN, tenant: 'ops', admin: true },
            { name: 'app', key: KEY, tenant: 'acme' },
          ],
          models: [{ alias: 'slow', backends: [{ provider: 'openai', base_url: `${slow.url}/v1`, name: 'a' }] }],
          redis: { url: cluster.url, retry_interval: '200ms' },
          admin: { listen: '127.0.0.1:0', live_registry: 'redis', live_interval: '200ms' },
        }),
      ),
    );
    gw = await startGateway({
      keys: [
        { name: 'app', key: KEY, tenant: 'acme' },
        { name: 'exact', key: EXACT, tenant: 'beta' },
        { name: 'gold', key: GOLD, tenant: 'gamma', tier: 'gold' },
        { name: 'quota', key: QUOTA, tenant: 'delta' },
        { name: 'late', key: LATE, tenant: 'acme' },
      ],
      models: [{ alias: 'm', backends: [{ provider: 'openai', base_url: `${sim.url}/v1`, name: 'a' }] }],
      redis: { url: cluster.url, timeout: '200ms', connect_timeout: '300ms', retry_interval: '200ms' },
      rate_limits: {
        backend: 'redis',
        on_redis_down: 'open',
        // No leases: every request is counted in Redis when Redis is up.
        requests: [
          { scope: 'key', key: 'app', limit: 1000000, window: '1h', algorithm: 'fixed_window', lease: 0 },
          { scope: 'model', limit: 1000000, window: '1h', algorithm: 'fixed_window', lease: 0 },
          { scope: 'key', key: 'exact', limit: 5, window: '1h', algorithm: 'fixed_window', lease: 0 },
          { scope: 'key', key: 'late', limit: 5, window: '1h', algorithm: 'fixed_window', lease: 0 },
          { scope: 'key', key: 'gold', limit: 100, window: '1h', algorithm: 'fixed_window', lease: 0 },
          { scope: 'tier', tier: 'gold', limit: 3, window: '1h', algorithm: 'fixed_window', lease: 0 },
        ],
        tokens: [
          { scope: 'tenant', tenant: 'delta', limit: 1000000000, per: 'day', lease: 0 },
          { scope: 'model', limit: 1000000000, per: 'day', lease: 0 },
        ],
      },
    });
  });
  after(async () => {
    await Promise.all([gw?.stop(), ...fleet.map((f) => f.stop())]);
    await cluster?.stop();
    await Promise.all([sim?.stop(), slow?.stop()]);
  });

  const chat = (key = KEY) =>
    request(`${gw.url}/v1/chat/completions`, { method: 'POST', key, body: { model: 'm', messages: USER, max_tokens: 2 } });

  test('each limit is counted on the node serving its slot', async () => {
    await waitFor(async () => (await gw.infra()).rate_limiter.active === 'redis', { timeout: 10000, what: 'the slot map read' });
    for (let i = 0; i < 5; i++) assert.equal((await chat()).status, 200);
    const keyCounters = await keysOn(cluster, 'sluice:{t:acme}:k:app:*');
    const modelCounters = await keysOn(cluster, 'sluice:{m:m}:r1*');
    assert.equal(keyCounters.length, 1, JSON.stringify(keyCounters.map((k) => k.key)));
    assert.equal(modelCounters.length, 1);
    // Each on the master its slot names (the two tags fall on different slots).
    assert.equal(keyCounters[0].node.port, (await cluster.masterOf('t:acme')).port);
    assert.equal(modelCounters[0].node.port, (await cluster.masterOf('m:m')).port);
    assert.equal(await counted(cluster, 'sluice:{t:acme}:k:app:*'), 5);
    assert.equal(await counted(cluster, 'sluice:{m:m}:r1*'), 5);
    const infra = await gw.infra();
    assert.match(infra.rate_limiter.redis.url, /^redis-cluster:\/\/127.0.0.1:/);
  });

  test("the fleet's live registry: a stream on one instance listed and cancelled from another", async () => {
    const [a, b] = fleet;
    const live = async () => (await request(`${a.url}/admin/requests`, { key: ADMIN })).json;
    const res = fetch(`${b.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', 'x-request-id': 'on-b' },
      body: JSON.stringify({ model: 'slow', messages: USER, max_tokens: 200, stream: true }),
    });
    // (The instances' set, each snapshot and each cancel list are keys of different slots.)
    const seen = await waitFor(async () => (await live()).requests?.find((x) => x.request_id === 'on-b'), {
      timeout: 10000,
      what: "gw-b's stream listed on gw-a",
    });
    assert.equal(seen.instance, 'gw-b');
    const c = await request(`${a.url}/admin/requests/${seen.id}/cancel`, { method: 'POST', key: ADMIN });
    assert.equal(c.status, 202, c.text);
    const body = await (await res).text();
    assert.match(body, /"code":"cancelled"/, body.slice(-300));
    await waitFor(async () => !(await live()).requests.some((x) => x.id === seen.id), { what: 'gone from the listing' });
    const instances = (await live()).instances;
    assert.ok(instances.includes('gw-a') && instances.includes('gw-b'), JSON.stringify(instances));
  });

  test("a refusal by one slot's limit voids what the others took", async () => {
    // gold's key limit (100, tag t:gamma) and its tier's (3, tag tier:gold): the tier
    // refuses the fourth request, which its key's slot had counted; that count is voided.
    const statuses = [];
    for (let i = 0; i < 6; i++) statuses.push((await chat(GOLD)).status);
    assert.deepEqual(statuses, [200, 200, 200, 429, 429, 429]);
    const node = (await cluster.masters())[0];
    assert.notEqual(await node.raw('CLUSTER', 'KEYSLOT', 't:gamma'), await node.raw('CLUSTER', 'KEYSLOT', 'tier:gold'), 'two slots');
    await waitFor(async () => (await counted(cluster, 'sluice:{t:gamma}:k:gold:*')) === 3, {
      timeout: 5000,
      what: "the key's counter back to the 3 requests admitted",
    });
    assert.equal(await counted(cluster, 'sluice:{tier:gold}*'), 3);
  });

  test("token quotas on two slots: each request's usage reaches both", async () => {
    const beforeModel = await used(cluster, 'sluice:{m:m}:q1*');
    let tokens = 0;
    for (let i = 0; i < 6; i++) {
      const r = await chat(QUOTA);
      assert.equal(r.status, 200);
      tokens += r.json.usage.total_tokens;
    }
    // Settlements leave in batches split by slot.
    await waitFor(async () => (await used(cluster, 'sluice:{t:delta}:t:q0*')) === tokens, { timeout: 5000, what: "the tenant's usage settled" });
    await waitFor(async () => (await used(cluster, 'sluice:{m:m}:q1*')) - beforeModel >= tokens, { timeout: 5000, what: "the model's usage settled" });
    assert.equal((await used(cluster, 'sluice:{m:m}:q1*')) - beforeModel, tokens);
  });

  test('the master of a slot killed under load: every request served, then counted exactly on the promoted replica', async (t) => {
    const victim = await cluster.masterOf('t:acme');
    const before = await counted(cluster, 'sluice:{t:acme}:k:app:*');
    const statuses = [];
    const load = underLoad(chat, statuses);
    let promoted;
    try {
      await delay(300);
      const killed = Date.now();
      victim.proc.child.kill('SIGKILL');
      await victim.proc.exited;
      // Its replica is promoted after the node timeout (1 s).
      await cluster.waitOk({ timeout: 30000 });
      const ok = Date.now();
      promoted = await cluster.masterOf('t:acme');
      assert.notEqual(promoted.port, victim.port);
      // The gateway follows: the counter grows on the new master.
      const atPromotion = await counted(cluster, 'sluice:{t:acme}:k:app:*');
      await waitFor(async () => (await counted(cluster, 'sluice:{t:acme}:k:app:*')) > atPromotion, {
        timeout: 10000,
        interval: 20,
        what: 'counting on the new master',
      });
      // (Reported, never asserted: the machine is shared.)
      t.diagnostic(`cluster ok ${ok - killed} ms after the kill; counting on the new master ${Date.now() - ok} ms later`);
      await waitFor(async () => (await counted(cluster, 'sluice:{t:acme}:k:app:*')) > atPromotion + 10, {
        timeout: 10000,
        interval: 100,
        what: 'counting on the new master',
      });
    } finally {
      await load.stop();
    }
    assert.ok(statuses.length > 50, `${statuses.length} requests under load`);
    assert.deepEqual([...new Set(statuses)], [200], 'served throughout (on_redis_down: open)');
    // Never counted twice: what the new master holds (replicated before the kill, counted
    // after the promotion) is at most what was sent.
    const total = await counted(cluster, 'sluice:{t:acme}:k:app:*');
    assert.ok(total <= before + statuses.length, `${total} counted for ${before + statuses.length} sent`);
    assert.ok(total > before, 'the new master counts');

    // Exact again: a limit of 5 on a key of the same tenant not used before lets exactly
    // 5 through, counted on the new master.
    const exact = [];
    for (let i = 0; i < 8; i++) exact.push((await chat(LATE)).status);
    assert.deepEqual(exact, [200, 200, 200, 200, 200, 429, 429, 429]);
    assert.equal(await counted(cluster, 'sluice:{t:acme}:k:late:*'), 5);
    const onPromoted = (await keysOn(cluster, 'sluice:{t:acme}:k:late:*')).map((k) => k.node.port);
    assert.deepEqual(onPromoted, [promoted.port]);
    const infra = await gw.infra();
    assert.equal(infra.rate_limiter.active, 'redis', JSON.stringify(infra.rate_limiter));
  });

  test('a limit on another slot stayed exact through the failover', async () => {
    const statuses = [];
    for (let i = 0; i < 7; i++) statuses.push((await chat(EXACT)).status);
    assert.deepEqual(statuses, [200, 200, 200, 200, 200, 429, 429]);
  });
});
