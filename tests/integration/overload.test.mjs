// Overload (docs/limits.md, "Overload"): a model whose queue is full, or whose request
// waited its route's overload.max_wait, sends the request to its light model (if that has
// a free slot at once) or answers with its canned reply, instead of 429/503; and a client
// that says how long it accepts to wait (Prefer: wait=N) gets 202 {"status":"queued",
// "eta":...} when the gate estimates a longer wait, instead of holding its connection.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { KEY, chat, metricValue, rawRequest, startGateway, USER, waitFor } from './lib.mjs';

const NARROW = 'sk-narrow-0000000000000000';
const sim = (ttft) => ({ ttft, inter_token: '1ms', jitter: 0 });

function config() {
  return {
    keys: [
      { name: 'app', key: KEY, tenant: 'acme', tier: 'standard' },
      { name: 'narrow', key: NARROW, tenant: 'acme', tier: 'standard', models: ['big'] },
    ],
    models: [
      // Degrades after 150 ms in the queue: to `small`, else its canned reply.
      {
        alias: 'big',
        provider: 'simulated',
        max_in_flight: 1,
        sim: sim('600ms'),
        canned_reply: 'We are busy; here is the short answer.',
        overload: { model: 'small', canned: true, max_wait: '150ms' },
      },
      // Degrades only when the queue is full (its class's wait is long).
      { alias: 'full', provider: 'simulated', max_in_flight: 1, sim: sim('600ms'), overload: { model: 'small' } },
      { alias: 'small', provider: 'simulated', max_in_flight: 1, sim: sim('600ms') },
      { alias: 'demo', provider: 'simulated', max_in_flight: 1, sim: sim('400ms') },
    ],
    concurrency: { queue_size: 1, max_wait: { vip: '10s', premium: '10s', standard: '10s' } },
  };
}

async function gateState(gw) {
  return JSON.parse((await rawRequest({ port: gw.adminPort, path: '/infra' })).body).concurrency_gate;
}

// Sends a request and waits until the gate holds it (in flight or queued): the next one
// arrives after it. Returns the response's promise, wrapped.
async function hold(gw, body) {
  const g = await gateState(gw);
  const before = g.in_flight + g.queued.vip + g.queued.premium + g.queued.standard;
  const p = chat(gw, body);
  await waitFor(
    async () => {
      const s = await gateState(gw);
      return s.in_flight + s.queued.vip + s.queued.premium + s.queued.standard > before;
    },
    { timeout: 5000, interval: 10, what: 'the request to reach the gate' },
  );
  return { res: p };
}

const ask = (model) => ({ model, messages: USER, max_tokens: 2 });

describe('overload degrades instead of refusing', () => {
  let gw;
  before(async () => {
    gw = await startGateway(config());
  });
  after(async () => {
    await gw?.stop();
  });

  test('a request that waited the route\'s overload.max_wait is served by the light model', async () => {
    const busy = await hold(gw, ask('big'));
    const t0 = Date.now();
    const r = await chat(gw, ask('big'));
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers.get('x-sluice-overload'), 'model');
    assert.ok(Date.now() - t0 >= 150, 'it waited its overload.max_wait first');
    const line = await gw.logFor(r.headers.get('x-request-id'));
    assert.equal(line.alias, 'big');
    assert.equal(line.served_by, 'small');
    assert.equal(line.model, 'small');
    assert.equal(line.reason, 'ok');
    assert.equal((await busy.res).status, 200, 'the request holding the slot is unaffected');
  });

  test('with the light model busy too, the canned reply (200), whole and streamed', async () => {
    const busy = await hold(gw, ask('big'));
    const light = await hold(gw, ask('small'));
    const r = await chat(gw, ask('big'));
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers.get('x-sluice-overload'), 'canned');
    assert.equal(r.json.choices[0].message.content, 'We are busy; here is the short answer.');
    const line = await gw.logFor(r.headers.get('x-request-id'));
    assert.equal(line.reason, 'canned_reply');
    assert.equal(line.prompt_tokens, 0, 'nothing generated, nothing charged');
    assert.match(line.error, /overload/);
    const s = await chat(gw, { ...ask('big'), stream: true });
    assert.equal(s.status, 200);
    assert.equal(s.headers.get('x-sluice-overload'), 'canned');
    assert.match(s.text, /short answer/);
    assert.match(s.text, /data: \[DONE\]/);
    assert.equal((await busy.res).status, 200);
    assert.equal((await light.res).status, 200);
  });

  test('a key that may not use the light model gets the canned reply', async () => {
    const busy = await hold(gw, ask('big'));
    const r = await chat(gw, ask('big'), { key: NARROW });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers.get('x-sluice-overload'), 'canned');
    assert.equal((await busy.res).status, 200);
  });

  test('a full queue degrades at once', async () => {
    const busy = await hold(gw, ask('full'));
    const queued = await hold(gw, ask('full')); // the queue's one place
    const t0 = Date.now();
    const r = await chat(gw, ask('full'));
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers.get('x-sluice-overload'), 'model');
    assert.ok(Date.now() - t0 < 5000, 'no wait for a place');
    for (const p of [busy, queued]) assert.equal((await p.res).status, 200);
    const m = await gw.metrics();
    assert.ok(metricValue(m, 'sluice_route_overload_total', { model: 'full', to: 'model' }) >= 1);
    assert.ok(metricValue(m, 'sluice_route_overload_total', { model: 'big', to: 'canned' }) >= 2);
    assert.ok(metricValue(m, 'sluice_route_overload_total', { model: 'big', to: 'model' }) >= 1);
    // Every request of this suite was served: none is counted as refused by the gate.
    assert.equal(metricValue(m, 'sluice_gate_rejected_total', { reason: 'queue_full' }), 0);
    assert.equal(metricValue(m, 'sluice_gate_rejected_total', { reason: 'queue_timeout' }), 0);
  });
});

describe('Prefer: wait=N: the queued answer with an estimate', () => {
  let gw;
  before(async () => {
    gw = await startGateway(config());
  });
  after(async () => {
    await gw?.stop();
  });

  test('before any hold time is measured the request waits; then a longer estimate answers 202 queued with eta', async () => {
    // Nothing measured yet: no estimate, so it waits as any request.
    const first = await hold(gw, ask('demo'));
    const waited = await chat(gw, ask('demo'), { headers: { prefer: 'wait=0' } });
    assert.equal(waited.status, 200, waited.text);
    assert.equal((await first.res).status, 200);

    // Now the model's slot is known to be held about 400 ms a request. (Spaces may stand
    // around '=', RFC 7240.)
    const busy = await hold(gw, ask('demo'));
    const r = await chat(gw, ask('demo'), { headers: { prefer: 'respond-async, wait = 0' } });
    assert.equal(r.status, 202, r.text);
    assert.equal(r.json.status, 'queued');
    assert.ok(r.json.eta >= 200 && r.json.eta < 5000, `eta ${r.json.eta} ms`);
    assert.equal(r.json.position, 1);
    assert.ok(Number(r.headers.get('retry-after')) >= 1);
    assert.equal(r.headers.get('preference-applied'), 'wait=0');
    const line = await gw.logFor(r.headers.get('x-request-id'));
    assert.equal(line.status, 202);
    assert.equal(line.reason, 'queued');
    assert.equal(line.prompt_tokens ?? 0, 0);

    // A client that accepts the wait waits; a malformed preference is no preference.
    const patient = chat(gw, ask('demo'), { headers: { prefer: 'wait=30' } });
    const odd = await chat(gw, ask('full'), { headers: { prefer: 'wait=soon' } });
    assert.equal(odd.status, 200);
    assert.equal((await patient).status, 200);
    assert.equal((await busy.res).status, 200);
    const m = await gw.metrics();
    assert.equal(metricValue(m, 'sluice_gate_queued_answers_total'), 1);
    assert.equal((await gateState(gw)).queued_answers, 1);
  });
});
