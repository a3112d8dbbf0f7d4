// The response cache (src/filters/cache.cpp, docs/cache.md): a route with `cache` answers a
// request it has seen from the cache, whole or streamed, in the client's API, without an
// upstream call and without charging tokens; per tenant unless the route shares; only
// deterministic requests unless the route takes any; Cache-Control opts out; errors are
// never kept; Redis shares it across instances and its outage only costs hits; operators
// list and drop entries through /admin/cache.
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';

import { assembled, delay, KEY, metricValue, rawRequest, request, sse, startGateway, startRecorder, startRedis, startSim, waitFor } from './lib.mjs';

const OTHER = 'sk-other-tenant-00000000';
const ADMIN = 'sk-admin-cache-000000000';

let sim;

const keys = [
  { name: 'app', key: KEY, tenant: 'acme', models: ['*'] },
  { name: 'other', key: OTHER, tenant: 'globex', models: ['*'] },
  { name: 'ops', key: ADMIN, tenant: 'acme', models: ['*'], admin: true },
];

const models = () => [
  { alias: 'gpt', provider: 'openai', base_url: `${sim.url}/v1`, cache: {} },
  { alias: 'shared', provider: 'openai', base_url: `${sim.url}/v1`, cache: { shared: true } },
  { alias: 'any', provider: 'openai', base_url: `${sim.url}/v1`, cache: { any_temperature: true } },
  { alias: 'claude', provider: 'anthropic', base_url: sim.url, model: 'claude-x', cache: {} },
  { alias: 'plain', provider: 'openai', base_url: `${sim.url}/v1` },
];

let counter = 0;
// A fresh prompt per test: entries of one test never answer another's.
const prompt = () => `Tell me something, number ${++counter} at ${Date.now()}.`;

const chat = (gw, body, { key = KEY, headers = {} } = {}) =>
  request(`${gw.url}/v1/chat/completions`, { method: 'POST', key, headers, body: { max_tokens: 8, ...body } });

const upstreamCalls = async () => (await sim.stats()).requests;

before(async () => {
  sim = await startSim({ ttft: '1ms', 'inter-token': '1ms' });
});
after(async () => {
  await sim?.stop();
});

describe('response cache, in memory', () => {
  let gw;
  before(async () => {
    gw = await startGateway({ keys, models: models(), rate_limits: { backend: 'memory', tokens: [{ scope: 'key', key: 'app', limit: 1000000, per: 'day' }] } });
  });
  after(async () => {
    await gw?.stop();
  });

  test('a repeated deterministic request is answered from the cache: same answer, its own id, no upstream call, no tokens charged', async () => {
    const body = { model: 'gpt', temperature: 0, messages: [{ role: 'user', content: prompt() }] };
    const first = await chat(gw, body);
    assert.equal(first.status, 200, first.text);
    assert.equal(first.headers.get('x-sluice-cache'), 'miss');
    const key = first.headers.get('x-sluice-cache-key');
    assert.match(key, /^[0-9a-f]{64}$/);
    const calls = await upstreamCalls();

    const second = await chat(gw, body);
    assert.equal(second.status, 200, second.text);
    assert.equal(second.headers.get('x-sluice-cache'), 'hit');
    assert.equal(second.headers.get('x-sluice-cache-key'), key);
    assert.ok(Number(second.headers.get('age')) >= 0);
    assert.equal(await upstreamCalls(), calls, 'no upstream call for the hit');
    assert.equal(second.json.choices[0].message.content, first.json.choices[0].message.content);
    assert.deepEqual(second.json.usage, first.json.usage, 'the usage of the answer as generated');
    assert.notEqual(second.json.id, first.json.id, 'each answer its own id');
    assert.equal(second.json.id, `chatcmpl-${second.headers.get('x-request-id')}`);

    const missLine = await gw.logFor(first.headers.get('x-request-id'));
    const hitLine = await gw.logFor(second.headers.get('x-request-id'));
    assert.equal(missLine.cache, 'miss');
    assert.ok(missLine.prompt_tokens > 0 && missLine.completion_tokens > 0);
    assert.equal(hitLine.cache, 'hit');
    assert.equal(hitLine.prompt_tokens, 0, 'a hit charges nothing');
    assert.equal(hitLine.completion_tokens, 0);
    assert.equal(hitLine.saved_tokens, missLine.prompt_tokens + missLine.completion_tokens);
  });

  test('the key ignores how the answer is delivered and who asks: stream, user, key order', async () => {
    const text = prompt();
    const first = await chat(gw, { model: 'gpt', seed: 7, messages: [{ role: 'user', content: text }], user: 'alice' });
    assert.equal(first.headers.get('x-sluice-cache'), 'miss');
    const calls = await upstreamCalls();
    // Same request, fields in another order, another user, streamed.
    const r = await sse(`${gw.url}/v1/chat/completions`, {
      messages: [{ content: text, role: 'user' }],
      user: 'bob',
      max_tokens: 8,
      stream: true,
      stream_options: { include_usage: true },
      seed: 7,
      model: 'gpt',
    });
    assert.equal(r.status, 200);
    assert.equal(r.headers.get('x-sluice-cache'), 'hit');
    assert.equal(assembled(r.events), first.json.choices[0].message.content, 'the stream replays the answer');
    const usage = r.events.map((e) => e.json).find((j) => j?.usage)?.usage;
    assert.deepEqual(usage, first.json.usage);
    assert.equal(r.events.at(-1).data, '[DONE]');
    assert.equal(await upstreamCalls(), calls);
    // Another seed is another request.
    const other = await chat(gw, { model: 'gpt', seed: 8, messages: [{ role: 'user', content: text }] });
    assert.equal(other.headers.get('x-sluice-cache'), 'miss');
  });

  test('a streamed answer is kept whole and served to a non-streamed request', async () => {
    const text = prompt();
    const r = await sse(`${gw.url}/v1/chat/completions`, { model: 'gpt', temperature: 0, max_tokens: 8, stream: true, messages: [{ role: 'user', content: text }] });
    assert.equal(r.status, 200);
    assert.equal(r.headers.get('x-sluice-cache'), 'miss');
    const streamed = assembled(r.events);
    assert.ok(streamed.length > 0);
    await delay(100);  // (the answer is kept as the request ends, just after the client read [DONE])
    const calls = await upstreamCalls();
    const whole = await chat(gw, { model: 'gpt', temperature: 0, messages: [{ role: 'user', content: text }] });
    assert.equal(whole.headers.get('x-sluice-cache'), 'hit', 'the first non-streamed request is a hit');
    assert.equal(await upstreamCalls(), calls);
    assert.equal(whole.json.choices[0].message.content, streamed);
    assert.equal(whole.json.choices[0].finish_reason, 'length');
    assert.equal(whole.json.object, 'chat.completion');
  });

  test('tool calls are kept and replayed, whole and streamed', async () => {
    const body = {
      model: 'gpt',
      temperature: 0,
      messages: [{ role: 'user', content: prompt() }],
      tools: [{ type: 'function', function: { name: 'lookup', parameters: { type: 'object', properties: { id: { type: 'string' } } } } }],
      tool_choice: 'required',
      max_tokens: 64,
    };
    const first = await chat(gw, body);
    assert.equal(first.status, 200, first.text);
    const call = first.json.choices[0].message.tool_calls[0];
    assert.equal(call.function.name, 'lookup');
    const whole = await chat(gw, body);
    assert.equal(whole.headers.get('x-sluice-cache'), 'hit');
    assert.deepEqual(whole.json.choices[0].message.tool_calls, first.json.choices[0].message.tool_calls);
    assert.equal(whole.json.choices[0].finish_reason, 'tool_calls');
    const r = await sse(`${gw.url}/v1/chat/completions`, { ...body, stream: true });
    assert.equal(r.headers.get('x-sluice-cache'), 'hit');
    const calls = r.events.flatMap((e) => e.json?.choices?.[0]?.delta?.tool_calls ?? []);
    assert.equal(calls[0].function.name, 'lookup');
    assert.equal(calls.map((c) => c.function.arguments ?? '').join(''), call.function.arguments);
    assert.equal(r.events.map((e) => e.json?.choices?.[0]?.finish_reason).find(Boolean), 'tool_calls');
  });

  test('requests that are not deterministic bypass the cache, unless the route takes any', async () => {
    const body = { model: 'gpt', messages: [{ role: 'user', content: prompt() }] };
    const a = await chat(gw, body);
    const b = await chat(gw, body);
    assert.equal(a.headers.get('x-sluice-cache'), 'bypass');
    assert.equal(b.headers.get('x-sluice-cache'), 'bypass');
    assert.equal((await gw.logFor(b.headers.get('x-request-id'))).cache, 'bypass');
    const anyBody = { model: 'any', temperature: 0.9, messages: [{ role: 'user', content: prompt() }] };
    assert.equal((await chat(gw, anyBody)).headers.get('x-sluice-cache'), 'miss');
    assert.equal((await chat(gw, anyBody)).headers.get('x-sluice-cache'), 'hit');
    // A route without cache says nothing.
    const plain = await chat(gw, { model: 'plain', temperature: 0, messages: [{ role: 'user', content: prompt() }] });
    assert.equal(plain.headers.get('x-sluice-cache'), null);
    assert.equal((await gw.logFor(plain.headers.get('x-request-id'))).cache, undefined);
  });

  test('entries are per tenant unless the route shares them', async () => {
    const body = { model: 'gpt', temperature: 0, messages: [{ role: 'user', content: prompt() }] };
    assert.equal((await chat(gw, body)).headers.get('x-sluice-cache'), 'miss');
    const other = await chat(gw, body, { key: OTHER });
    assert.equal(other.headers.get('x-sluice-cache'), 'miss', 'another tenant never sees acme\'s answer');
    const sharedBody = { ...body, model: 'shared' };
    assert.equal((await chat(gw, sharedBody)).headers.get('x-sluice-cache'), 'miss');
    assert.equal((await chat(gw, sharedBody, { key: OTHER })).headers.get('x-sluice-cache'), 'hit');
  });

  test('Cache-Control: no-cache asks the upstream again and keeps the new answer; no-store skips the cache', async () => {
    const body = { model: 'gpt', temperature: 0, messages: [{ role: 'user', content: prompt() }] };
    await chat(gw, body);
    let calls = await upstreamCalls();
    const fresh = await chat(gw, body, { headers: { 'cache-control': 'no-cache' } });
    assert.equal(fresh.headers.get('x-sluice-cache'), 'refresh');
    assert.equal(await upstreamCalls(), calls + 1);
    calls += 1;
    const none = await chat(gw, body, { headers: { 'Cache-Control': 'max-age=0, no-store' } });
    assert.equal(none.headers.get('x-sluice-cache'), 'bypass');
    assert.equal(await upstreamCalls(), calls + 1);
    assert.equal((await chat(gw, body)).headers.get('x-sluice-cache'), 'hit');
  });

  test('failed answers are never kept', async () => {
    const body = { model: 'gpt', temperature: 0, messages: [{ role: 'user', content: prompt() }] };
    await sim.configure({ error_rate_500: 1 });
    try {
      const r = await chat(gw, body);
      assert.ok(r.status >= 500, r.text);
    } finally {
      await sim.configure({ error_rate_500: 0 });
    }
    const again = await chat(gw, body);
    assert.equal(again.status, 200);
    assert.equal(again.headers.get('x-sluice-cache'), 'miss');
    // A stream the client left before the end is not kept either. (Long enough that the
    // client leaves while it is generated: an answer that was whole when the gateway saw
    // the client go is kept, the answer being good.)
    const text = prompt();
    const cut = await sse(`${gw.url}/v1/chat/completions`, { model: 'gpt', temperature: 0, max_tokens: 600, stream: true, messages: [{ role: 'user', content: text }] }, { stopAfter: (ev) => ev.length >= 2 });
    assert.ok(cut.aborted);
    await delay(200);
    const after = await chat(gw, { model: 'gpt', temperature: 0, max_tokens: 600, messages: [{ role: 'user', content: text }] });
    assert.equal(after.headers.get('x-sluice-cache'), 'miss');
  });

  test('an Anthropic Messages client gets its own shapes from the cache, whole and streamed', async () => {
    const body = { model: 'claude', max_tokens: 8, temperature: 0, messages: [{ role: 'user', content: prompt() }] };
    const headers = { 'anthropic-version': '2023-06-01' };
    const first = await request(`${gw.url}/v1/messages`, { method: 'POST', key: KEY, headers, body });
    assert.equal(first.status, 200, first.text);
    assert.equal(first.headers.get('x-sluice-cache'), 'miss');
    const hit = await request(`${gw.url}/v1/messages`, { method: 'POST', key: KEY, headers, body });
    assert.equal(hit.headers.get('x-sluice-cache'), 'hit');
    assert.equal(hit.json.type, 'message');
    assert.deepEqual(hit.json.content, first.json.content);
    assert.deepEqual(hit.json.usage.output_tokens, first.json.usage.output_tokens);
    const r = await sse(`${gw.url}/v1/messages`, { ...body, stream: true }, { headers });
    assert.equal(r.headers.get('x-sluice-cache'), 'hit');
    const text = r.events.filter((e) => e.json?.type === 'content_block_delta').map((e) => e.json.delta.text).join('');
    assert.equal(text, first.json.content[0].text);
    assert.equal(r.events.at(-1).json.type, 'message_stop');
  });

  test('a client that asks again the moment its answer ends finds it kept, whole and streamed', async () => {
    // Two connections opened beforehand: the repeat goes out on the second the moment the
    // first's last byte arrives (the answer is kept before that byte is written).
    const open = () =>
      new Promise((resolve, reject) => {
        const s = net.connect(gw.port, '127.0.0.1', () => resolve(s));
        s.on('error', reject);
      });
    // One request on socket s; resolves with the head's lines when its answer is whole
    // (Content-Length read, or the chunked body's end).
    const ask = (s, body) =>
      new Promise((resolve, reject) => {
        let buf = Buffer.alloc(0);
        const onData = (d) => {
          buf = Buffer.concat([buf, d]);
          const text = buf.toString('latin1');
          const headEnd = text.indexOf('\r\n\r\n');
          if (headEnd < 0) return;
          const head = text.slice(0, headEnd).toLowerCase();
          const len = /content-length: (\d+)/.exec(head);
          const whole = len ? buf.length >= headEnd + 4 + Number(len[1]) : text.endsWith('\r\n0\r\n\r\n');
          if (!whole) return;
          s.off('data', onData);
          s.off('error', reject);
          resolve(head);
        };
        s.on('data', onData);
        s.on('error', reject);
        const payload = JSON.stringify(body);
        s.write(
          `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\n` +
            `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(payload)}\r\n\r\n${payload}`,
        );
      });
    const a = await open();
    const b = await open();
    try {
      let misses = 0;
      for (let i = 0; i < 200; ++i) {
        const body = { model: 'gpt', temperature: 0, max_tokens: 4, stream: i % 2 === 1, messages: [{ role: 'user', content: prompt() }] };
        const first = await ask(a, body);
        assert.match(first, /x-sluice-cache: miss/);
        const again = await ask(b, body);
        if (!/x-sluice-cache: hit/.test(again)) ++misses;
      }
      assert.equal(misses, 0, 'every repeat is a hit');
    } finally {
      a.destroy();
      b.destroy();
    }
  });

  test('operators list and drop entries; metrics and /infra count', async () => {
    const body = { model: 'gpt', temperature: 0, messages: [{ role: 'user', content: prompt() }] };
    const first = await chat(gw, body);
    const key = first.headers.get('x-sluice-cache-key');
    const admin = (method, qs, k = ADMIN) => request(`${gw.url}/admin/cache${qs}`, { method, key: k });
    const listed = await admin('GET', '?route=gpt&limit=1000');
    assert.equal(listed.status, 200, listed.text);
    const entry = listed.json.data.find((e) => e.key === key);
    assert.ok(entry, 'the entry is listed');
    assert.equal(entry.route, 'gpt');
    assert.ok(entry.bytes > 0 && entry.tokens > 0 && entry.ttl_ms > 0);
    assert.equal((await admin('GET', '', KEY)).status, 403, 'only an admin key');
    assert.equal((await admin('DELETE', '')).status, 400, 'a drop says what');
    assert.equal((await admin('DELETE', '?key=xyz')).status, 400);
    assert.equal((await admin('DELETE', '?all=yes')).status, 400);
    assert.equal((await admin('GET', '?limit=0')).status, 400);
    assert.equal((await admin('GET', '?bogus=1')).status, 400);
    const dropped = await admin('DELETE', `?key=${key}`);
    assert.equal(dropped.status, 200, dropped.text);
    assert.equal(dropped.json.dropped, 1);
    assert.equal((await chat(gw, body)).headers.get('x-sluice-cache'), 'miss', 'dropped: asked again');
    assert.equal((await chat(gw, body)).headers.get('x-sluice-cache'), 'hit');
    const byRoute = await admin('DELETE', '?route=gpt');
    assert.ok(byRoute.json.dropped >= 1);
    assert.equal((await chat(gw, body)).headers.get('x-sluice-cache'), 'miss');
    // The admin listener needs no key.
    const r = await rawRequest({ port: gw.adminPort, method: 'DELETE', path: '/admin/cache?all=true' });
    assert.equal(r.status, 200, r.body);
    assert.ok(JSON.parse(r.body).dropped >= 1);
    assert.equal((await admin('GET', '')).json.data.length, 0);

    const infra = await gw.infra();
    assert.equal(infra.cache.store, 'memory');
    assert.ok(infra.cache.hits > 0 && infra.cache.misses > 0 && infra.cache.tokens_saved > 0);
    const m = await gw.metrics();
    assert.ok(metricValue(m, 'sluice_cache_hits_total') >= infra.cache.hits);
    assert.ok(metricValue(m, 'sluice_cache_tokens_saved_total') > 0);
  });
});

describe('response cache in Redis, across instances', () => {
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

  test('an answer kept by one instance is served by another', async () => {
    const body = { model: 'gpt', temperature: 0, messages: [{ role: 'user', content: prompt() }] };
    const first = await chat(a, body);
    assert.equal(first.headers.get('x-sluice-cache'), 'miss');
    await waitFor(async () => (await redis.raw('DBSIZE')) !== '0', { what: 'the entry in Redis' });
    const calls = await upstreamCalls();
    const second = await chat(b, body);
    assert.equal(second.headers.get('x-sluice-cache'), 'hit');
    assert.equal(second.json.choices[0].message.content, first.json.choices[0].message.content);
    assert.equal(await upstreamCalls(), calls);
    assert.equal((await b.infra()).cache.redis_up, true);
    // A drop through one instance reaches the other (local_ttl 0: it asks Redis).
    const d = await request(`${b.url}/admin/cache?key=${first.headers.get('x-sluice-cache-key')}`, { method: 'DELETE', key: ADMIN });
    assert.equal(d.json.dropped, 1);
    assert.equal((await chat(a, body)).headers.get('x-sluice-cache'), 'miss');
    const listed = await request(`${a.url}/admin/cache`, { key: ADMIN });
    assert.ok(listed.json.data.some((e) => e.key === first.headers.get('x-sluice-cache-key')), 'listed from Redis');
  });

  test('a value in Redis that is not a whole answer is a miss and is replaced', async () => {
    const body = { model: 'gpt', temperature: 0, messages: [{ role: 'user', content: prompt() }] };
    const first = await chat(a, body);
    const key = `sluice:cache:gpt:${first.headers.get('x-sluice-cache-key')}`;
    for (const junk of ['c1:1:2:3:{"error":{"message":"boom"}}', 'c1:9223372036854775807:1:-5:not json', 'garbage']) {
      await redis.raw('SET', key, junk);
      const r = await chat(b, body);
      assert.equal(r.status, 200, r.text);
      assert.equal(r.headers.get('x-sluice-cache'), 'miss', junk);
      await waitFor(async () => (await redis.raw('GET', key)).startsWith('c1:') && (await redis.raw('GET', key)).includes('chat.completion'), {
        what: 'the junk replaced by the answer',
      });
    }
    assert.equal((await chat(a, body)).headers.get('x-sluice-cache'), 'hit');
  });

  test('while Redis is unreachable requests still succeed (as misses), /infra says so, and it recovers', async () => {
    const body = { model: 'gpt', temperature: 0, messages: [{ role: 'user', content: prompt() }] };
    process.kill(redis.proc.pid, 'SIGSTOP');
    try {
      for (let i = 0; i < 3; i++) {
        const r = await chat(a, body);
        assert.equal(r.status, 200, r.text);
        assert.notEqual(r.headers.get('x-sluice-cache'), 'hit');
      }
      await waitFor(async () => (await a.infra()).cache.redis_up === false, { what: 'redis_up false' });
      const d = await request(`${a.url}/admin/cache?all=true`, { method: 'DELETE', key: ADMIN });
      assert.equal(d.status, 503, d.text);
      assert.equal(d.json.error.code, 'store_unavailable');
    } finally {
      process.kill(redis.proc.pid, 'SIGCONT');
    }
    await waitFor(async () => (await a.infra()).cache.redis_up === true, { timeout: 10000, what: 'redis_up again' });
    assert.equal((await chat(a, body)).headers.get('x-sluice-cache'), 'miss');
    await waitFor(async () => (await chat(b, body)).headers.get('x-sluice-cache') === 'hit', { what: 'a hit on the other instance' });
  });
});

// What an upstream answers that is not a whole answer is never kept (review findings: a
// 200 with an error body, a stream with no finish reason or with vLLM's error object, an
// answer from a fallback); what is kept keeps its usage.
describe('response cache: only whole answers of the route itself', () => {
  let up, gw;
  const calls = () => up.requests.length;
  before(async () => {
    up = await startRecorder((req, res, json) => {
      const text = JSON.stringify(json?.messages ?? '');
      const sseHead = () => res.writeHead(200, { 'content-type': 'text/event-stream' });
      const chunk = (choices, extra = {}) => `data: ${JSON.stringify({ id: 'c-1', object: 'chat.completion.chunk', created: 1, model: 'm', choices, ...extra })}\n\n`;
      if (text.includes('MODE:err200')) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: { message: 'boom' } }));
        return true;
      }
      if (text.includes('MODE:nofinish')) {
        sseHead();
        res.write(chunk([{ index: 0, delta: { role: 'assistant', content: 'partial ' }, finish_reason: null }]));
        res.end('data: [DONE]\n\n');
        return true;
      }
      if (text.includes('MODE:vllmerr')) {
        sseHead();
        res.write(chunk([{ index: 0, delta: { role: 'assistant', content: 'partial ' }, finish_reason: null }]));
        res.write(`data: ${JSON.stringify({ object: 'error', message: 'CUDA out of memory', code: 500 })}\n\n`);
        res.end('data: [DONE]\n\n');
        return true;
      }
      if (text.includes('MODE:down') && req.url.startsWith('/primary')) {
        res.writeHead(500, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: { message: 'down' } }));
        return true;
      }
      return false; // "hello", with the usage below
    });
    gw = await startGateway({
      keys,
      models: [
        { alias: 'rec', provider: 'openai', base_url: `${up.url}/v1`, cache: {} },
        { alias: 'primary', provider: 'openai', base_url: `${up.url}/primary`, fallbacks: ['cheap'], cache: {} },
        { alias: 'cheap', provider: 'openai', base_url: `${up.url}/cheap`, model: 'cheap-model' },
      ],
    });
  });
  after(async () => {
    await gw?.stop();
    await up?.close();
  });

  const ask = (content, extra = {}) => chat(gw, { model: 'rec', temperature: 0, messages: [{ role: 'user', content }], ...extra });

  test('a 200 that is not a completion is not kept', async () => {
    const m = `MODE:err200 ${prompt()}`;
    await ask(m);
    const n = calls();
    const again = await ask(m);
    assert.notEqual(again.headers.get('x-sluice-cache'), 'hit');
    assert.equal(calls(), n + 1);
  });

  test('streams without a finish reason, or with an error object, are not kept', async () => {
    for (const mode of ['nofinish', 'vllmerr']) {
      const m = `MODE:${mode} ${prompt()}`;
      await sse(`${gw.url}/v1/chat/completions`, { model: 'rec', temperature: 0, max_tokens: 8, stream: true, messages: [{ role: 'user', content: m }] });
      await delay(50);
      const n = calls();
      const again = await ask(m);
      assert.notEqual(again.headers.get('x-sluice-cache'), 'hit', mode);
      assert.equal(calls(), n + 1, mode);
    }
  });

  test('an answer from a fallback is not kept under the route', async () => {
    const m = `MODE:down ${prompt()}`;
    const first = await chat(gw, { model: 'primary', temperature: 0, messages: [{ role: 'user', content: m }] });
    assert.equal(first.status, 200, first.text);
    assert.equal((await gw.logFor(first.headers.get('x-request-id'))).served_by, 'cheap');
    const again = await chat(gw, { model: 'primary', temperature: 0, messages: [{ role: 'user', content: m }] });
    assert.notEqual(again.headers.get('x-sluice-cache'), 'hit');
  });

  test('a stream kept without the usage chunk keeps its usage; Cache-Control on two lines counts', async () => {
    const m = prompt();
    const r = await sse(`${gw.url}/v1/chat/completions`, { model: 'rec', temperature: 0, max_tokens: 8, stream: true, messages: [{ role: 'user', content: m }] });
    assert.equal(r.status, 200);
    assert.ok(!r.events.some((e) => e.json?.usage), 'the client did not ask for usage');
    await delay(50);
    const hit = await ask(m);
    assert.equal(hit.headers.get('x-sluice-cache'), 'hit');
    assert.ok(hit.json.usage && hit.json.usage.completion_tokens > 0, JSON.stringify(hit.json));
    const res = await rawRequest({
      port: gw.port,
      method: 'POST',
      path: '/v1/chat/completions',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', 'cache-control': ['max-age=0', 'no-store'] },
      body: JSON.stringify({ model: 'rec', temperature: 0, max_tokens: 8, messages: [{ role: 'user', content: m }] }),
    });
    assert.equal(res.status, 200, res.body);
    assert.equal(res.headers['x-sluice-cache'], 'bypass');
  });
});
