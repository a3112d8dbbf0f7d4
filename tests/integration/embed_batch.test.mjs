// Embeddings micro-batching (src/gateway/embed_batch.cpp, docs/api.md "Embeddings
// micro-batching"): requests to one backend within the window go upstream as one call,
// each gets exactly the vectors of its own inputs (as unbatched), in its own order, with
// its share of the usage; requests that cannot share a call (another encoding_format) are
// not merged; a batch stops at max_inputs; an upstream error reaches every request of the
// batch.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { KEY, metricValue, request, startGateway, startRecorder, startSim } from './lib.mjs';

let sim, gw, rec;
// An OpenAI-style embedding upstream that refuses a batch holding a POISON input (as a
// server refuses an input over its length) and fails one holding FAIL.
const embed = (model, input, extra = {}) =>
  request(`${gw.url}/v1/embeddings`, { method: 'POST', key: KEY, body: { model, input, ...extra } });
const calls = async () => (await sim.stats()).embeddings;

before(async () => {
  sim = await startSim({ ttft: '20ms', 'inter-token': '1ms' });
  rec = await startRecorder((req, res, json) => {
    if (!req.url.endsWith('/embeddings')) return false;
    const inputs = [json.input].flat();
    const reply = (status, body) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    const bad = inputs.find((t) => String(t).includes('POISON'));
    if (bad) reply(400, { error: { message: `Invalid 'input': '${bad}' is too long`, type: 'invalid_request_error' } });
    else if (inputs.some((t) => String(t).includes('FAIL'))) reply(500, { error: { message: 'boom' } });
    else reply(200, { object: 'list', model: 'x', data: inputs.map((t, i) => ({ object: 'embedding', index: i, embedding: [String(t).length, 1] })), usage: { prompt_tokens: inputs.length, total_tokens: inputs.length } });
    return true;
  });
  gw = await startGateway({
    keys: [{ name: 'app', key: KEY, tenant: 'acme', models: ['*'] }],
    models: [
      { alias: 'batched', provider: 'openai', base_url: `${sim.url}/v1`, retries: 0, embedding_batch: { window: '20ms', max_inputs: 64 } },
      { alias: 'small', provider: 'openai', base_url: `${sim.url}/v1`, embedding_batch: { window: '50ms', max_inputs: 4 } },
      { alias: 'ollama', provider: 'ollama', base_url: sim.url, model: 'nomic-embed-text', embedding_batch: { window: '20ms' } },
      { alias: 'plain', provider: 'openai', base_url: `${sim.url}/v1` },
      { alias: 'rec', provider: 'openai', base_url: `${rec.url}/v1`, retries: 0, embedding_batch: { window: '50ms' } },
    ],
    routing: { health: { eject_after: 3 } },
  });
});
after(async () => {
  await gw?.stop();
  await sim?.stop();
  await rec?.close();
});

describe('embeddings micro-batching', () => {
  for (const model of ['batched', 'ollama']) {
    test(`${model}: concurrent requests share calls and each gets its own vectors, as unbatched`, async () => {
      const inputs = Array.from({ length: 24 }, (_, i) => (i % 3 === 0 ? [`first ${i}`, `second ${i}`, `third ${i}`] : `only ${i}`));
      const c0 = await calls();
      const got = await Promise.all(inputs.map((input) => embed(model, input)));
      const used = (await calls()) - c0;
      assert.ok(used >= 1 && used <= 4, `${used} upstream calls for 24 requests`);
      for (const [i, r] of got.entries()) {
        assert.equal(r.status, 200, r.text);
        const want = [inputs[i]].flat();
        assert.equal(r.json.data.length, want.length);
        assert.deepEqual(r.json.data.map((d) => d.index), want.map((_, k) => k));
        assert.ok(r.json.usage.prompt_tokens >= 0);
      }
      // Against the unbatched route, input by input: the same vectors.
      for (const i of [0, 1, 5, 23]) {
        const want = [inputs[i]].flat();
        const direct = await embed('plain', want);
        assert.deepEqual(got[i].json.data.map((d) => d.embedding), direct.json.data.map((d) => d.embedding), `request ${i}`);
      }
      const m = await gw.metrics();
      assert.ok(metricValue(m, 'sluice_embedding_batch_requests_total') >= 24);
    });
  }

  test('requests that cannot share a call are not merged (encoding_format)', async () => {
    const [f, b] = await Promise.all([embed('batched', 'same text'), embed('batched', 'same text', { encoding_format: 'base64' })]);
    assert.equal(f.status, 200, f.text);
    assert.equal(b.status, 200, b.text);
    assert.ok(Array.isArray(f.json.data[0].embedding));
    assert.equal(typeof b.json.data[0].embedding, 'string');
    const floats = new Float32Array(new Uint8Array(Buffer.from(b.json.data[0].embedding, 'base64')).buffer);
    assert.deepEqual([...floats].map((x) => Math.fround(x)), f.json.data[0].embedding.map((x) => Math.fround(x)));
  });

  test('a batch leaves when it holds max_inputs', async () => {
    const c0 = await calls();
    const got = await Promise.all(Array.from({ length: 12 }, (_, i) => embed('small', `text ${i}`)));
    for (const r of got) assert.equal(r.status, 200, r.text);
    assert.ok((await calls()) - c0 >= 3, 'at most 4 inputs a call');
  });

  test("one request's bad input fails that request only, and no other sees its text", async () => {
    rec.requests.length = 0;
    const inputs = Array.from({ length: 12 }, (_, i) => `good ${i}`);
    inputs.splice(5, 0, 'POISON secret text of another tenant');
    const got = await Promise.all(inputs.map((t) => request(`${gw.url}/v1/embeddings`, { method: 'POST', key: KEY, body: { model: 'rec', input: t } })));
    for (const [i, r] of got.entries()) {
      if (inputs[i].startsWith('POISON')) {
        assert.equal(r.status, 400, r.text);
        continue;
      }
      assert.equal(r.status, 200, r.text);
      assert.deepEqual(r.json.data[0].embedding, [inputs[i].length, 1]);
      assert.ok(!r.text.includes('secret'));
    }
    // The batch that held it was refused, then its requests went alone.
    const calls = rec.requests.filter((q) => q.url.endsWith('/embeddings')).map((q) => [q.json.input].flat());
    const refused = calls.find((c) => c.length > 1 && c.some((t) => t.startsWith('POISON')));
    assert.ok(refused, `a batched call held the bad input: ${JSON.stringify(calls)}`);
    for (const t of refused) assert.ok(calls.some((c) => c.length === 1 && c[0] === t), `${t} sent alone after`);
  });

  test("a batched call's failure counts once against the backend", async () => {
    const got = await Promise.all(Array.from({ length: 6 }, (_, i) => request(`${gw.url}/v1/embeddings`, { method: 'POST', key: KEY, body: { model: 'rec', input: `FAIL ${i}` } })));
    for (const r of got) assert.ok(r.status >= 500, `${r.status} ${r.text}`);
    // Six requests, one upstream exchange: under eject_after 3, not an ejection.
    const backend = new URL(rec.url).host;
    assert.equal(metricValue(await gw.metrics(), 'sluice_backend_ejections_total', { backend }), 0);
    const ok = await request(`${gw.url}/v1/embeddings`, { method: 'POST', key: KEY, body: { model: 'rec', input: 'after' } });
    assert.equal(ok.status, 200, ok.text);
  });

  test('an upstream error reaches every request of the batch', async () => {
    await sim.configure({ error_rate_500: 1 });
    try {
      const got = await Promise.all(Array.from({ length: 6 }, (_, i) => embed('batched', `fail ${i}`)));
      for (const r of got) assert.ok(r.status >= 500, `${r.status} ${r.text}`);
    } finally {
      await sim.configure({ error_rate_500: 0 });
    }
    const ok = await embed('batched', 'after the error');
    assert.equal(ok.status, 200, ok.text);
  });
});
