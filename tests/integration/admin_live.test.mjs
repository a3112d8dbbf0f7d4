// Requests in flight and the audit trail (docs/admin.md, "Live requests" and "Audit"):
// GET /admin/requests lists what runs — on this instance, and with the live registry in
// Redis on every instance of the fleet — and POST /admin/requests/<id>/cancel ends one
// wherever it runs (a stream gets a `cancelled` error event, a plain request a 410).
// Every change made through /admin/ is an audit row in the history's database and an
// `admin.audit` event naming who made it.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { KEY, USER, rawRequest, request, startGateway, startKafka, startRedis, startSim, waitFor } from './lib.mjs';

const ADMIN = 'sk-admin-0000000000000000';
let VIEWER; // a stored key with role viewer (file keys are user or admin)

function config(sim, extra = {}) {
  return {
    keys: [
      { name: 'admin', key: ADMIN, tenant: 'ops', admin: true },
      { name: 'app', key: KEY, tenant: 'acme' },
    ],
    models: [
      {
        alias: 'm',
        backends: [
          { provider: 'openai', base_url: `${sim.url}/v1`, name: 'a' },
          { provider: 'openai', base_url: `${sim.url}/v1`, name: 'b' },
        ],
      },
    ],
    history: { flush_interval: '100ms' },
    ...extra,
  };
}

// A long answer (200 tokens at the simulator's 100 ms): it runs until it is cancelled.
const long = (stream) => ({ model: 'm', messages: USER, max_tokens: 200, stream });
// A stream whose first content frame has arrived (`first` resolves then): a cancel now
// reaches it mid-stream. `done` resolves with {status, raw, error} (the error event's body).
function openStream(gw, id) {
  let started;
  const first = new Promise((resolve) => (started = resolve));
  const done = (async () => {
    const res = await fetch(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', 'x-request-id': id },
      body: JSON.stringify(long(true)),
    });
    const dec = new TextDecoder();
    let raw = '';
    for await (const chunk of res.body) {
      raw += dec.decode(chunk, { stream: true });
      if (raw.includes('"content"')) started();
    }
    started();
    const frames = raw.split('\n').filter((l) => l.startsWith('data: {')).map((l) => JSON.parse(l.slice(6)));
    return { status: res.status, raw, frames, error: frames.find((f) => f.error)?.error };
  })();
  return { first, done };
}

const live = async (gw, key = ADMIN, q = '') => request(`${gw.url}/admin/requests${q}`, { key });
const cancel = (gw, id, key = ADMIN) => request(`${gw.url}/admin/requests/${id}/cancel`, { method: 'POST', key });

describe('requests in flight on one instance, and the audit trail', () => {
  let sim, kafka, gw;
  const ids = {}; // the cancelled requests' ids, for the audit test
  before(async () => {
    [sim, kafka] = await Promise.all([startSim({ 'inter-token': '100ms' }), startKafka({ topic: 'sluice.admin' })]);
    gw = await startGateway(
      config(sim, {
        key_store: { enabled: true, secret: 'audit-test-secret-0123456789', poll: '200ms' },
        events: { brokers: kafka.bootstrap, topic: kafka.topic, linger: '5ms' },
      }),
    );
    const v = await request(`${gw.url}/admin/keys`, { method: 'POST', key: ADMIN, body: { name: 'watch', role: 'viewer' } });
    assert.equal(v.status, 201, v.text);
    VIEWER = v.json.secret;
  });
  after(async () => {
    await gw?.stop();
    await Promise.all([sim?.stop(), kafka?.stop()]);
  });

  test('listed with key, model and start; a cancel ends a stream with an error event and a plain request with 410', async () => {
    const streamed = openStream(gw, 'live-stream-1');
    const plain = request(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      key: KEY,
      headers: { 'content-type': 'application/json', 'x-request-id': 'live-plain-1' },
      body: JSON.stringify(long(false)),
      timeout: 60000,
    });
    const listing = await waitFor(
      async () => {
        const r = await live(gw);
        return r.json.requests.length === 2 && r.json;
      },
      { what: 'both requests listed' },
    );
    assert.equal(listing.fleet, false);
    assert.deepEqual(listing.instances, ['it-gw']);
    // Each has the gateway's own id (what a cancel names) beside its X-Request-Id.
    const byId = Object.fromEntries(listing.requests.map((r) => [r.request_id, r]));
    assert.equal(byId['live-stream-1'].stream, true);
    assert.equal(byId['live-plain-1'].stream, false);
    const streamId = byId['live-stream-1'].id;
    const plainId = byId['live-plain-1'].id;
    assert.match(streamId, /^[0-9a-f]{16}$/);
    assert.notEqual(streamId, plainId);
    for (const r of listing.requests) {
      assert.equal(r.key, 'app');
      assert.equal(r.tenant, 'acme');
      assert.equal(r.model, 'm');
      assert.equal(r.instance, 'it-gw');
      assert.equal(r.path, '/v1/chat/completions');
      assert.ok(Math.abs(r.start_ms - Date.now()) < 60e3 && r.age_ms >= 0, JSON.stringify(r));
    }
    // Filters, and who may look or act.
    assert.equal((await live(gw, ADMIN, '?stream=true')).json.requests.length, 1);
    assert.equal((await live(gw, ADMIN, '?key=nobody')).json.requests.length, 0);
    assert.equal((await live(gw, ADMIN, '?stream=maybe')).status, 400);
    assert.equal((await live(gw, VIEWER)).status, 200, 'a viewer reads');
    assert.equal((await cancel(gw, streamId, VIEWER)).status, 403, 'a viewer cancels nothing');
    assert.equal((await live(gw, KEY)).status, 403);
    assert.equal((await cancel(gw, streamId, KEY)).status, 403);
    assert.equal((await cancel(gw, 'nobody')).status, 404);
    assert.equal((await cancel(gw, 'live-stream-1')).status, 404, 'the client\'s id is not what a cancel names');
    assert.equal((await request(`${gw.url}/admin/requests/${streamId}/cancel`, { key: ADMIN })).status, 405);
    assert.equal((await request(`${gw.url}/admin/requests/${streamId}`, { method: 'POST', key: ADMIN })).status, 404);

    await streamed.first;
    const c1 = await cancel(gw, streamId);
    assert.equal(c1.status, 200, c1.text);
    assert.deepEqual(c1.json, { id: streamId, instance: 'it-gw', cancelled: true });
    const s = await streamed.done;
    assert.equal(s.status, 200);
    assert.equal(s.error?.code, 'cancelled', s.raw.slice(-400));
    assert.ok(s.frames.length < 150, 'ended long before its 200 tokens');

    assert.equal((await cancel(gw, plainId)).status, 200);
    const p = await plain;
    assert.equal(p.status, 410, p.text);
    assert.equal(p.json.error.code, 'cancelled');

    // (The stream's head had gone out with 200: its record keeps that status.)
    for (const [id, status] of [['live-stream-1', 200], ['live-plain-1', 410]]) {
      const line = await gw.logFor(id);
      assert.equal(line.reason, 'cancelled', JSON.stringify(line));
      assert.equal(line.status, status);
    }
    await waitFor(async () => (await live(gw)).json.requests.length === 0, { what: 'nothing in flight' });
    Object.assign(ids, { stream: streamId, plain: plainId });
  });

  test('every change is an audit row and an admin.audit event naming who made it; reads are not', async () => {
    assert.equal((await request(`${gw.url}/admin/backends/a/drain`, { method: 'POST', key: ADMIN })).status, 200);
    const viaListener = await rawRequest({ port: gw.adminPort, method: 'POST', path: '/admin/backends/a/undrain' });
    assert.equal(viaListener.status, 200, viaListener.body);
    assert.equal((await request(`${gw.url}/admin/backends/nope/drain`, { method: 'POST', key: ADMIN })).status, 404);
    await request(`${gw.url}/admin/backends`, { key: ADMIN });

    const all = await request(`${gw.url}/admin/audit`, { key: VIEWER });
    assert.equal(all.status, 200, all.text);
    const rows = all.json.audit;
    const actions = rows.map((r) => `${r.action} ${r.target} ${r.actor}`);
    assert.deepEqual(actions, [
      'backend.undrain a admin-listener',
      'backend.drain a admin',
      `request.cancel ${ids.plain} admin`,
      `request.cancel ${ids.stream} admin`,
      'key.create watch admin',
    ], 'a refused change and reads are not audited');
    for (const r of rows) {
      assert.equal(r.instance, 'it-gw');
      assert.equal(r.status, r.action === 'key.create' ? 201 : 200);
      assert.match(r.request_id, /.+/);
    }
    // What was asked, never a secret: the viewer's was made by the gateway and shown once.
    assert.deepEqual(rows[4].detail, { body: { name: 'watch', role: 'viewer' } });
    assert.ok(!all.text.includes(VIEWER));
    const drains = await request(`${gw.url}/admin/audit?action=backend.drain&actor=admin`, { key: ADMIN });
    assert.deepEqual(drains.json.audit.map((r) => r.target), ['a']);
    // Older pages: rows before a time.
    const older = await request(`${gw.url}/admin/audit?until=${rows[1].unix_ms}`, { key: ADMIN });
    assert.ok(older.json.audit.length >= 1 && older.json.audit.every((r) => r.unix_ms < rows[1].unix_ms), older.text);
    assert.equal((await request(`${gw.url}/admin/audit?since=2000000000&until=1000000000`, { key: ADMIN })).status, 400);
    // A change refused for its key is a request record (the history shows who tried).
    assert.equal((await request(`${gw.url}/admin/backends/a/drain`, { method: 'POST', key: VIEWER })).status, 403);
    await waitFor(
      async () => (await request(`${gw.url}/history?key=watch&status=403`, { key: ADMIN })).json?.data?.length === 1,
      { what: "the viewer's refused drain in the history" },
    );
    assert.equal((await request(`${gw.url}/admin/audit?limit=0`, { key: ADMIN })).status, 400);
    assert.equal((await request(`${gw.url}/admin/audit?colour=red`, { key: ADMIN })).status, 400);
    assert.equal((await request(`${gw.url}/admin/audit`, { key: KEY })).status, 403);
    assert.equal((await request(`${gw.url}/admin/audit`, { method: 'DELETE', key: ADMIN })).status, 405);

    // The same on the event stream.
    const events = await waitFor(
      async () => {
        const got = (await kafka.messages()).filter((e) => e.event === 'admin.audit');
        return got.length >= 5 && got;
      },
      { timeout: 15000, what: 'the admin.audit events' },
    );
    const seen = events.map((e) => `${e.data.action} ${e.data.target} ${e.data.actor}`);
    for (const a of actions) assert.ok(seen.includes(a), `${a} in ${seen}`);
    assert.equal(events[0].instance, 'it-gw');
  });
});

describe('clients that leave: nothing stays listed, no slot stays held', () => {
  let sim, gw;
  before(async () => {
    sim = await startSim({ 'inter-token': '100ms' });
    // One request at a time for the key: the second waits in the gate's queue.
    const cfg = config(sim);
    cfg.keys[1].max_in_flight = 1;
    gw = await startGateway(cfg);
  });
  after(async () => {
    await gw?.stop();
    await sim?.stop();
  });

  test('one leaves while queued, one mid-stream: the listing, the gate and the stream gauge go back to 0', async () => {
    const first = new AbortController();
    let started;
    const streaming = new Promise((resolve) => (started = resolve));
    const leaver = (async () => {
      const res = await fetch(`${gw.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', 'x-request-id': 'leaves-mid' },
        body: JSON.stringify(long(true)),
        signal: first.signal,
      });
      for await (const chunk of res.body) if (new TextDecoder().decode(chunk).includes('"content"')) started();
    })().catch(() => {});
    await streaming;
    const second = new AbortController();
    const waiting = fetch(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', 'x-request-id': 'leaves-queued' },
      body: JSON.stringify(long(false)),
      signal: second.signal,
    }).catch(() => {});
    const both = await waitFor(
      async () => {
        const r = (await live(gw)).json.requests;
        return r.length === 2 && r;
      },
      { what: 'both listed, one streaming and one queued' },
    );
    assert.deepEqual(both.map((r) => r.request_id).sort(), ['leaves-mid', 'leaves-queued']);
    assert.equal((await gw.infra()).concurrency_gate.queued.standard, 1);

    second.abort();
    await waiting;
    await waitFor(async () => (await live(gw)).json.requests.map((r) => r.request_id).join() === 'leaves-mid', {
      what: 'the queued one gone from the listing',
    });
    first.abort();
    await leaver;
    await waitFor(async () => (await live(gw)).json.requests.length === 0, { what: 'nothing listed' });
    await waitFor(
      async () => {
        const g = (await gw.infra()).concurrency_gate;
        return g.in_flight === 0 && g.queued.standard === 0 && (await gw.metric('sluice_streams_open')) === 0;
      },
      { what: 'the gate and the stream gauge back to 0' },
    );
    assert.equal((await gw.logFor('leaves-queued')).reason, 'client_closed');
    assert.equal((await gw.logFor('leaves-mid')).reason, 'client_closed');
  });
});

describe('a cancel reaches a request waiting in the gate', () => {
  let sim, gw;
  before(async () => {
    sim = await startSim({ 'inter-token': '100ms' });
    const cfg = config(sim);
    cfg.keys[1].max_in_flight = 1; // the second request of the key waits in the queue
    gw = await startGateway(cfg);
  });
  after(async () => {
    await gw?.stop();
    await sim?.stop();
  });

  test('it leaves the queue at once and gets 410 cancelled; the gate goes back to 0', async () => {
    const holder = openStream(gw, 'holds-the-slot');
    await holder.first;
    const waiting = request(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      key: KEY,
      headers: { 'x-request-id': 'queued-then-cancelled' },
      body: long(false),
    });
    const queued = await waitFor(async () => (await live(gw)).json.requests.find((r) => r.request_id === 'queued-then-cancelled'), {
      what: 'the queued request listed',
    });
    await waitFor(async () => (await gw.infra()).concurrency_gate.queued.standard === 1, { what: 'it waits in the gate' });
    const c = await cancel(gw, queued.id);
    assert.equal(c.status, 200, c.text);
    assert.equal(c.json.cancelled, true, 'ended here, not only marked');
    const r = await waiting;
    assert.equal(r.status, 410, r.text);
    assert.equal(r.json.error.code, 'cancelled');
    assert.equal((await gw.infra()).concurrency_gate.queued.standard, 0);
    assert.equal((await gw.logFor('queued-then-cancelled')).reason, 'cancelled');
    const h = (await live(gw)).json.requests.find((x) => x.request_id === 'holds-the-slot');
    assert.equal((await cancel(gw, h.id)).status, 200);
    assert.equal((await holder.done).error.code, 'cancelled');
    await waitFor(async () => (await gw.infra()).concurrency_gate.in_flight === 0, { what: 'the slot given back' });
  });
});

describe('the fleet: requests registered in Redis, a cancel reaches the instance running one', () => {
  let sim, redis, a, b;
  before(async () => {
    [sim, redis] = await Promise.all([startSim({ 'inter-token': '100ms' }), startRedis()]);
    const fleet = (name) =>
      config(sim, {
        instance: name,
        redis: { url: redis.url, retry_interval: '200ms' },
        admin: { listen: '127.0.0.1:0', live_registry: 'redis', live_interval: '200ms' },
      });
    [a, b] = await Promise.all([startGateway(fleet('gw-a')), startGateway(fleet('gw-b'))]);
  });
  after(async () => {
    await Promise.all([a?.stop(), b?.stop()]);
    await Promise.all([sim?.stop(), redis?.stop()]);
  });

  test('listed on another instance, cancelled from it; Redis down lists this instance only, then recovers', async () => {
    const streamed = openStream(b, 'fleet-1');
    const seen = await waitFor(
      async () => {
        const r = (await live(a)).json;
        return r.requests.some((x) => x.request_id === 'fleet-1') && r;
      },
      { what: "gw-b's stream listed on gw-a" },
    );
    assert.equal(seen.fleet, true);
    assert.deepEqual(seen.instances.sort(), ['gw-a', 'gw-b']);
    const r = seen.requests.find((x) => x.request_id === 'fleet-1');
    assert.equal(r.instance, 'gw-b');
    assert.equal(r.key, 'app');
    assert.equal(r.stream, true);

    await streamed.first;
    const c = await cancel(a, r.id);
    assert.equal(c.status, 202, c.text);
    assert.deepEqual(c.json, { id: r.id, instance: 'gw-b', cancelled: 'requested' });
    const s = await streamed.done;
    assert.equal(s.error?.code, 'cancelled', s.raw.slice(-300));
    assert.equal((await b.logFor('fleet-1')).reason, 'cancelled');
    await waitFor(async () => !(await live(a)).json.requests.some((x) => x.id === r.id), {
      what: 'the cancelled stream gone from the fleet listing',
    });
    // Audited where the change was made.
    const audit = (await request(`${a.url}/admin/audit?action=request.cancel`, { key: ADMIN })).json.audit;
    assert.deepEqual(audit.map((x) => [x.target, x.status, x.instance]), [[r.id, 202, 'gw-a']]);

    // Redis down: this instance's requests, and why the others are missing.
    await redis.stop();
    const down = await waitFor(
      async () => {
        const x = await live(a);
        return x.status === 200 && x.json.error && x.json;
      },
      { what: 'the listing saying Redis is unreadable' },
    );
    assert.deepEqual(down.instances, ['gw-a']);
    await redis.start();
    const again = openStream(b, 'fleet-2');
    const r2 = await waitFor(async () => (await live(a)).json.requests.find((x) => x.request_id === 'fleet-2'), {
      timeout: 10000,
      what: 'the registry back after Redis returned',
    });
    assert.equal((await cancel(a, r2.id)).status, 202);
    const s2 = await again.done;
    assert.ok(s2.status === 410 || s2.error?.code === 'cancelled', s2.raw.slice(-300));
  });
});
