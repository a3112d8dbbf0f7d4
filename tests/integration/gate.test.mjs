// The concurrency gate: requests in flight per model and per key, a bounded priority queue
// (vip, premium, standard), queue full (429), wait expired (503), demotion, and clients
// that leave while queued.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { KEY, chat, metricValue, rawRequest, reloadWith, startGateway, USER, waitFor, withGateway } from './lib.mjs';

const VIP_KEY = 'sk-vip-aaaabbbbccccdddd';
const KEY_B = 'sk-bbb-aaaabbbbccccdddd';

function config({ ttft = '300ms', queueSize = 8, maxWait = {}, perKey } = {}) {
  return {
    keys: [
      { name: 'std-app', key: KEY, tenant: 'acme', tier: 'standard' },
      { name: 'vip-app', key: VIP_KEY, tenant: 'acme', tier: 'enterprise' },
      { name: 'b-app', key: KEY_B, tenant: 'beta', tier: 'standard', ...(perKey ? { max_in_flight: perKey } : {}) },
    ],
    models: [
      { alias: 'demo', provider: 'simulated', max_in_flight: 1, sim: { ttft, inter_token: '1ms', jitter: 0 } },
      { alias: 'wide', provider: 'simulated', sim: { ttft, inter_token: '1ms', jitter: 0 } },
    ],
    concurrency: {
      queue_size: queueSize,
      max_wait: { vip: '5s', premium: '5s', standard: '10s', ...maxWait },
      tier_priority: { enterprise: 'vip' },
    },
  };
}

const BODY = { model: 'demo', messages: USER, max_tokens: 2 };

async function infra(gw) {
  return JSON.parse((await rawRequest({ port: gw.adminPort, path: '/infra' })).body).concurrency_gate;
}

async function queued(gw) {
  const q = (await infra(gw)).queued;
  return q.vip + q.premium + q.standard;
}

// Sends a request and records when it finished; waits until the gate shows it (in flight
// or queued) so the next one arrives after it. Resolves to {res}: the response promise
// (wrapped, or awaiting send() would wait for the response itself).
function tracker(gw) {
  const done = [];
  const send = async (name, key, { headers = {}, signal, body = BODY } = {}) => {
    const before = (await infra(gw)).in_flight + (await queued(gw));
    const p = chat(gw, body, { key, headers, signal }).then(
      (r) => {
        done.push(name);
        return r;
      },
      (e) => {
        done.push(name);
        throw e;
      },
    );
    await waitFor(async () => (await infra(gw)).in_flight + (await queued(gw)) > before, {
      timeout: 5000,
      interval: 10,
      what: `request ${name} to reach the gate`,
    });
    return { res: p };
  };
  return { done, send };
}

describe('priority queue', () => {
  let gw;
  before(async () => {
    gw = await startGateway(config());
  });
  after(async () => {
    await gw.stop();
  });

  test('with the gate saturated, queued vip requests start before standard ones; FIFO within a class', async () => {
    const t = tracker(gw);
    const all = [];
    all.push((await t.send('blocker', KEY)).res);
    all.push((await t.send('s1', KEY)).res);
    all.push((await t.send('s2', KEY)).res);
    all.push((await t.send('v1', VIP_KEY)).res);
    all.push((await t.send('v2', VIP_KEY)).res);
    assert.deepEqual((await infra(gw)).queued, { vip: 2, premium: 0, standard: 2 });
    const results = await Promise.all(all);
    assert.deepEqual(
      results.map((r) => r.status),
      [200, 200, 200, 200, 200],
    );
    assert.deepEqual(t.done, ['blocker', 'v1', 'v2', 's1', 's2']);
    const v1 = await gw.logFor(results[3].headers.get('x-request-id'));
    assert.equal(v1.priority, 'vip');
    assert.ok(v1.queue_ms > 0);
    const s2 = await gw.logFor(results[2].headers.get('x-request-id'));
    assert.equal(s2.priority, 'standard');
    assert.ok(s2.queue_ms > v1.queue_ms);
  });

  test('X-Priority can lower a request, never raise it above its key', async () => {
    const t = tracker(gw);
    const all = [];
    all.push((await t.send('blocker', KEY)).res);
    all.push((await t.send('s-asks-vip', KEY, { headers: { 'x-priority': 'vip' } })).res);
    all.push((await t.send('v-asks-standard', VIP_KEY, { headers: { 'x-priority': 'standard' } })).res);
    all.push((await t.send('v', VIP_KEY)).res);
    assert.deepEqual((await infra(gw)).queued, { vip: 1, premium: 0, standard: 2 });
    await Promise.all(all);
    assert.deepEqual(t.done, ['blocker', 'v', 's-asks-vip', 'v-asks-standard']);
  });

  test('a client that leaves while queued is removed at once', async () => {
    const t = tracker(gw);
    const blocker = (await t.send('blocker', KEY)).res;
    const ac = new AbortController();
    const leaving = (await t.send('leaving', KEY, { signal: ac.signal })).res;
    assert.equal(await queued(gw), 1);
    ac.abort();
    await assert.rejects(leaving);
    await waitFor(async () => (await queued(gw)) === 0, { timeout: 2000, interval: 10, what: 'the queue to empty' });
    // Still waiting for the blocker: the queue emptied because the client left.
    assert.equal((await infra(gw)).in_flight, 1);
    assert.equal((await blocker).status, 200);
    await waitFor(() => gw.logLines().some((l) => l.status === 499 && l.error === 'client left while queued'), {
      what: 'the 499 line of the request that left',
    });
    assert.ok((await infra(gw)).rejected.client_closed >= 1);
  });
});

describe('urgency', () => {
  const ALLOWED = 'sk-urg-aaaabbbbccccdddd';
  let gw;
  before(async () => {
    const c = config();
    c.keys.push({ name: 'may-urge', key: ALLOWED, tenant: 'acme', priority: 'standard', max_priority: 'premium' });
    c.concurrency.urgent_keywords = ['紧急', '立刻', 'urgent'];
    gw = await startGateway(c);
  });
  after(async () => {
    await gw.stop();
  });

  const say = (text) => ({ ...BODY, messages: [{ role: 'user', content: text }] });

  test('a keyword raises a request within its key allowance, and it starts before the standard queue', async () => {
    const t = tracker(gw);
    const all = [];
    all.push((await t.send('blocker', KEY)).res);
    all.push((await t.send('s1', ALLOWED, { body: say('please summarise this') })).res);
    all.push((await t.send('no-allowance', KEY, { body: say('URGENT: the server is down') })).res);
    all.push((await t.send('urgent', ALLOWED, { body: say('紧急! 服务器宕机了') })).res);
    assert.deepEqual((await infra(gw)).queued, { vip: 0, premium: 1, standard: 2 });
    const results = await Promise.all(all);
    assert.deepEqual(t.done, ['blocker', 'urgent', 's1', 'no-allowance']);
    const line = await gw.logFor(results[3].headers.get('x-request-id'));
    assert.equal(line.priority, 'premium');
    assert.equal((await gw.logFor(results[2].headers.get('x-request-id'))).priority, 'standard', 'a key without the allowance stays');
  });

  test('X-Priority may ask up to the allowance, not beyond', async () => {
    const r = await chat(gw, say('hello'), { key: ALLOWED, headers: { 'x-priority': 'vip' } });
    assert.equal(r.status, 200);
    assert.equal((await gw.logFor(r.headers.get('x-request-id'))).priority, 'premium');
  });
});

describe('queue limits', () => {
  test('queue full: 429 queue_full with Retry-After', async () => {
    await withGateway(config({ queueSize: 2 }), async (gw) => {
      const t = tracker(gw);
      const all = [(await t.send('blocker', KEY)).res, (await t.send('q1', KEY)).res, (await t.send('q2', KEY)).res];
      const r = await chat(gw, BODY);
      assert.equal(r.status, 429);
      assert.equal(r.json.error.code, 'queue_full');
      assert.equal(r.headers.get('retry-after'), '1');
      assert.deepEqual(
        (await Promise.all(all)).map((x) => x.status),
        [200, 200, 200],
      );
      const metrics = await gw.metrics();
      assert.equal(metricValue(metrics, 'sluice_gate_rejected_total', { reason: 'queue_full' }), 1);
    });
  });

  test('waited past standard max_wait: 503 queue_timeout with Retry-After', async () => {
    await withGateway(config({ ttft: '2s', maxWait: { standard: '300ms' } }), async (gw) => {
      const t = tracker(gw);
      const blocker = (await t.send('blocker', KEY)).res;
      const r = await chat(gw, BODY);
      assert.equal(r.status, 503);
      assert.equal(r.json.error.code, 'queue_timeout');
      assert.ok(Number(r.headers.get('retry-after')) >= 1);
      const line = await gw.logFor(r.headers.get('x-request-id'));
      assert.equal(line.reason, 'queue_timeout');
      assert.ok(line.queue_ms >= 300, `queue_ms ${line.queue_ms}`);
      assert.equal((await blocker).status, 200);
    });
  });

  test('a vip request that waited its max is demoted to standard, not dropped', async () => {
    await withGateway(config({ ttft: '1s', maxWait: { vip: '100ms' } }), async (gw) => {
      const t = tracker(gw);
      const all = [(await t.send('blocker', KEY)).res, (await t.send('s1', KEY)).res, (await t.send('v1', VIP_KEY)).res];
      const results = await Promise.all(all);
      assert.deepEqual(
        results.map((r) => r.status),
        [200, 200, 200],
      );
      // Demoted into standard at its arrival position: behind s1, which came first.
      assert.deepEqual(t.done, ['blocker', 's1', 'v1']);
      const v1 = await gw.logFor(results[2].headers.get('x-request-id'));
      assert.equal(v1.priority, 'standard');
      const metrics = await gw.metrics();
      assert.equal(metricValue(metrics, 'sluice_gate_demoted_total', { class: 'vip' }), 1);
    });
  });

  test('per-key limit: a busy key waits while another key goes through', async () => {
    await withGateway(config({ perKey: 1 }), async (gw) => {
      const body = { model: 'wide', messages: USER, max_tokens: 2 };
      const t = tracker(gw);
      const b1 = (await t.send('b1', KEY_B, { body })).res;
      const b2 = (await t.send('b2', KEY_B, { body })).res;
      assert.equal(await queued(gw), 1);
      // Needs no slot (no limit on its key or on this model): straight through.
      const other = chat(gw, body).then((r) => {
        t.done.push('std');
        return r;
      });
      const [r1, r2, r3] = await Promise.all([b1, b2, other]);
      assert.deepEqual([r1.status, r2.status, r3.status], [200, 200, 200]);
      assert.equal(t.done.at(-1), 'b2');
      const l2 = await gw.logFor(r2.headers.get('x-request-id'));
      assert.ok(l2.queue_ms > 0);
      const l3 = await gw.logFor(r3.headers.get('x-request-id'));
      assert.equal(l3.queue_ms, undefined);
    });
  });
});

describe('reload', () => {
  async function reload(gw, cfg) {
    const answer = await reloadWith(gw, cfg);
    assert.equal(answer.status, 200, JSON.stringify(answer));
    return answer;
  }

  test('the gate follows the file: a raised limit lets a queued request in at once; queue size and a new alias apply', async () => {
    await withGateway(config({ ttft: '2s' }), async (gw) => {
      const t = tracker(gw);
      const first = (await t.send('first', KEY)).res;
      const second = (await t.send('second', KEY)).res;
      assert.equal(await queued(gw), 1, 'demo: max_in_flight 1');
      assert.equal((await infra(gw)).queue_size, 8);

      const next = config({ ttft: '2s', queueSize: 3 });
      next.models[0].max_in_flight = 2;
      next.models.push({ alias: 'extra', provider: 'simulated', max_in_flight: 1, sim: { ttft: '2s', inter_token: '1ms', jitter: 0 } });
      const answer = await reload(gw, next);
      assert.equal(answer.reloaded, true);
      assert.match(answer.message, /concurrency gate/);
      // Let in at once, while the first still holds its slot.
      await waitFor(async () => (await queued(gw)) === 0 && (await infra(gw)).in_flight === 2, { what: 'the queued request let in' });
      assert.equal((await infra(gw)).queue_size, 3);
      assert.ok(!t.done.includes('first'), 'the first request was still running');

      // The new alias has its slot: a second request to it waits.
      const body = { model: 'extra', messages: USER, max_tokens: 2 };
      const e1 = (await t.send('e1', KEY, { body })).res;
      const e2 = (await t.send('e2', KEY_B, { body })).res;
      assert.equal(await queued(gw), 1, 'extra: max_in_flight 1');
      const results = await Promise.all([first, second, e1, e2]);
      assert.deepEqual(results.map((r) => r.status), [200, 200, 200, 200]);
      assert.equal(t.done.at(-1), 'e2');
      assert.doesNotMatch(answer.message, /after a restart:/);

      // Rate limits follow a reload too; what a reload does not apply is said, not ignored.
      const limited = { ...next, rate_limits: { requests: [{ scope: 'key', limit: 1, window: '1h' }] } };
      const now = await reload(gw, limited);
      assert.doesNotMatch(now.message, /after a restart:/);
      const statuses = [];
      for (let i = 0; i < 2; i++) statuses.push((await chat(gw, { model: 'wide', messages: USER, max_tokens: 2 })).status);
      assert.deepEqual(statuses, [200, 429]);
      const later = await reload(gw, { ...limited, timeouts: { total: '5m' }, rate_limits: { ...limited.rate_limits, reservation_ttl: '10m' } });
      assert.equal(later.reloaded, true);
      assert.match(later.message, /changed in the file but in force only after a restart: timeouts$/);
    });
  });
});
