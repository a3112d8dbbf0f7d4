// Routing changed at runtime (docs/admin.md, "Backends" and "Canaries"): POST
// /admin/backends/<name>/drain takes a backend out of service — no new request goes
// there, those in flight finish — and /undrain brings it back; POST
// /admin/routes/<alias>/canary sets a canary's weight by hand. Without the key store on
// this instance; with it, on every instance sharing the database within key_store.poll,
// and kept across a reload.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';

import { KEY, chat, request, sse, startGateway, startPostgres, startSim, USER, waitFor } from './lib.mjs';

const ADMIN = 'sk-admin-0000000000000000';
const ask = { model: 'm', messages: USER, max_tokens: 1 };

function config(a, b, extra = {}) {
  const sim = (s, name) => ({ provider: 'openai', base_url: `${s.url}/v1`, name });
  return {
    keys: [
      { name: 'admin', key: ADMIN, tenant: 'ops', admin: true },
      { name: 'app', key: KEY, tenant: 'acme' },
    ],
    models: [
      {
        alias: 'm',
        balance: 'round_robin',
        backends: [
          { provider: 'openai', base_url: `${a.url}/v1`, name: 'a' },
          { provider: 'openai', base_url: `${b.url}/v1`, name: 'b' },
        ],
      },
      // A canary with no share of its own: weights set by hand.
      { alias: 'c', backends: [sim(a, 'ca')], canary: { alias: 'c-next', weight: 0 } },
      { alias: 'c-next', backends: [sim(b, 'cb')] },
    ],
    ...extra,
  };
}

const post = (gw, p, key = ADMIN) => request(`${gw.url}/admin/backends${p}`, { method: 'POST', key });

// Sends n requests; returns how many each simulator answered.
async function spread(gw, sims, n) {
  const before = await Promise.all(sims.map(async (s) => (await s.stats()).requests));
  for (let i = 0; i < n; i++) assert.equal((await chat(gw, ask)).status, 200);
  const after = await Promise.all(sims.map(async (s) => (await s.stats()).requests));
  return after.map((x, i) => x - before[i]);
}

describe('draining a backend on one instance', () => {
  let a, b, gw;
  before(async () => {
    [a, b] = await Promise.all([startSim({ 'inter-token': '20ms' }), startSim()]);
    gw = await startGateway(config(a, b));
  });
  after(async () => {
    await gw?.stop();
    await Promise.all([a?.stop(), b?.stop()]);
  });

  test('a drained backend gets no new request, its stream in flight finishes, undrain brings it back', async () => {
    assert.deepEqual(await spread(gw, [a, b], 4), [2, 2]);
    // A stream on a (round robin: the next request goes to a) that runs across the drain.
    const long = sse(`${gw.url}/v1/chat/completions`, { model: 'm', messages: USER, max_tokens: 30, stream: true });
    await waitFor(async () => (await a.stats()).requests === 3, { what: 'the stream on a' });
    const d = await post(gw, '/a/drain');
    assert.equal(d.status, 200, d.text);
    assert.deepEqual(d.json, { backend: 'a', drained: true });
    const list = await request(`${gw.url}/admin/backends`, { key: ADMIN });
    assert.equal(list.json.fleet, false);
    const ab = list.json.backends.filter((x) => x.name === 'a' || x.name === 'b');
    assert.deepEqual(ab.map((x) => [x.name, x.state, x.drained]), [['a', 'drained', true], ['b', 'up', false]]);
    assert.deepEqual(await spread(gw, [a, b], 4), [0, 4], 'none to the drained one');
    const s = await long;
    assert.ok(s.done, 'the stream in flight on the drained backend finished');
    assert.equal((await post(gw, '/a/undrain')).status, 200);
    assert.deepEqual(await spread(gw, [a, b], 4), [2, 2]);
  });

  test("a canary's weight set by hand moves the traffic; null gives it back to the configuration", async () => {
    const askC = { model: 'c', messages: USER, max_tokens: 1 };
    const spreadC = async (n) => {
      const before = await Promise.all([a, b].map(async (s) => (await s.stats()).requests));
      for (let i = 0; i < n; i++) assert.equal((await chat(gw, askC)).status, 200);
      const after = await Promise.all([a, b].map(async (s) => (await s.stats()).requests));
      return after.map((x, i) => x - before[i]);
    };
    assert.deepEqual(await spreadC(4), [4, 0], 'weight 0: the stable set');
    const set = await request(`${gw.url}/admin/routes/c/canary`, { method: 'POST', key: ADMIN, body: { weight: 100 } });
    assert.equal(set.status, 200, set.text);
    assert.deepEqual(set.json, { model: 'c', canary_weight: 100 });
    assert.deepEqual(await spreadC(4), [0, 4], 'weight 100: the canary');
    const routes = await request(`${gw.url}/admin/routes`, { key: ADMIN });
    const c = routes.json.routes.find((r) => r.model === 'c');
    assert.deepEqual(c.canary, { model: 'c-next', weight: 100, configured_weight: 0, set_by_operator: true, active: true });
    assert.equal(routes.json.routes.find((r) => r.model === 'm').canary, null);
    const back = await request(`${gw.url}/admin/routes/c/canary`, { method: 'POST', key: ADMIN, body: { weight: null } });
    assert.equal(back.status, 200, back.text);
    assert.deepEqual(await spreadC(4), [4, 0], 'back to the configured 0');
    for (const [body, status] of [[{ weight: 101 }, 400], [{ weight: 'all' }, 400], [{}, 400], [{ weight: 5, x: 1 }, 400]]) {
      const r = await request(`${gw.url}/admin/routes/c/canary`, { method: 'POST', key: ADMIN, body });
      assert.equal(r.status, status, JSON.stringify(body));
    }
    assert.equal((await request(`${gw.url}/admin/routes/m/canary`, { method: 'POST', key: ADMIN, body: { weight: 5 } })).status, 404, 'no canary');
    assert.equal((await request(`${gw.url}/admin/routes/zz/canary`, { method: 'POST', key: ADMIN, body: { weight: 5 } })).status, 404);
    assert.equal((await request(`${gw.url}/admin/routes/c/canary`, { key: ADMIN })).status, 405);
    assert.equal((await request(`${gw.url}/admin/routes/c/canary`, { method: 'POST', key: KEY, body: { weight: 5 } })).status, 403);
  });

  test('bad requests: an unknown backend or action, GET on an action, a user key', async () => {
    assert.equal((await post(gw, '/nope/drain')).status, 404);
    assert.equal((await post(gw, '/a/explode')).status, 404);
    assert.equal((await request(`${gw.url}/admin/backends/a/drain`, { key: ADMIN })).status, 405);
    assert.equal((await post(gw, '/a/drain', KEY)).status, 403);
    assert.equal((await request(`${gw.url}/admin/backends`, { method: 'POST', key: ADMIN })).status, 405);
    assert.equal((await request(`${gw.url}/admin/backends`)).status, 401);
  });
});

describe('draining a backend for the fleet (the key store, PostgreSQL)', () => {
  let a, b, pg, g1, g2;
  before(async () => {
    [a, b, pg] = await Promise.all([startSim(), startSim(), startPostgres()]);
    const cfg = config(a, b, {
      key_store: { enabled: true, secret: 'fleet-hmac-key-0123456789', poll: '200ms' },
      history: { url: pg.url, flush_interval: '100ms' },
    });
    [g1, g2] = await Promise.all([startGateway({ ...cfg, instance: 'g1' }), startGateway({ ...cfg, instance: 'g2' })]);
  });
  after(async () => {
    await Promise.all([g1?.stop(), g2?.stop()]);
    await Promise.all([a?.stop(), b?.stop(), pg?.stop()]);
  });

  test('a drain made on one instance holds on the other within the poll, and across a reload', async () => {
    const d = await post(g1, '/b/drain');
    assert.equal(d.status, 200, d.text);
    await waitFor(async () => (await request(`${g2.url}/admin/backends`, { key: ADMIN })).json.backends.find((x) => x.name === 'b').drained, {
      timeout: 2000,
      what: 'the drain on the other instance',
    });
    assert.deepEqual(await spread(g2, [a, b], 4), [4, 0]);
    // A reload keeps it (the database says so).
    g2.child.kill('SIGHUP');
    await waitFor(async () => (await g2.infra()).routing.reloads.ok === 1, { what: 'the reload' });
    assert.deepEqual(await spread(g2, [a, b], 4), [4, 0]);
    const rows = await pg.query('SELECT name, drained_by FROM backend_drains');
    assert.equal(rows.trim(), 'b|admin');
    assert.equal((await post(g2, '/b/undrain')).status, 200);
    await waitFor(async () => !(await request(`${g1.url}/admin/backends`, { key: ADMIN })).json.backends.find((x) => x.name === 'b').drained, {
      timeout: 2000,
      what: 'the undrain on the first instance',
    });
    assert.deepEqual(await spread(g1, [a, b], 4), [2, 2]);

    // A canary's weight set on one instance holds on the other.
    assert.equal((await request(`${g2.url}/admin/routes/c/canary`, { method: 'POST', key: ADMIN, body: { weight: 100 } })).status, 200);
    await waitFor(async () => (await request(`${g1.url}/admin/routes`, { key: ADMIN })).json.routes.find((r) => r.model === 'c').canary.weight === 100, {
      timeout: 2000,
      what: 'the weight on the other instance',
    });
    assert.equal((await pg.query('SELECT alias, weight, set_by FROM canary_weights')).trim(), 'c|100|admin');
  });
});
