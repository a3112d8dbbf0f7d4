// POST /v1/responses through the gateway, translated to chat completions: the official
// openai SDK (whole and streamed, function tools), the Vercel AI SDK (its default
// `openai(model)` speaks the Responses API), stored responses continued with
// previous_response_id, read back and deleted, per tenant; every body and event checked
// against OpenAI's schemas.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, streamText } from 'ai';

import { KEY, request, simText, startGateway, startPostgres, startRecorder, startRedis, waitFor } from './lib.mjs';
import { assertValid } from './openai_schema.mjs';

const OTHER = 'sk-other-tenant-5555666677778888';
let gw;
let upstream;

// An OpenAI-compatible upstream that calls the tool `weather` when tools are offered and
// the last message is the user's; else it answers with text.
function toolUpstream(req, res, json) {
  const last = json?.messages?.at(-1);
  const call = json?.tools?.length && last?.role === 'user';
  const usage = { prompt_tokens: 11, completion_tokens: 4, total_tokens: 15 };
  const message = call
    ? { role: 'assistant', content: null, tool_calls: [{ id: 'call_w1', type: 'function', function: { name: 'weather', arguments: '{"city":"Paris"}' } }] }
    : { role: 'assistant', content: 'It is sunny.' };
  const finish = call ? 'tool_calls' : 'stop';
  if (!json?.stream) {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ id: 'chatcmpl-t', object: 'chat.completion', created: 1, model: json.model, choices: [{ index: 0, message, finish_reason: finish, logprobs: null }], usage }));
    return true;
  }
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  const chunk = (delta, finish_reason = null, extra = {}) =>
    res.write(`data: ${JSON.stringify({ id: 'chatcmpl-t', object: 'chat.completion.chunk', created: 1, model: json.model, choices: [{ index: 0, delta, finish_reason }], ...extra })}\n\n`);
  if (call) {
    chunk({ role: 'assistant', tool_calls: [{ index: 0, id: 'call_w1', type: 'function', function: { name: 'weather', arguments: '' } }] });
    chunk({ tool_calls: [{ index: 0, function: { arguments: '{"city":' } }] });
    chunk({ tool_calls: [{ index: 0, function: { arguments: '"Paris"}' } }] });
  } else {
    chunk({ role: 'assistant', content: 'It is ' });
    chunk({ content: 'sunny.' });
  }
  chunk({}, finish);
  res.write(`data: ${JSON.stringify({ id: 'chatcmpl-t', object: 'chat.completion.chunk', created: 1, model: json.model, choices: [], usage })}\n\n`);
  res.end('data: [DONE]\n\n');
  return true;
}

before(async () => {
  upstream = await startRecorder(toolUpstream);
  gw = await startGateway({
    instance: 'it-responses',
    keys: [
      { name: 'app', key: KEY, tenant: 'acme' },
      { name: 'other', key: OTHER, tenant: 'globex' },
    ],
    models: [
      { alias: 'demo', provider: 'simulated', sim: { ttft: '1ms', inter_token: '1ms', jitter: 0 } },
      { alias: 'slow', provider: 'simulated', sim: { ttft: '1ms', inter_token: '100ms', jitter: 0 } },
      { alias: 'tools', provider: 'openai', base_url: `${upstream.url}/v1`, model: 'real-model' },
    ],
  });
});

after(async () => {
  await Promise.all([gw?.stop(), upstream?.close()]);
});

const client = (apiKey = KEY) => new OpenAI({ apiKey, baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 15000 });

// The upstream's requests from `from` on.
const sentSince = (from) => upstream.requests.slice(from).map((r) => r.json);

describe('responses: the openai SDK', () => {
  test('a whole response: output_text, usage, instructions echoed; a Response by the schema', async () => {
    const r = await client().responses.create({ model: 'demo', input: 'Say something.', instructions: 'Be brief.', max_output_tokens: 6 });
    assertValid('Response', r, 'response');
    assert.match(r.id, /^resp_/);
    assert.equal(r.object, 'response');
    assert.equal(r.output_text, simText(6));
    assert.equal(r.status, 'incomplete');  // it stopped at max_output_tokens
    assert.deepEqual(r.incomplete_details, { reason: 'max_output_tokens' });
    assert.equal(r.instructions, 'Be brief.');
    assert.equal(r.usage.output_tokens, 6);
    assert.equal(r.usage.total_tokens, r.usage.input_tokens + 6);
  });

  test('a stream: created, in_progress, the text deltas, completed; every event by the schema', async () => {
    const stream = await client().responses.create({ model: 'demo', input: 'Count.', stream: true, max_output_tokens: 4 });
    const events = [];
    for await (const e of stream) events.push(e);
    for (const e of events) assertValid('ResponseStreamEvent', e, e.type);
    assert.deepEqual(events.map((e) => e.sequence_number), events.map((_, i) => i));
    assert.equal(events[0].type, 'response.created');
    assert.equal(events[1].type, 'response.in_progress');
    const deltas = events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta);
    assert.equal(deltas.join(''), simText(4));
    const last = events.at(-1);
    assert.equal(last.type, 'response.incomplete');
    assert.equal(last.response.output[0].content[0].text, simText(4));
    assert.equal(last.response.usage.output_tokens, 4);
  });

  test('function tools: a function_call item, whole and streamed; its output continues the conversation', async () => {
    const tools = [{ type: 'function', name: 'weather', description: 'Weather of a city', parameters: { type: 'object', properties: { city: { type: 'string' } } }, strict: false }];
    const n = upstream.requests.length;
    const first = await client().responses.create({ model: 'tools', input: 'Weather in Paris?', tools });
    assertValid('Response', first, 'tool call');
    const call = first.output.find((o) => o.type === 'function_call');
    assert.equal(call.name, 'weather');
    assert.equal(call.call_id, 'call_w1');
    assert.equal(call.arguments, '{"city":"Paris"}');
    const sent = sentSince(n)[0];
    assert.deepEqual(sent.tools, [{ type: 'function', function: { name: 'weather', description: 'Weather of a city', parameters: tools[0].parameters, strict: false } }]);
    assert.equal(sent.model, 'real-model');

    const second = await client().responses.create({
      model: 'tools',
      previous_response_id: first.id,
      input: [{ type: 'function_call_output', call_id: 'call_w1', output: 'sunny, 24C' }],
      tools,
    });
    assert.equal(second.output_text, 'It is sunny.');
    assert.equal(second.previous_response_id, first.id);
    const cont = sentSince(n)[1];
    assert.deepEqual(
      cont.messages.map((m) => m.role),
      ['user', 'assistant', 'tool'],
    );
    assert.equal(cont.messages[1].tool_calls[0].id, 'call_w1');
    assert.equal(cont.messages[2].tool_call_id, 'call_w1');
    assert.equal(cont.messages[2].content, 'sunny, 24C');

    const stream = await client().responses.create({ model: 'tools', input: 'Weather in Paris?', tools, stream: true });
    const events = [];
    for await (const e of stream) events.push(e);
    for (const e of events) assertValid('ResponseStreamEvent', e, e.type);
    const args = events.filter((e) => e.type === 'response.function_call_arguments.delta').map((e) => e.delta).join('');
    assert.equal(args, '{"city":"Paris"}');
    const done = events.at(-1);
    assert.equal(done.type, 'response.completed');
    assert.equal(done.response.output[0].type, 'function_call');
    assert.equal(done.response.output[0].arguments, '{"city":"Paris"}');
  });
});

describe('responses: stored conversations', () => {
  test('previous_response_id continues the conversation; the earlier instructions do not carry over', async () => {
    const n = upstream.requests.length;
    const one = await client().responses.create({ model: 'tools', input: 'Hello.', instructions: 'Answer in French.' });
    const two = await client().responses.create({ model: 'tools', input: 'And again?', previous_response_id: one.id, instructions: 'Answer in German.' });
    assert.equal(two.previous_response_id, one.id);
    const [a, b] = sentSince(n);
    assert.deepEqual(a.messages, [
      { role: 'system', content: 'Answer in French.' },
      { role: 'user', content: 'Hello.' },
    ]);
    assert.deepEqual(b.messages, [
      { role: 'system', content: 'Answer in German.' },
      { role: 'user', content: 'Hello.' },
      { role: 'assistant', content: 'It is sunny.' },
      { role: 'user', content: 'And again?' },
    ]);
    // Its input items are its own input, not the conversation it continued.
    const items = await client().responses.inputItems.list(two.id);
    assert.deepEqual(items.data.map((i) => i.content), [[{ type: 'input_text', text: 'And again?' }]]);
  });

  test('a stored response is read back, its input items listed, then deleted; another tenant never sees it', async () => {
    const r = await client().responses.create({ model: 'demo', input: 'Keep this.', max_output_tokens: 2 });
    const got = await client().responses.retrieve(r.id);
    assert.deepEqual(got, r);
    const items = await client().responses.inputItems.list(r.id);
    assert.equal(items.data.length, 1);
    assert.equal(items.data[0].role, 'user');
    assert.deepEqual(items.data[0].content, [{ type: 'input_text', text: 'Keep this.' }]);
    await assert.rejects(client(OTHER).responses.retrieve(r.id), (e) => e instanceof OpenAI.NotFoundError);
    await assert.rejects(
      client(OTHER).responses.create({ model: 'demo', input: 'x', previous_response_id: r.id }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'previous_response_id',
    );
    await client().responses.delete(r.id);
    await assert.rejects(client().responses.retrieve(r.id), (e) => e instanceof OpenAI.NotFoundError);
  });

  test('store: false keeps nothing', async () => {
    const r = await client().responses.create({ model: 'demo', input: 'Forget this.', store: false, max_output_tokens: 2 });
    assert.equal(r.store, false);
    await assert.rejects(client().responses.retrieve(r.id), (e) => e instanceof OpenAI.NotFoundError);
  });

  test('a streamed response is stored too', async () => {
    const stream = await client().responses.create({ model: 'demo', input: 'Stream and keep.', stream: true, max_output_tokens: 3 });
    let id;
    for await (const e of stream) if (e.type === 'response.created') id = e.response.id;
    const got = await client().responses.retrieve(id);
    assert.equal(got.output[0].content[0].text, simText(3));
  });
});

describe('responses: a client that leaves mid-stream', () => {
  test('the stream is released (no open stream, nothing in flight) and nothing is stored', async () => {
    const ac = new AbortController();
    const res = await fetch(`${gw.url}/v1/responses`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'slow', input: 'Take your time.', stream: true, max_output_tokens: 200 }),
      signal: ac.signal,
    });
    assert.equal(res.status, 200);
    const reader = res.body.getReader();
    let text = '';
    while (!text.includes('response.output_text.delta')) text += new TextDecoder().decode((await reader.read()).value);
    const id = /"id":"(resp_[0-9a-f]+)"/.exec(text)[1];
    ac.abort();
    await waitFor(async () => (await gw.metric('sluice_streams_open')) === 0 && (await gw.metric('sluice_requests_in_flight')) === 0, {
      what: 'the stream released',
    });
    const line = await gw.logFor(res.headers.get('x-request-id'));
    assert.equal(line.status, 499);
    await assert.rejects(client().responses.retrieve(id), (e) => e instanceof OpenAI.NotFoundError);
  });
});

describe('responses: refused', () => {
  const post = (body) => request(`${gw.url}/v1/responses`, { method: 'POST', key: KEY, body });
  test('what the gateway cannot honour is a 400 naming the field', async () => {
    for (const [body, param] of [
      [{ model: 'demo', input: 'x', background: true }, 'background'],
      [{ model: 'demo', input: 'x', tools: [{ type: 'web_search' }] }, 'tools[0].type'],
      [{ model: 'demo', input: [{ type: 'file_search_call', id: 'x' }] }, 'input[0].type'],
      [{ model: 'demo', input: [{ type: 'item_reference', id: 'msg_nope' }] }, 'input'],
      [{ model: 'demo', input: 'x', previous_response_id: 'resp_nope' }, 'previous_response_id'],
      [{ model: 'demo', input: 'x', text: { format: { type: 'yaml' } } }, 'text.format.type'],
      [{ model: 'demo' }, 'input'],
      [{ model: 'demo', input: 'x', temperatur: 1 }, 'temperatur'],
    ]) {
      const r = await post(body);
      assert.equal(r.status, 400, JSON.stringify(body) + r.text);
      assertValid('ErrorResponse', r.json, 'error');
      assert.equal(r.json.error.param, param, r.text);
    }
    const r = await request(`${gw.url}/v1/responses/resp_unknown`, { key: KEY });
    assert.equal(r.status, 404);
    // Not served: cancel, input token counts (404, not 405); a stored response streamed again.
    for (const path of ['/v1/responses/resp_x/cancel', '/v1/responses/input_tokens']) {
      assert.equal((await request(`${gw.url}${path}`, { method: 'POST', key: KEY, body: {} })).status, 404, path);
    }
    const again = await request(`${gw.url}/v1/responses/resp_x?stream=true`, { key: KEY });
    assert.equal(again.status, 400);
    assert.equal(again.json.error.param, 'stream');
  });
});

describe('responses: the Vercel AI SDK', () => {
  const provider = () => createOpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1` });

  test('openai(model) (the Responses API) and openai.chat(model), whole and streamed', async () => {
    for (const model of [provider()('demo'), provider().chat('demo')]) {
      const whole = await generateText({ model, prompt: 'Say something.', maxOutputTokens: 5, maxRetries: 0 });
      assert.equal(whole.text, simText(5), model.modelId);
      assert.equal(whole.usage.outputTokens, 5);
      const streamed = streamText({ model, prompt: 'Say something.', maxOutputTokens: 3, maxRetries: 0 });
      let text = '';
      for await (const t of streamed.textStream) text += t;
      assert.equal(text, simText(3));
    }
  });

  test('openai(model), a second turn: the earlier answer, sent as an item_reference, is found in the store', async () => {
    const n = upstream.requests.length;
    const first = await generateText({ model: provider()('tools'), prompt: 'Hello.', maxRetries: 0 });
    assert.equal(first.text, 'It is sunny.');
    const second = await generateText({
      model: provider()('tools'),
      messages: [{ role: 'user', content: 'Hello.' }, ...first.response.messages, { role: 'user', content: 'And tomorrow?' }],
      maxRetries: 0,
    });
    assert.equal(second.text, 'It is sunny.');
    assert.deepEqual(sentSince(n)[1].messages, [
      { role: 'user', content: 'Hello.' },
      { role: 'assistant', content: 'It is sunny.' },
      { role: 'user', content: 'And tomorrow?' },
    ]);
    // An item of the key's tenant is found; another tenant's is not.
    const mine = await client().responses.create({ model: 'tools', input: 'Hi.' });
    const ref = { model: 'tools', input: [{ type: 'item_reference', id: mine.output[0].id }, { role: 'user', content: 'More?' }] };
    const own = await request(`${gw.url}/v1/responses`, { method: 'POST', key: KEY, body: ref });
    assert.equal(own.status, 200, own.text);
    const r = await request(`${gw.url}/v1/responses`, { method: 'POST', key: OTHER, body: ref });
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.error.param, 'input');
  });

  test('openai(model) with a tool: the call reaches the SDK', async () => {
    const { tool, jsonSchema } = await import('ai');
    const result = await generateText({
      model: provider()('tools'),
      prompt: 'Weather in Paris?',
      tools: { weather: tool({ description: 'Weather of a city', inputSchema: jsonSchema({ type: 'object', properties: { city: { type: 'string' } } }) }) },
      maxRetries: 0,
    });
    assert.equal(result.toolCalls.length, 1);
    assert.equal(result.toolCalls[0].toolName, 'weather');
    assert.deepEqual(result.toolCalls[0].input, { city: 'Paris' });
  });
});

describe('responses: a fleet sharing Redis', () => {
  let redis;
  let a;
  let b;
  before(async () => {
    redis = await startRedis();
    const config = (instance) => ({
      instance,
      keys: [{ name: 'app', key: KEY, tenant: 'acme' }],
      models: [{ alias: 'tools', provider: 'openai', base_url: `${upstream.url}/v1`, model: 'real-model' }],
      redis: { url: redis.url, retry_interval: '200ms' },
      responses: { store: 'redis' },
      limits: { max_body_bytes: 30000 },
    });
    [a, b] = await Promise.all([startGateway(config('it-resp-a')), startGateway(config('it-resp-b'))]);
  });
  after(async () => {
    await Promise.all([a?.stop(), b?.stop()]);
    await redis?.stop();
  });
  const on = (gw) => new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 15000 });

  test('a response stored on one instance is read and continued on another, and deleted from both', async () => {
    const n = upstream.requests.length;
    const first = await on(a).responses.create({ model: 'tools', input: 'Hello from A.' });
    // Stored in the background: it reaches Redis a moment after the answer.
    const got = await waitFor(() => on(b).responses.retrieve(first.id).catch(() => null), { what: 'the response on B' });
    assert.equal(got.output_text, first.output_text);
    assert.ok((await redis.raw('KEYS', 'sluice:resp:*')).includes(first.id));
    const second = await on(b).responses.create({ model: 'tools', input: 'And on B?', previous_response_id: first.id });
    assert.equal(second.previous_response_id, first.id);
    assert.deepEqual(
      sentSince(n)[1].messages.map((m) => m.content),
      ['Hello from A.', 'It is sunny.', 'And on B?'],
    );
    await on(b).responses.delete(first.id);
    await assert.rejects(on(a).responses.retrieve(first.id), (e) => e instanceof OpenAI.NotFoundError);
    assert.equal((await a.infra()).stored_responses.backend, 'redis');
  });

  test('a conversation is held to the size of one request body', async () => {
    const big = 'x'.repeat(12000);
    const one = await on(a).responses.create({ model: 'tools', input: big });
    const two = await on(a).responses.create({ model: 'tools', input: big, previous_response_id: one.id });
    await assert.rejects(
      on(a).responses.create({ model: 'tools', input: big, previous_response_id: two.id }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'previous_response_id' && /max_body_bytes/.test(e.message),
    );
  });

  test('item references are held to the size of one request body with what they stand for', async () => {
    const one = await on(a).responses.create({ model: 'tools', input: 'x'.repeat(2000) });
    const ref = { type: 'item_reference', id: one.output[0].id };
    const fine = await request(`${a.url}/v1/responses`, { method: 'POST', key: KEY, body: { model: 'tools', input: [ref, { role: 'user', content: 'Go on.' }] } });
    assert.equal(fine.status, 200, fine.text);
    // 300 references of ~70 bytes each fit in the body; what they stand for does not.
    const many = await request(`${a.url}/v1/responses`, {
      method: 'POST', key: KEY, body: { model: 'tools', input: [...Array(300).fill(ref), { role: 'user', content: 'Go on.' }] },
    });
    assert.equal(many.status, 400, many.text);
    assert.equal(many.json.error.param, 'input');
    assert.match(many.json.error.message, /max_body_bytes/);
  });

  test('a response nested as deep as a request may be is stored', async () => {
    let metadata = 'deep';
    for (let i = 0; i < 40; i++) metadata = { m: metadata };
    const r = await request(`${a.url}/v1/responses`, { method: 'POST', key: KEY, body: { model: 'tools', input: 'x', tools: [{ type: 'function', name: 'weather', parameters: metadata }] } });
    assert.equal(r.status, 200, r.text);
    const got = await waitFor(() => on(a).responses.retrieve(r.json.id).catch(() => null), { what: 'the deep response' });
    assert.equal(got.id, r.json.id);
  });

  test('with Redis down, an instance keeps and continues its own responses, and says Redis is down', async () => {
    await redis.stop();
    await waitFor(async () => (await a.infra()).stored_responses.redis_up === false, { what: 'redis_up false' });
    const first = await on(a).responses.create({ model: 'tools', input: 'While Redis is down.' });
    const second = await on(a).responses.create({ model: 'tools', input: 'Still there?', previous_response_id: first.id });
    assert.equal(second.previous_response_id, first.id);
    await assert.rejects(on(b).responses.retrieve(first.id), (e) => e instanceof OpenAI.NotFoundError);
    // A delete that could not reach Redis deletes nothing, and says so.
    await assert.rejects(on(a).responses.delete(first.id), (e) => e.status === 503 && e.code === 'store_unavailable');
    assert.equal((await on(a).responses.retrieve(first.id)).id, first.id);
    await redis.start();
    await waitFor(async () => (await a.infra()).stored_responses.redis_up === true, { timeout: 10000, what: 'redis_up true' });
  });
});

describe('responses: a fleet sharing the history database', () => {
  let pg;
  let a;
  let b;
  const config = (instance) => ({
    instance,
    keys: [{ name: 'app', key: KEY, tenant: 'acme' }],
    models: [{ alias: 'tools', provider: 'openai', base_url: `${upstream.url}/v1`, model: 'real-model' }],
    history: { url: pg.url, retry_interval: '200ms', connect_timeout: '1s' },
    responses: { store: 'database' },
  });
  before(async () => {
    pg = await startPostgres();
    [a, b] = await Promise.all([startGateway(config('it-resp-db-a')), startGateway(config('it-resp-db-b'))]);
  });
  after(async () => {
    await Promise.all([a?.stop(), b?.stop()]);
    await pg?.stop();
  });
  const on = (gw) => new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 15000 });

  test('a response stored by one instance is continued by another, outlives a restart, and is deleted for all', async () => {
    const n = upstream.requests.length;
    const first = await on(a).responses.create({ model: 'tools', input: 'Hello from A.' });
    const got = await waitFor(() => on(b).responses.retrieve(first.id).catch(() => null), { what: 'the response on B' });
    assert.equal(got.output_text, first.output_text);
    assert.equal(String(await pg.query(`SELECT count(*) FROM responses WHERE id = '${first.id}' AND tenant = 'acme'`)).trim(), '1');
    const second = await on(b).responses.create({ model: 'tools', input: 'And on B?', previous_response_id: first.id });
    assert.deepEqual(
      sentSince(n)[1].messages.map((m) => m.content),
      ['Hello from A.', 'It is sunny.', 'And on B?'],
    );
    // A restarted instance (nothing in its memory) still finds and continues it.
    await a.stop();
    a = await startGateway(config('it-resp-db-a'));
    assert.equal((await on(a).responses.retrieve(second.id)).id, second.id);
    const third = await on(a).responses.create({ model: 'tools', input: 'After the restart?', previous_response_id: second.id });
    assert.equal(third.previous_response_id, second.id);
    assert.equal(sentSince(n).at(-1).messages.length, 5);
    const infra = (await a.infra()).stored_responses;
    assert.equal(infra.backend, 'database');
    assert.equal(infra.database_up, true);
    await on(b).responses.delete(first.id);
    await assert.rejects(on(a).responses.retrieve(first.id), (e) => e instanceof OpenAI.NotFoundError);
  });

  test('with the database down, an instance keeps and continues its own responses, and says so', async () => {
    await pg.stop();
    const first = await on(a).responses.create({ model: 'tools', input: 'While the database is down.' });
    const second = await on(a).responses.create({ model: 'tools', input: 'Still there?', previous_response_id: first.id });
    assert.equal(second.previous_response_id, first.id);
    assert.equal((await a.infra()).stored_responses.database_up, false);
    await assert.rejects(on(b).responses.retrieve(first.id), (e) => e instanceof OpenAI.NotFoundError);
    await assert.rejects(on(a).responses.delete(first.id), (e) => e.status === 503 && e.code === 'store_unavailable');
    await pg.start();
    // Back: what is stored from now on is shared again.
    const third = await waitFor(async () => {
      const r = await on(a).responses.create({ model: 'tools', input: 'Back?' });
      return (await a.infra()).stored_responses.database_up ? r : null;
    }, { timeout: 10000, what: 'the database back' });
    await waitFor(() => on(b).responses.retrieve(third.id).catch(() => null), { what: 'the response on B' });
  });
});
