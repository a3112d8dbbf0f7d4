// Business metrics (docs/observability.md, "Business metrics"): the stream completion rate
// (sluice_streams_total by outcome), tokens saved by what answered instead, and money at a
// route's price: each record's cost_usd and saved_usd, summed in sluice_spent_usd_total and
// sluice_saved_usd_total.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { contentEvents, KEY, metricValue, request, sse, startGateway, startSim, USER } from './lib.mjs';

const PRICE = { input: 0.15, output: 0.6 };
let sim, gw;

const usd = (prompt, completion) => (prompt * PRICE.input + completion * PRICE.output) / 1e6;
const close = (a, b) => Math.abs(a - b) <= 1e-12 + 1e-6 * Math.abs(b);

before(async () => {
  sim = await startSim({ ttft: '1ms', 'inter-token': '1ms' });
  gw = await startGateway({
    keys: [{ name: 'app', key: KEY, tenant: 'acme', models: ['*'] }],
    models: [
      { alias: 'priced', provider: 'openai', base_url: `${sim.url}/v1`, price: PRICE, cache: { coalesce: true } },
      { alias: 'free', provider: 'openai', base_url: `${sim.url}/v1` },
    ],
  });
});
after(async () => {
  await gw?.stop();
  await sim?.stop();
});

describe('business metrics', () => {
  test("a record's cost and savings at the route's price, summed in the metrics", async () => {
    const body = { model: 'priced', temperature: 0, max_tokens: 12, messages: [{ role: 'user', content: `Price me ${Date.now()}` }] };
    const miss = await request(`${gw.url}/v1/chat/completions`, { method: 'POST', key: KEY, body });
    assert.equal(miss.status, 200, miss.text);
    const hit = await request(`${gw.url}/v1/chat/completions`, { method: 'POST', key: KEY, body });
    assert.equal(hit.headers.get('x-sluice-cache'), 'hit');
    const m1 = await gw.logFor(miss.headers.get('x-request-id'));
    const m2 = await gw.logFor(hit.headers.get('x-request-id'));
    assert.ok(m1.prompt_tokens > 0 && m1.completion_tokens > 0);
    assert.ok(close(m1.cost_usd, usd(m1.prompt_tokens, m1.completion_tokens)), `${m1.cost_usd}`);
    assert.equal(m1.saved_usd, undefined);
    assert.equal(m2.cost_usd, 0, 'a hit is charged nothing');
    assert.equal(m2.saved_tokens, m1.prompt_tokens + m1.completion_tokens);
    assert.ok(close(m2.saved_usd, usd(m1.prompt_tokens, m1.completion_tokens)), `${m2.saved_usd}`);

    const free = await request(`${gw.url}/v1/chat/completions`, { method: 'POST', key: KEY, body: { ...body, model: 'free' } });
    assert.equal((await gw.logFor(free.headers.get('x-request-id'))).cost_usd, undefined, 'no price, no estimate');

    const m = await gw.metrics();
    assert.ok(close(metricValue(m, 'sluice_spent_usd_total', { model: 'priced' }), m1.cost_usd));
    assert.ok(close(metricValue(m, 'sluice_saved_usd_total', { model: 'priced', by: 'cache' }), m2.saved_usd));
    assert.equal(metricValue(m, 'sluice_saved_tokens_total', { model: 'priced', by: 'cache' }), m2.saved_tokens);
    assert.equal(metricValue(m, 'sluice_saved_usd_total', { model: 'priced', by: 'coalesced' }), 0);
    assert.equal(metricValue(m, 'sluice_spent_usd_total', { model: 'free' }), 0);
  });

  test('streams are counted by how they ended: completed, the client left, failed', async () => {
    const before = await gw.metrics();
    const count = (m, outcome) => metricValue(m, 'sluice_streams_total', { model: 'free', outcome });
    const stream = { model: 'free', messages: USER, stream: true, max_tokens: 6 };
    const done = await sse(`${gw.url}/v1/chat/completions`, stream);
    assert.ok(done.done);
    await sim.configure({ inter_token_ms: 100 });
    const left = await sse(`${gw.url}/v1/chat/completions`, { ...stream, max_tokens: 50 }, { stopAfter: (ev) => contentEvents(ev).length >= 1 });
    assert.ok(left.aborted);
    await sim.configure({ inter_token_ms: 1, abort_rate: 1 });
    const failed = await sse(`${gw.url}/v1/chat/completions`, { ...stream, max_tokens: 10 });
    assert.equal(failed.status, 200);
    await sim.configure({ abort_rate: 0 });
    // A refused stream never began: not counted.
    const refused = await request(`${gw.url}/v1/chat/completions`, { method: 'POST', key: KEY, body: { ...stream, temperature: 7 } });
    assert.equal(refused.status, 400);
    await gw.logFor(left.headers.get('x-request-id'));  // (its record is written)
    const m = await gw.metrics();
    assert.equal(count(m, 'completed') - count(before, 'completed'), 1);
    assert.equal(count(m, 'client_left') - count(before, 'client_left'), 1);
    assert.equal(count(m, 'failed') - count(before, 'failed'), 1);
  });
});
