// Load-aware admission (docs/routing.md, "Load-aware admission"): the gateway reads each
// backend's own load signals (vLLM's /metrics: requests running and waiting, KV-cache
// usage; the simulator publishes them from its KV-cache model), sends new requests to a
// backend with room while another's memory is full, holds them in the concurrency gate
// while every backend's is, and goes on as before when the signals cannot be read.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { KEY, metricValue, request, startGateway, startRecorder, startSim, waitFor } from './lib.mjs';

let a, b, gw, broken;
const backendOf = (sim) => new URL(sim.url).host;

// Fills a simulator's KV cache directly (not through the gateway): `n` sequences of
// max_tokens 430 (about 433 tokens each, of 1,000) that last about 430 x 5 ms.
const fill = (sim, n) =>
  Promise.all(
    Array.from({ length: n }, () =>
      fetch(`${sim.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'm', max_tokens: 430, messages: [{ role: 'user', content: 'hi' }] }),
      }).then((r) => r.text()),
    ),
  );
const saturated = async (sim) => {
  const m = await gw.metrics();
  return metricValue(m, 'sluice_backend_saturated', { backend: backendOf(sim) }) === 1;
};
const ask = () => request(`${gw.url}/v1/chat/completions`, { method: 'POST', key: KEY, body: { model: 'm', max_tokens: 4, messages: [{ role: 'user', content: 'hello' }] } });

before(async () => {
  const flags = { ttft: '5ms', 'inter-token': '5ms', 'kv-tokens': 1000 };
  a = await startSim(flags);
  b = await startSim(flags);
  broken = await startRecorder((req, res) => {
    if (req.url === '/metrics') {
      res.writeHead(500);
      res.end('no');
      return true;
    }
    return false;
  });
  const load = { source: 'vllm', interval: '100ms', max_kv: 0.85 };
  gw = await startGateway({
    keys: [{ name: 'app', key: KEY, tenant: 'acme', models: ['*'] }],
    models: [
      { alias: 'm', backends: [
        { provider: 'openai', base_url: `${a.url}/v1`, model: 'm', load },
        { provider: 'openai', base_url: `${b.url}/v1`, model: 'm', load },
      ] },
      { alias: 'blind', provider: 'openai', base_url: `${broken.url}/v1`, load },
    ],
    concurrency: { max_wait: { standard: '20s' } },
  });
});
after(async () => {
  await gw?.stop();
  await a?.stop();
  await b?.stop();
  await broken?.close();
});

describe('load-aware admission', () => {
  test('the signals are read and shown', async () => {
    await waitFor(async () => JSON.stringify(await gw.infra()).includes('"fresh":true'), { what: 'a fresh load reading in /infra' });
    const m = await gw.metrics();
    assert.equal(metricValue(m, 'sluice_backend_kv_usage', { backend: backendOf(a) }), 0);
    assert.ok(metricValue(m, 'sluice_backend_load_reads_total', { backend: backendOf(a), result: 'ok' }) >= 1);
  });

  test('while one backend is full, new requests go to the other', async () => {
    const filling = fill(a, 2);  // 866 of 1,000 tokens: over 0.85
    await waitFor(() => saturated(a), { what: 'backend a saturated' });
    const before = { a: (await a.stats()).requests, b: (await b.stats()).requests };
    for (let i = 0; i < 6; i++) assert.equal((await ask()).status, 200);
    assert.equal((await a.stats()).requests - before.a, 0, 'none to the full backend');
    assert.equal((await b.stats()).requests - before.b, 6);
    assert.equal((await a.stats()).waiting, 0, 'nothing piled into its queue');
    await filling;
  });

  test('while every backend is full, requests wait in the gate, then go when one has room', async () => {
    const filling = Promise.all([fill(a, 2), fill(b, 2)]);
    await waitFor(async () => (await saturated(a)) && (await saturated(b)), { what: 'both saturated' });
    const t0 = performance.now();
    const r = await ask();
    const took = performance.now() - t0;
    assert.equal(r.status, 200, r.text);
    const line = await gw.logFor(r.headers.get('x-request-id'));
    assert.ok(line.queue_ms >= 100, `it waited in the gate: queue_ms ${line.queue_ms} (${took.toFixed(0)} ms)`);
    await filling;
    assert.equal((await a.stats()).waiting + (await b.stats()).waiting, 0);
  });

  test('a backend whose signals cannot be read is used as before', async () => {
    const r = await request(`${gw.url}/v1/chat/completions`, { method: 'POST', key: KEY, body: { model: 'blind', max_tokens: 4, messages: [{ role: 'user', content: 'hello' }] } });
    assert.equal(r.status, 200, r.text);
    const m = await gw.metrics();
    assert.ok(metricValue(m, 'sluice_backend_load_reads_total', { backend: backendOf(broken), result: 'failed' }) >= 1);
    assert.equal(metricValue(m, 'sluice_backend_saturated', { backend: backendOf(broken) }), 0);
  });
});
