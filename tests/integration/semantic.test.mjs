// The response cache's semantic stage (src/cache/semantic.cpp, docs/cache.md "Semantic
// stage"): a request the exact key misses is answered with a kept answer to a prompt that
// says the same in other words: by SimHash (no model call), or by the embedding of a
// configured embedding route (the simulator's embeddings, whose cosine follows shared
// words) against an HNSW index; only among requests alike in everything else; never for
// images or (by default) tools; an embedding route that fails costs only the hit; the
// fleet's instances share their entries through Redis.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { closedPort, KEY, metricValue, request, startGateway, startRedis, startSim, waitFor } from './lib.mjs';

const OTHER = 'sk-other-tenant-00000000';
const ADMIN = 'sk-admin-cache-000000000';

const keys = [
  { name: 'app', key: KEY, tenant: 'acme', models: ['*'] },
  { name: 'other', key: OTHER, tenant: 'globex', models: ['*'] },
  { name: 'ops', key: ADMIN, tenant: 'acme', models: ['*'], admin: true },
];

let sim;
let deadPort;
const models = (extra = {}) => [
  { alias: 'embed', provider: 'openai', base_url: `${sim.url}/v1` },
  { alias: 'embed-ollama', provider: 'ollama', base_url: sim.url, model: 'nomic-embed-text' },
  { alias: 'embed-dead', provider: 'openai', base_url: `http://127.0.0.1:${deadPort}/v1` },
  { alias: 'gpt', provider: 'openai', base_url: `${sim.url}/v1`, cache: { semantic: { embedding: 'embed', threshold: 0.85, ...extra } } },
  { alias: 'ollama-embedded', provider: 'openai', base_url: `${sim.url}/v1`, cache: { semantic: { embedding: 'embed-ollama', threshold: 0.85 } } },
  { alias: 'simhash-only', provider: 'openai', base_url: `${sim.url}/v1`, cache: { semantic: {} } },
  { alias: 'dead', provider: 'openai', base_url: `${sim.url}/v1`, cache: { semantic: { embedding: 'embed-dead', timeout: '500ms' } } },
  { alias: 'short', provider: 'openai', base_url: `${sim.url}/v1`, cache: { ttl: '1s', semantic: { embedding: 'embed', threshold: 0.85 } } },
  { alias: 'tools-ok', provider: 'openai', base_url: `${sim.url}/v1`, cache: { semantic: { embedding: 'embed', threshold: 0.85, tools: true } } },
];

let n = 0;
// A subject per test: the questions of one test are far from every other's.
const SUBJECTS = ['France', 'Peru', 'Kenya', 'Norway', 'Chile', 'Japan', 'Egypt', 'Canada', 'Spain', 'Ghana', 'Nepal', 'Cuba'];
const subject = () => `${SUBJECTS[n % SUBJECTS.length]}${Math.floor(n++ / SUBJECTS.length) || ''}`;

const ask = (gw, content, { model = 'gpt', key = KEY, extra = {} } = {}) =>
  request(`${gw.url}/v1/chat/completions`, {
    method: 'POST',
    key,
    body: { model, temperature: 0, max_tokens: 8, messages: [{ role: 'user', content }], ...extra },
  });
const stats = async () => sim.stats();

before(async () => {
  deadPort = await closedPort();
  sim = await startSim({ ttft: '1ms', 'inter-token': '1ms' });
});
after(async () => {
  await sim?.stop();
});

describe('semantic stage, one instance', () => {
  let gw;
  before(async () => {
    gw = await startGateway({ keys, models: models() });
  });
  after(async () => {
    await gw?.stop();
  });

  test('a paraphrase is answered with the kept answer: by embedding, no generation, recorded and counted', async () => {
    const s = subject();
    const first = await ask(gw, `What is the capital of ${s}?`);
    assert.equal(first.status, 200, first.text);
    assert.equal(first.headers.get('x-sluice-cache'), 'miss');
    const before = await stats();
    const second = await ask(gw, `What is the capital city of ${s}?`);
    assert.equal(second.status, 200, second.text);
    assert.equal(second.headers.get('x-sluice-cache'), 'semantic');
    const sim2 = Number(second.headers.get('x-sluice-cache-similarity'));
    assert.ok(sim2 >= 0.85 && sim2 < 1, `similarity ${sim2}`);
    assert.equal(second.headers.get('x-sluice-cache-match'), first.headers.get('x-sluice-cache-key'));
    assert.notEqual(second.headers.get('x-sluice-cache-key'), first.headers.get('x-sluice-cache-key'));
    const after = await stats();
    assert.equal(after.requests, before.requests, 'no generation');
    assert.equal(after.embeddings, before.embeddings + 1, 'one embedding call');
    assert.equal(second.json.choices[0].message.content, first.json.choices[0].message.content);
    assert.equal(second.json.id, `chatcmpl-${second.headers.get('x-request-id')}`);
    const line = await gw.logFor(second.headers.get('x-request-id'));
    assert.equal(line.cache, 'semantic');
    assert.ok(line.saved_tokens > 0);
    assert.equal(line.prompt_tokens, 0);

    // Another question on the same subject, and another subject: generated.
    assert.equal((await ask(gw, `How do I bake bread at home in ${s}?`)).headers.get('x-sluice-cache'), 'miss');
    assert.equal((await ask(gw, `What is the capital of ${subject()}?`)).headers.get('x-sluice-cache'), 'miss');

    const m = await gw.metrics();
    assert.ok(metricValue(m, 'sluice_cache_semantic_hits_total', { stage: 'embedding' }) >= 1);
    assert.ok(metricValue(m, 'sluice_cache_embeddings_total') >= 4);
    // (Entries go into the index on its own thread.)
    await waitFor(async () => (await gw.infra()).cache.semantic.entries_here >= 3, { what: 'three prompts in the index' });
    const infra = await gw.infra();
    assert.ok(infra.cache.semantic.embedding_hits >= 1);
    assert.ok(infra.cache.semantic.bytes_here > 0);
  });

  test('the SimHash stage answers the same words differently written without an embedding call', async () => {
    const s = subject();
    assert.equal((await ask(gw, `Where is the largest river of ${s}?`, { model: 'simhash-only' })).headers.get('x-sluice-cache'), 'miss');
    const before = await stats();
    const r = await ask(gw, `where is THE largest river of ${s.toLowerCase()}`, { model: 'simhash-only' });
    assert.equal(r.headers.get('x-sluice-cache'), 'semantic');
    assert.equal(Number(r.headers.get('x-sluice-cache-similarity')), 1);
    const after = await stats();
    assert.equal(after.embeddings, before.embeddings, 'no embedding call');
    assert.equal(after.requests, before.requests);
    // Without an embedding route a paraphrase is not found; nor is a prompt one word
    // apart (a SimHash a few bits away is not the same question by default).
    assert.equal((await ask(gw, `Where is the biggest river of ${s}?`, { model: 'simhash-only' })).headers.get('x-sluice-cache'), 'miss');
    const long = `Please check whether the nightly export job for ${s} may work with the new schema, and tell me which tables it touches and in what order, since we migrate tomorrow morning and the team is waiting`;
    assert.equal((await ask(gw, long, { model: 'simhash-only' })).headers.get('x-sluice-cache'), 'miss');
    await new Promise((r) => setTimeout(r, 100));
    assert.equal((await ask(gw, long.replace('may work', 'may not work'), { model: 'simhash-only' })).headers.get('x-sluice-cache'), 'miss', '"not" matters');
    assert.ok(metricValue(await gw.metrics(), 'sluice_cache_semantic_hits_total', { stage: 'simhash' }) >= 1);
  });

  test('an Ollama embedding route serves the stage too', async () => {
    const s = subject();
    assert.equal((await ask(gw, `What is the capital of ${s}?`, { model: 'ollama-embedded' })).headers.get('x-sluice-cache'), 'miss');
    const r = await ask(gw, `What is the capital city of ${s}?`, { model: 'ollama-embedded' });
    assert.equal(r.headers.get('x-sluice-cache'), 'semantic');
  });

  test('only requests alike in everything else: another tenant, other parameters or another conversation shape miss', async () => {
    const s = subject();
    assert.equal((await ask(gw, `What is the capital of ${s}?`)).headers.get('x-sluice-cache'), 'miss');
    const para = `What is the capital city of ${s}?`;
    assert.equal((await ask(gw, para, { key: OTHER })).headers.get('x-sluice-cache'), 'miss', 'another tenant');
    assert.equal((await ask(gw, para, { extra: { max_tokens: 9 } })).headers.get('x-sluice-cache'), 'miss', 'another max_tokens');
    const shaped = await request(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      key: KEY,
      body: { model: 'gpt', temperature: 0, max_tokens: 8, messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: para }] },
    });
    assert.equal(shaped.headers.get('x-sluice-cache'), 'miss', 'a system message more');
    const named = await request(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      key: KEY,
      body: { model: 'gpt', temperature: 0, max_tokens: 8, messages: [{ role: 'user', name: 'bob', content: para }] },
    });
    assert.equal(named.headers.get('x-sluice-cache'), 'miss', 'another speaker');
    assert.equal((await ask(gw, para)).headers.get('x-sluice-cache'), 'semantic', 'the same request does hit');
  });

  test('images never, tools only where the route says: no embedding call for them', async () => {
    const s = subject();
    const image = [
      { type: 'text', text: `What is the flag of ${s}?` },
      { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=' } },
    ];
    const before = await stats();
    const r = await ask(gw, image);
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers.get('x-sluice-cache'), 'miss');
    const tools = { tools: [{ type: 'function', function: { name: 'lookup', parameters: { type: 'object', properties: {} } } }] };
    assert.equal((await ask(gw, `What is the flag of ${s}?`, { extra: tools })).headers.get('x-sluice-cache'), 'miss');
    assert.equal((await stats()).embeddings, before.embeddings, 'neither was embedded');
    assert.equal((await ask(gw, `What is the flag of ${s}?`, { model: 'tools-ok', extra: tools })).headers.get('x-sluice-cache'), 'miss');
    const hit = await ask(gw, `What is the flag of the country ${s}?`, { model: 'tools-ok', extra: tools });
    assert.equal(hit.headers.get('x-sluice-cache'), 'semantic');
  });

  test('an embedding route that fails costs the hit only: the request is answered, the failure counted', async () => {
    const s = subject();
    for (const content of [`What is the capital of ${s}?`, `What is the capital city of ${s}?`]) {
      const r = await ask(gw, content, { model: 'dead' });
      assert.equal(r.status, 200, r.text);
      assert.equal(r.headers.get('x-sluice-cache'), 'miss');
    }
    const infra = await gw.infra();
    assert.ok(infra.cache.semantic.embedding_errors >= 2, JSON.stringify(infra.cache.semantic));
    // Its SimHash stage still works (the entries were kept with their SimHash).
    assert.equal((await ask(gw, `what is the capital of ${s.toLowerCase()}`, { model: 'dead' })).headers.get('x-sluice-cache'), 'semantic');
  });

  test('a match whose answer expired is forgotten and generated again', async () => {
    const s = subject();
    assert.equal((await ask(gw, `What is the capital of ${s}?`, { model: 'short' })).headers.get('x-sluice-cache'), 'miss');
    assert.equal((await ask(gw, `What is the capital city of ${s}?`, { model: 'short' })).headers.get('x-sluice-cache'), 'semantic');
    await new Promise((r) => setTimeout(r, 1300));
    const before = (await gw.infra()).cache.semantic.stale_matches;
    const r = await ask(gw, `What is the capital city of ${s}?`, { model: 'short' });
    assert.equal(r.headers.get('x-sluice-cache'), 'miss');
    assert.equal((await gw.infra()).cache.semantic.stale_matches, before + 1);
  });

  test("an operator's drop forgets the route's prompts", async () => {
    const s = subject();
    await ask(gw, `What is the capital of ${s}?`);
    assert.equal((await ask(gw, `What is the capital city of ${s}?`)).headers.get('x-sluice-cache'), 'semantic');
    const d = await request(`${gw.url}/admin/cache?route=gpt`, { method: 'DELETE', key: ADMIN });
    assert.equal(d.status, 200, d.text);
    assert.equal((await ask(gw, `What is the capital city of ${s}?`)).headers.get('x-sluice-cache'), 'miss');
  });
});

describe('semantic stage across instances (Redis)', () => {
  let redis, a, b;
  before(async () => {
    redis = await startRedis();
    const cfg = {
      keys,
      models: models(),
      cache: { store: 'redis', local_ttl: '0ms' },
      redis: { url: redis.url, timeout: '100ms', connect_timeout: '100ms', retry_interval: '200ms' },
    };
    a = await startGateway(cfg);
    b = await startGateway(cfg);
  });
  after(async () => {
    await Promise.all([a?.stop(), b?.stop()]);
    await redis?.stop();
  });

  test("one instance's kept prompt answers another's paraphrase; junk in the stream is skipped", async () => {
    // Junk another writer left in the stream: not an entry, ignored.
    await redis.raw('XADD', 'sluice:cache:semantic', '*', 'r', 'gpt', 'p', 'nope', 'h', 'x', 's', 'zz', 'v', 'abc');
    const s = subject();
    const first = await ask(a, `What is the capital of ${s}?`);
    assert.equal(first.headers.get('x-sluice-cache'), 'miss');
    await waitFor(async () => (await b.infra()).cache.semantic.entries_here >= 1, { what: 'the entry learnt by the other instance' });
    const before = await stats();
    const r = await ask(b, `What is the capital city of ${s}?`);
    assert.equal(r.headers.get('x-sluice-cache'), 'semantic');
    assert.equal(r.headers.get('x-sluice-cache-match'), first.headers.get('x-sluice-cache-key'));
    assert.equal((await stats()).requests, before.requests);
    // A new instance learns what the fleet kept.
    const c = await startGateway({
      keys,
      models: models(),
      cache: { store: 'redis', local_ttl: '0ms' },
      redis: { url: redis.url, timeout: '100ms', connect_timeout: '100ms', retry_interval: '200ms' },
    });
    try {
      await waitFor(async () => (await c.infra()).cache.semantic.entries_here >= 1, { what: 'a new instance warmed up' });
      assert.equal((await ask(c, `what is the capital city of ${s.toLowerCase()}`)).headers.get('x-sluice-cache'), 'semantic');
    } finally {
      await c.stop();
    }
  });
});
