// Redis behind Sentinel (docs/redis.md, "Sentinel"): a master, a replica and three real
// sentinels (redis-server --sentinel) on loopback. The gateway is given only the sentinels
// (redis-sentinel://...): it asks them for the master, counts its rate limits there, and
// when the master is killed under load it keeps serving (on_redis_down: open), follows
// the sentinels to the promoted replica, and counts exactly again there — never more
// than once per request.
import assert from 'node:assert/strict';
import { setTimeout as delay } from 'node:timers/promises';
import { after, before, describe, test } from 'node:test';

import { KEY, USER, request, startGateway, startRedis, startSim, underLoad, waitFor } from './lib.mjs';

const MASTER = 'sluice-m';
const EXACT = 'sk-exact-0000000000000000';

async function replicationUp(replica) {
  await waitFor(async () => /master_link_status:up/.test(await replica.raw('INFO', 'replication')), {
    timeout: 10000,
    what: 'the replica in sync with its master',
  });
}

// The port the sentinels name as the master (all three must agree).
async function namedMaster(sentinels) {
  const ports = await Promise.all(sentinels.map(async (s) => (await s.raw('SENTINEL', 'get-master-addr-by-name', MASTER)).split('\n')[1]));
  return ports.every((p) => p === ports[0]) ? Number(ports[0]) : 0;
}

// Requests counted in Redis for key `name` (the fixed window's counters, every window).
async function counted(redis, name) {
  const keys = (await redis.raw('KEYS', `sluice:*k:${name}:*`)).split('\n').filter(Boolean);
  let n = 0;
  for (const k of keys) {
    if ((await redis.raw('TYPE', k)) === 'string') n += Number(await redis.raw('GET', k)) || 0;
  }
  return n;
}

describe('Redis Sentinel', () => {
  let sim;
  let master;
  let replica;
  let third;
  let sentinels = [];
  let gw;
  before(async () => {
    sim = await startSim({ ttft: '5ms', 'inter-token': '1ms' });
    master = await startRedis();
    replica = await startRedis({ args: ['--replicaof', '127.0.0.1', master.port] });
    await replicationUp(replica);
    const conf = [
      `sentinel monitor ${MASTER} 127.0.0.1 ${master.port} 2`,
      `sentinel down-after-milliseconds ${MASTER} 500`,
      `sentinel failover-timeout ${MASTER} 3000`,
    ];
    sentinels = await Promise.all([0, 1, 2].map(() => startRedis({ sentinel: conf })));
    // Each sentinel knows the other two (they meet through the master's hello channel).
    await waitFor(async () => (await Promise.all(sentinels.map((s) => s.raw('SENTINEL', 'ckquorum', MASTER)))).every((r) => r.startsWith('OK 3')), {
      timeout: 15000,
      what: 'three sentinels that see each other',
    });
    const hosts = sentinels.map((s) => `127.0.0.1:${s.port}`).join(',');
    gw = await startGateway({
      keys: [
        { name: 'app', key: KEY, tenant: 'acme' },
        { name: 'exact', key: EXACT, tenant: 'acme' },
      ],
      models: [{ alias: 'm', backends: [{ provider: 'openai', base_url: `${sim.url}/v1`, name: 'a' }] }],
      redis: { url: `redis-sentinel://${hosts}/${MASTER}`, timeout: '200ms', connect_timeout: '300ms', retry_interval: '200ms' },
      rate_limits: {
        backend: 'redis',
        on_redis_down: 'open',
        // No leases: every request is counted in Redis when Redis is up.
        requests: [
          { scope: 'key', key: 'app', limit: 1000000, window: '1h', algorithm: 'fixed_window', lease: 0 },
          { scope: 'key', key: 'exact', limit: 5, window: '1h', algorithm: 'fixed_window', lease: 0 },
        ],
      },
    });
  });
  after(async () => {
    await gw?.stop();
    for (const s of sentinels) await s.stop();
    await third?.stop();
    await replica?.stop();
    await master?.stop();
    await sim?.stop();
  });

  const chat = (key = KEY) =>
    request(`${gw.url}/v1/chat/completions`, { method: 'POST', key, body: { model: 'm', messages: USER, max_tokens: 2 } });

  test('the gateway asks the sentinels for the master and counts there', async () => {
    for (let i = 0; i < 5; i++) assert.equal((await chat()).status, 200);
    assert.equal(await counted(master, 'app'), 5);
    const infra = await gw.infra();
    assert.equal(infra.rate_limiter.active, 'redis', JSON.stringify(infra.rate_limiter));
  });

  test('the master killed under load: every request served, then counted exactly on the promoted replica', async () => {
    const before = await counted(master, 'app');
    const statuses = [];
    const load = underLoad(chat, statuses);
    try {
      await delay(300);
      master.proc.child.kill('SIGKILL');
      await master.proc.exited;
      // The sentinels agree the master is down (500 ms) and promote the replica.
      await waitFor(async () => (await namedMaster(sentinels)) === replica.port, { timeout: 20000, interval: 200, what: 'the replica promoted' });
      // The gateway follows: the counters grow on the new master.
      const atPromotion = await counted(replica, 'app');
      await waitFor(async () => (await counted(replica, 'app')) > atPromotion + 10, { timeout: 10000, interval: 100, what: 'counting on the new master' });
    } finally {
      await load.stop();
    }
    assert.ok(statuses.length > 50, `${statuses.length} requests under load`);
    assert.deepEqual([...new Set(statuses)], [200], 'served throughout (on_redis_down: open)');
    // Never counted twice: what the new master holds (replicated before the kill, counted
    // after the promotion) is at most what was sent; requests during the outage were
    // counted per instance.
    const total = await counted(replica, 'app');
    assert.ok(total <= before + statuses.length, `${total} counted for ${before + statuses.length} sent`);
    assert.ok(total > before, 'the new master counts');

    // Exact again: a limit of 5 on a key not used before lets exactly 5 through, counted on
    // the new master.
    const exact = [];
    for (let i = 0; i < 8; i++) exact.push((await chat(EXACT)).status);
    assert.deepEqual(exact, [200, 200, 200, 200, 200, 429, 429, 429]);
    const infra = await gw.infra();
    assert.equal(infra.rate_limiter.active, 'redis', JSON.stringify(infra.rate_limiter));
  });

  test('a switch by the operator (SENTINEL FAILOVER): the old master, alive and demoted, is left for the new one', async () => {
    third = await startRedis({ args: ['--replicaof', '127.0.0.1', replica.port] });
    await replicationUp(third);
    const statuses = [];
    const load = underLoad(chat, statuses);
    try {
      // Refused (NOGOODSLAVE) until the sentinels have read the new replica's state.
      await waitFor(async () => /OK/.test(await sentinels[0].raw('SENTINEL', 'failover', MASTER)), {
        timeout: 30000,
        interval: 500,
        what: 'a failover the sentinels accept',
      });
      await waitFor(async () => (await namedMaster(sentinels)) === third.port, { timeout: 20000, interval: 200, what: 'the third server promoted' });
      await waitFor(async () => /role:slave/.test(await replica.raw('INFO', 'replication')), { timeout: 20000, interval: 200, what: 'the old master demoted' });
      const atSwitch = await counted(third, 'app');
      await waitFor(async () => (await counted(third, 'app')) > atSwitch + 10, { timeout: 10000, interval: 100, what: 'counting on the new master' });
    } finally {
      await load.stop();
    }
    assert.deepEqual([...new Set(statuses)], [200]);
    const infra = await gw.infra();
    assert.equal(infra.rate_limiter.active, 'redis', JSON.stringify(infra.rate_limiter));
  });
});
