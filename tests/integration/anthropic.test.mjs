// The official `@anthropic-ai/sdk` npm package against POST /v1/messages: Anthropic clients
// (and tools such as Claude Code) reach any upstream through sluice, streamed and not, with
// the same keys, errors and accounting as the OpenAI API.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { BAD_KEY, KEY, request, simText, startGateway, startRecorder, startSim } from './lib.mjs';

let gw;
let sim;
let ollama;
let recorder;

// A Messages API upstream that answers one fixed message, or a 400 in Anthropic's shape.
function messagesApi(req, res, json) {
  if (!req.url.endsWith('/v1/messages')) return false;
  if (json?.max_tokens === 1) {
    res.writeHead(400, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ type: 'error', error: { type: 'invalid_request_error', message: 'max_tokens: too small here' } }));
    return true;
  }
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify({
    id: 'msg_up', type: 'message', role: 'assistant', model: json?.model,
    content: [{ type: 'text', text: 'from the upstream' }], stop_reason: 'end_turn', stop_sequence: null,
    usage: { input_tokens: 21, output_tokens: 3 },
  }));
  return true;
}

before(async () => {
  [sim, ollama, recorder] = await Promise.all([
    startSim({ ttft: '10ms', 'inter-token': '2ms' }),
    startSim({ ttft: '5ms' }),
    startRecorder(messagesApi),
  ]);
  gw = await startGateway({
    instance: 'it-anthropic',
    keys: [
      { name: 'test-app', key: KEY, tenant: 'acme', tier: 'gold', models: ['*'] },
      { name: 'demo-only', key: 'sk-demo-only-000011112222', models: ['demo'] },
    ],
    models: [
      { alias: 'demo', provider: 'openai', base_url: `${sim.url}/v1`, model: 'sluice-sim' },
      { alias: 'local', provider: 'ollama', base_url: ollama.url, model: 'sluice-sim' },
      { alias: 'claude', provider: 'anthropic', base_url: sim.url, model: 'sluice-sim', api_key: 'sk-ant-upstream-123456' },
      { alias: 'recorded', provider: 'anthropic', base_url: `${recorder.url}/v1`, model: 'claude-x', api_key: 'sk-ant-rec-123456' },
    ],
  });
});

after(async () => {
  await Promise.all([gw?.stop(), sim?.stop(), ollama?.stop(), recorder?.close()]);
});

const openai = () => new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 15000 });

describe('an Anthropic upstream (provider: anthropic)', () => {
  test('serves OpenAI clients: a chat.completion with usage', async () => {
    const c = await openai().chat.completions.create({ model: 'claude', max_tokens: 6, messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(c.object, 'chat.completion');
    assert.equal(c.model, 'claude');
    assert.equal(c.choices[0].message.content, simText(6));
    assert.equal(c.choices[0].finish_reason, 'length');
    assert.equal(c.usage.completion_tokens, 6);
  });

  test('serves OpenAI clients streamed: chunks, finish_reason, usage', async () => {
    const stream = await openai().chat.completions.create({
      model: 'claude', max_tokens: 5, stream: true, stream_options: { include_usage: true },
      messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'hi' }],
    });
    let text = '';
    let finish;
    let usage;
    for await (const ch of stream) {
      if (ch.choices[0]?.delta?.content) text += ch.choices[0].delta.content;
      if (ch.choices[0]?.finish_reason) finish = ch.choices[0].finish_reason;
      if (ch.usage) usage = ch.usage;
    }
    assert.equal(text, simText(5));
    assert.equal(finish, 'length');
    assert.equal(usage.completion_tokens, 5);
  });

  test('serves Anthropic clients too (both translations), streamed', async () => {
    let text = '';
    const stream = client().messages.stream({ model: 'claude', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] });
    stream.on('text', (t) => (text += t));
    const final = await stream.finalMessage();
    assert.equal(text, simText(4));
    assert.equal(final.usage.output_tokens, 4);
  });

  test('the upstream gets the Messages request with its own credentials, never the client key', async () => {
    const n = recorder.requests.length;
    const c = await openai().chat.completions.create({
      model: 'recorded', max_tokens: 7, temperature: 1.5, stop: 'END', user: 'u-9',
      messages: [{ role: 'system', content: 'S1' }, { role: 'user', content: 'a' }, { role: 'user', content: 'b' }],
    });
    assert.equal(c.choices[0].message.content, 'from the upstream');
    assert.equal(c.choices[0].finish_reason, 'stop');
    assert.deepEqual(c.usage, { prompt_tokens: 21, completion_tokens: 3, total_tokens: 24 });
    const up = recorder.requests[n];
    assert.equal(up.url, '/v1/messages');
    assert.equal(up.headers['x-api-key'], 'sk-ant-rec-123456');
    assert.equal(up.headers['anthropic-version'], '2023-06-01');
    assert.equal(up.headers.authorization, undefined);
    assert.deepEqual(up.json, {
      model: 'claude-x', system: 'S1', messages: [{ role: 'user', content: 'a\n\nb' }], max_tokens: 7,
      temperature: 1, stop_sequences: ['END'], metadata: { user_id: 'u-9' },
    });
  });

  test("an upstream 400 reaches the client with the provider's message, in the client's shape", async () => {
    await assert.rejects(
      openai().chat.completions.create({ model: 'recorded', max_tokens: 1, messages: [{ role: 'user', content: 'a' }] }),
      (e) => e.status === 400 && /too small here/.test(e.message),
    );
    await assert.rejects(
      client().messages.create({ model: 'recorded', max_tokens: 1, messages: [{ role: 'user', content: 'a' }] }),
      (e) => e instanceof Anthropic.BadRequestError && /too small here/.test(e.message),
    );
  });
});

const client = (apiKey = KEY) => new Anthropic({ apiKey, baseURL: gw.url, maxRetries: 0, timeout: 15000 });

describe('anthropic SDK: messages', () => {
  test('messages.create: a Messages answer with text, stop_reason and usage', async () => {
    const m = await client().messages.create({
      model: 'demo',
      max_tokens: 5,
      system: 'Be brief.',
      messages: [{ role: 'user', content: 'Say five words.' }],
    });
    assert.equal(m.type, 'message');
    assert.equal(m.role, 'assistant');
    assert.equal(m.model, 'demo');
    assert.match(m.id, /^msg_/);
    assert.equal(m.content.length, 1);
    assert.equal(m.content[0].type, 'text');
    assert.equal(m.content[0].text, simText(5));
    assert.equal(m.stop_reason, 'max_tokens');
    assert.equal(m.usage.output_tokens, 5);
    assert.ok(m.usage.input_tokens > 0);
  });

  test('messages.stream: text deltas, then message_delta and message_stop; the final message is whole', async () => {
    const types = [];
    let text = '';
    const messages = [
      { role: 'user', content: [{ type: 'text', text: 'Count.' }] },
      { role: 'assistant', content: 'One.' },
      { role: 'user', content: 'Go on.' },
    ];
    const stream = client().messages.stream({ model: 'demo', max_tokens: 8, messages });
    stream.on('streamEvent', (e) => types.push(e.type));
    stream.on('text', (t) => (text += t));
    const final = await stream.finalMessage();
    assert.equal(text, simText(8));
    assert.equal(final.content[0].text, simText(8));
    assert.equal(final.stop_reason, 'max_tokens');
    assert.equal(final.usage.output_tokens, 8);
    // The upstream's prompt count, as the same request answered whole reports it (not the
    // gateway's estimate that message_start carries).
    const whole = await client().messages.create({ model: 'demo', max_tokens: 8, messages });
    assert.equal(final.usage.input_tokens, whole.usage.input_tokens);
    assert.equal(types[0], 'message_start');
    assert.equal(types[1], 'content_block_start');
    assert.equal(types.filter((t) => t === 'content_block_delta').length, 8);
    assert.deepEqual(types.slice(-3), ['content_block_stop', 'message_delta', 'message_stop']);
  });

  test('an Ollama upstream serves Anthropic clients too (streamed)', async () => {
    let text = '';
    const stream = client().messages.stream({ model: 'local', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] });
    stream.on('text', (t) => (text += t));
    const final = await stream.finalMessage();
    assert.equal(text, simText(4));
    assert.equal(final.usage.output_tokens, 4);
  });

  test('the access log records the request like any other, with usage', async () => {
    const r = await request(`${gw.url}/v1/messages`, {
      method: 'POST',
      headers: { 'x-api-key': KEY, 'anthropic-version': '2023-06-01', 'x-request-id': 'anthropic-log-1' },
      body: { model: 'demo', max_tokens: 3, messages: [{ role: 'user', content: 'hi' }] },
    });
    assert.equal(r.status, 200);
    const line = await gw.logFor('anthropic-log-1');
    assert.equal(line.path, '/v1/messages');
    assert.equal(line.status, 200);
    assert.equal(line.key_name, 'test-app');
    assert.equal(line.completion_tokens, 3);
    assert.equal(line.max_tokens, 3);
  });
});

describe('anthropic SDK: models and count_tokens (what tools such as Claude Code call)', () => {
  test('models.list gives the aliases the key may use, in the Models API shape', async () => {
    const ids = [];
    for await (const m of client().models.list()) {
      assert.equal(m.type, 'model');
      ids.push(m.id);
    }
    assert.deepEqual(ids.sort(), ['claude', 'demo', 'local', 'recorded']);
    const limited = [];
    for await (const m of client('sk-demo-only-000011112222').models.list()) limited.push(m.id);
    assert.deepEqual(limited, ['demo']);
  });

  test('models.retrieve gives one alias in the Models API shape; a model the key may not use is a 404', async () => {
    const m = await client().models.retrieve('claude');
    assert.deepEqual(m, { type: 'model', id: 'claude', display_name: 'claude', created_at: '1970-01-01T00:00:00Z' });
    await assert.rejects(client('sk-demo-only-000011112222').models.retrieve('claude'), (e) => e instanceof Anthropic.NotFoundError);
    await assert.rejects(client().models.retrieve('nope'), (e) => e instanceof Anthropic.NotFoundError);
  });

  test('messages.countTokens counts the prompt (no max_tokens needed), more text more tokens', async () => {
    const short = await client().messages.countTokens({ model: 'demo', messages: [{ role: 'user', content: 'Hello.' }] });
    const long = await client().messages.countTokens({
      model: 'demo',
      system: 'You are a careful assistant who answers in full sentences.',
      messages: [{ role: 'user', content: 'Hello. '.repeat(50) }],
    });
    assert.ok(short.input_tokens >= 8, JSON.stringify(short)); // 3 + (3 + role + text) by the chat formula
    assert.ok(long.input_tokens > short.input_tokens + 50, JSON.stringify(long));
    await assert.rejects(
      client().messages.countTokens({ model: 'nope', messages: [{ role: 'user', content: 'x' }] }),
      (e) => e instanceof Anthropic.NotFoundError,
    );
  });
});

describe('anthropic SDK: errors in the Messages shape', () => {
  test('a wrong key is an AuthenticationError (401)', async () => {
    await assert.rejects(
      client(BAD_KEY).messages.create({ model: 'demo', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] }),
      (e) => e instanceof Anthropic.AuthenticationError && e.status === 401 && e.error?.error?.type === 'authentication_error',
    );
  });

  test('a model the key may not use is a PermissionDeniedError (403); an unknown one NotFoundError (404)', async () => {
    await assert.rejects(
      client('sk-demo-only-000011112222').messages.create({ model: 'local', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] }),
      (e) => e instanceof Anthropic.PermissionDeniedError && e.status === 403,
    );
    await assert.rejects(
      client().messages.create({ model: 'nope', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] }),
      (e) => e instanceof Anthropic.NotFoundError && /nope/.test(e.message),
    );
  });

  test('bad requests are 400 invalid_request_error naming the field', async () => {
    const post = (body) =>
      request(`${gw.url}/v1/messages`, { method: 'POST', headers: { 'x-api-key': KEY }, body });
    const noMax = await post({ model: 'demo', messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(noMax.status, 400);
    assert.deepEqual(noMax.json.type, 'error');
    assert.equal(noMax.json.error.type, 'invalid_request_error');
    assert.match(noMax.json.error.message, /max_tokens/);
    const image = await post({
      model: 'demo',
      max_tokens: 5,
      messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AA==' } }] }],
    });
    assert.equal(image.status, 400);
    assert.match(image.json.error.message, /messages\[0\]\.content\[0\].*image.*not supported/);
    const tools = await post({
      model: 'demo', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }],
      tools: [{ type: 'web_search_20250305', name: 'web_search' }],
    });
    assert.equal(tools.status, 400);
    assert.match(tools.json.error.message, /tools\[0\]\.type.*web_search_20250305.*not supported/);
    const thinking = await post({ model: 'demo', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }], thinking: { type: 'enabled', budget_tokens: 1024 } });
    assert.equal(thinking.status, 400);
    assert.match(thinking.json.error.message, /'thinking' is not supported/);
    const role = await post({ model: 'demo', max_tokens: 5, messages: [{ role: 'system', content: 'hi' }] });
    assert.equal(role.status, 400);
    assert.match(role.json.error.message, /role must be 'user' or 'assistant'/);
    const notJson = await request(`${gw.url}/v1/messages`, { method: 'POST', headers: { 'x-api-key': KEY }, body: '{"model":' });
    assert.equal(notJson.status, 400);
    assert.equal(notJson.json.error.type, 'invalid_request_error');
  });

  test('a mid-stream upstream failure ends the stream with an error event', async () => {
    await sim.configure({ abort_rate: 1 });
    try {
      const stream = client().messages.stream({ model: 'demo', max_tokens: 40, messages: [{ role: 'user', content: 'hi' }] });
      await assert.rejects(stream.finalMessage(), (e) => /upstream/i.test(String(e.message)));
    } finally {
      await sim.configure({ abort_rate: 0 });
    }
  });
});

// ---- tool use ----------------------------------------------------------------------------

const WEATHER_TOOL = {
  name: 'get_weather',
  description: 'The weather of a city',
  input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};
const OPENAI_WEATHER_TOOL = {
  type: 'function',
  function: { name: 'get_weather', description: 'The weather of a city', parameters: WEATHER_TOOL.input_schema },
};

// An upstream that calls tools: OpenAI-compatible (tool_calls) on /v1/chat/completions,
// the Messages API (tool_use) on /v1/messages; a Messages request whose last turn carries
// tool_result blocks gets a text answer instead.
function toolsApi(req, res, json) {
  const sse = (lines) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    for (const l of lines) res.write(l);
    res.end();
  };
  if (req.url.endsWith('/chat/completions')) {
    const base = { id: 'chatcmpl-tools', created: 1, model: json.model };
    if (!json.stream) {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({
        ...base, object: 'chat.completion',
        choices: [{
          index: 0, finish_reason: 'tool_calls',
          message: {
            role: 'assistant', content: null,
            tool_calls: [
              { id: 'call_w1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
              { id: 'call_w2', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Rome"}' } },
            ],
          },
        }],
        usage: { prompt_tokens: 30, completion_tokens: 12, total_tokens: 42 },
      }));
      return true;
    }
    const chunk = (delta, finish = null) =>
      `data: ${JSON.stringify({ ...base, object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    sse([
      chunk({ role: 'assistant', content: 'Checking.' }),
      chunk({ tool_calls: [{ index: 0, id: 'call_s1', type: 'function', function: { name: 'get_weather', arguments: '' } }] }),
      chunk({ tool_calls: [{ index: 0, function: { arguments: '{"city":' } }] }),
      chunk({ tool_calls: [{ index: 0, function: { arguments: '"Oslo"}' } }] }),
      chunk({ tool_calls: [{ index: 1, id: 'call_s2', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Bergen"}' } }] }),
      chunk({}, 'tool_calls'),
      `data: ${JSON.stringify({ ...base, object: 'chat.completion.chunk', choices: [], usage: { prompt_tokens: 30, completion_tokens: 9, total_tokens: 39 } })}\n\n`,
      'data: [DONE]\n\n',
    ]);
    return true;
  }
  if (!req.url.endsWith('/v1/messages')) return false;
  const last = json.messages.at(-1);
  const answered = Array.isArray(last.content) && last.content.some((b) => b.type === 'tool_result');
  const usage = { input_tokens: 40, output_tokens: 15 };
  if (!json.stream) {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({
      id: 'msg_tools', type: 'message', role: 'assistant', model: json.model, stop_sequence: null, usage,
      ...(answered
        ? { content: [{ type: 'text', text: 'It is sunny in Paris.' }], stop_reason: 'end_turn' }
        : {
          content: [
            { type: 'text', text: 'Let me check.' },
            { type: 'tool_use', id: 'toolu_01Paris', name: 'get_weather', input: { city: 'Paris' } },
          ],
          stop_reason: 'tool_use',
        }),
    }));
    return true;
  }
  const ev = (type, data) => `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
  sse([
    ev('message_start', { message: { id: 'msg_tools', type: 'message', role: 'assistant', model: json.model, content: [], stop_reason: null, usage: { input_tokens: 40, output_tokens: 1 } } }),
    ev('content_block_start', { index: 0, content_block: { type: 'tool_use', id: 'toolu_01Lyon', name: 'get_weather', input: {} } }),
    ev('ping', {}),
    ev('content_block_delta', { index: 0, delta: { type: 'input_json_delta', partial_json: '' } }),
    ev('content_block_delta', { index: 0, delta: { type: 'input_json_delta', partial_json: '{"city": "Ly' } }),
    ev('content_block_delta', { index: 0, delta: { type: 'input_json_delta', partial_json: 'on"}' } }),
    ev('content_block_stop', { index: 0 }),
    ev('message_delta', { delta: { stop_reason: 'tool_use', stop_sequence: null }, usage: { output_tokens: 15 } }),
    ev('message_stop', {}),
  ]);
  return true;
}

describe('tool use', () => {
  let tgw;
  let up;
  before(async () => {
    up = await startRecorder(toolsApi);
    tgw = await startGateway({
      instance: 'it-anthropic-tools',
      keys: [{ name: 'test-app', key: KEY, models: ['*'] }],
      models: [
        { alias: 'tools-openai', provider: 'openai', base_url: `${up.url}/v1`, model: 'gpt-up' },
        { alias: 'tools-claude', provider: 'anthropic', base_url: up.url, model: 'claude-up', api_key: 'sk-ant-tools-123456' },
      ],
    });
  });
  after(async () => {
    await Promise.all([tgw?.stop(), up?.close()]);
  });
  const anthropic = () => new Anthropic({ apiKey: KEY, baseURL: tgw.url, maxRetries: 0, timeout: 15000 });
  const oai = () => new OpenAI({ apiKey: KEY, baseURL: `${tgw.url}/v1`, maxRetries: 0, timeout: 15000 });

  test('Anthropic SDK -> OpenAI upstream: tools go as OpenAI tools, tool_calls come back as tool_use blocks', async () => {
    const n = up.requests.length;
    const m = await anthropic().messages.create({
      model: 'tools-openai', max_tokens: 100, tools: [WEATHER_TOOL],
      tool_choice: { type: 'any', disable_parallel_tool_use: false },
      messages: [{ role: 'user', content: 'Weather in Paris and Rome?' }],
    });
    assert.equal(m.stop_reason, 'tool_use');
    assert.deepEqual(m.content, [
      { type: 'tool_use', id: 'call_w1', name: 'get_weather', input: { city: 'Paris' } },
      { type: 'tool_use', id: 'call_w2', name: 'get_weather', input: { city: 'Rome' } },
    ]);
    assert.equal(m.usage.output_tokens, 12);
    const sent = up.requests[n].json;
    assert.deepEqual(sent.tools, [OPENAI_WEATHER_TOOL]);
    assert.equal(sent.tool_choice, 'required');
    assert.equal(sent.parallel_tool_calls, undefined);

    // The next turn: the history with tool_use and tool_result blocks becomes tool_calls
    // and tool messages.
    await anthropic().messages.create({
      model: 'tools-openai', max_tokens: 100, tools: [WEATHER_TOOL],
      messages: [
        { role: 'user', content: 'Weather in Paris and Rome?' },
        { role: 'assistant', content: m.content },
        {
          role: 'user',
          content: [
            { type: 'tool_result', tool_use_id: 'call_w1', content: '18C' },
            { type: 'tool_result', tool_use_id: 'call_w2', content: [{ type: 'text', text: 'unknown city' }], is_error: true },
          ],
        },
      ],
    });
    assert.deepEqual(up.requests[n + 1].json.messages.slice(1), [
      {
        role: 'assistant', content: null,
        tool_calls: [
          { id: 'call_w1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
          { id: 'call_w2', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Rome"}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'call_w1', content: '18C' },
      { role: 'tool', tool_call_id: 'call_w2', content: 'Error: unknown city' },
    ]);
  });

  test('Anthropic SDK -> OpenAI upstream, streamed: tool_use blocks with input_json_delta', async () => {
    const n = up.requests.length;
    const types = [];
    let json = '';
    const stream = anthropic().messages.stream({
      model: 'tools-openai', max_tokens: 100, tools: [WEATHER_TOOL],
      messages: [{ role: 'user', content: 'Weather in Oslo and Bergen?' }],
    });
    stream.on('streamEvent', (e) => types.push(e.type === 'content_block_start' ? `start:${e.content_block.type}:${e.index}` : e.type));
    stream.on('inputJson', (delta) => (json += delta));
    const final = await stream.finalMessage();
    assert.equal(final.stop_reason, 'tool_use');
    assert.deepEqual(final.content, [
      { type: 'text', text: 'Checking.' },
      { type: 'tool_use', id: 'call_s1', name: 'get_weather', input: { city: 'Oslo' } },
      { type: 'tool_use', id: 'call_s2', name: 'get_weather', input: { city: 'Bergen' } },
    ]);
    assert.equal(json, '{"city":"Oslo"}{"city":"Bergen"}');
    assert.deepEqual(types.filter((t) => t.startsWith('start:')), ['start:text:0', 'start:tool_use:1', 'start:tool_use:2']);
    assert.equal(final.usage.output_tokens, 9);
    assert.deepEqual(up.requests[n].json.tools, [OPENAI_WEATHER_TOOL]);
    assert.equal(up.requests[n].json.stream, true);
  });

  test('OpenAI SDK -> Anthropic upstream: tools go as Messages tools, tool_use comes back as tool_calls; tool results as tool_result', async () => {
    const n = up.requests.length;
    const messages = [{ role: 'user', content: 'Weather in Paris?' }];
    const c = await oai().chat.completions.create({
      model: 'tools-claude', max_tokens: 100, tools: [OPENAI_WEATHER_TOOL], tool_choice: 'auto', parallel_tool_calls: false, messages,
    });
    assert.equal(c.choices[0].finish_reason, 'tool_calls');
    assert.equal(c.choices[0].message.content, 'Let me check.');
    assert.deepEqual(c.choices[0].message.tool_calls, [
      { id: 'toolu_01Paris', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
    ]);
    const first = up.requests[n];
    assert.equal(first.url, '/v1/messages');
    assert.deepEqual(first.json.tools, [WEATHER_TOOL]);
    assert.deepEqual(first.json.tool_choice, { type: 'auto', disable_parallel_tool_use: true });

    // Second turn: the assistant's tool_calls and the tool message.
    const again = await oai().chat.completions.create({
      model: 'tools-claude', max_tokens: 100, tools: [OPENAI_WEATHER_TOOL],
      messages: [
        ...messages,
        c.choices[0].message,
        { role: 'tool', tool_call_id: 'toolu_01Paris', content: '{"temp":18,"sky":"clear"}' },
      ],
    });
    assert.equal(again.choices[0].message.content, 'It is sunny in Paris.');
    assert.equal(again.choices[0].finish_reason, 'stop');
    assert.deepEqual(up.requests[n + 1].json.messages, [
      { role: 'user', content: 'Weather in Paris?' },
      {
        role: 'assistant',
        content: [
          { type: 'text', text: 'Let me check.' },
          { type: 'tool_use', id: 'toolu_01Paris', name: 'get_weather', input: { city: 'Paris' } },
        ],
      },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_01Paris', content: '{"temp":18,"sky":"clear"}' }] },
    ]);
  });

  test('OpenAI SDK -> Anthropic upstream, streamed: tool_use events become tool_calls deltas', async () => {
    const n = up.requests.length;
    const stream = await oai().chat.completions.create({
      model: 'tools-claude', max_tokens: 100, stream: true, tools: [OPENAI_WEATHER_TOOL], tool_choice: 'required',
      messages: [{ role: 'user', content: 'Weather in Lyon?' }],
    });
    const calls = [];
    let finish;
    for await (const ch of stream) {
      for (const tc of ch.choices[0]?.delta?.tool_calls ?? []) {
        calls[tc.index] ??= { id: '', name: '', arguments: '' };
        if (tc.id) calls[tc.index].id = tc.id;
        if (tc.function?.name) calls[tc.index].name = tc.function.name;
        calls[tc.index].arguments += tc.function?.arguments ?? '';
      }
      if (ch.choices[0]?.finish_reason) finish = ch.choices[0].finish_reason;
    }
    assert.equal(finish, 'tool_calls');
    assert.equal(calls.length, 1);
    assert.equal(calls[0].id, 'toolu_01Lyon');
    assert.equal(calls[0].name, 'get_weather');
    assert.deepEqual(JSON.parse(calls[0].arguments), { city: 'Lyon' });
    assert.deepEqual(up.requests[n].json.tool_choice, { type: 'any' });
    assert.deepEqual(up.requests[n].json.tools, [WEATHER_TOOL]);
  });

  test('Anthropic SDK -> Anthropic upstream (both translations): tools, tool_use and tool_result survive', async () => {
    const n = up.requests.length;
    const history = [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_01Paris', name: 'get_weather', input: { city: 'Paris' } }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_01Paris', content: 'sunny' }] },
    ];
    const m = await anthropic().messages.create({
      model: 'tools-claude', max_tokens: 100, tools: [WEATHER_TOOL], tool_choice: { type: 'tool', name: 'get_weather' }, messages: history,
    });
    assert.equal(m.content[0].text, 'It is sunny in Paris.');
    assert.equal(m.stop_reason, 'end_turn');
    const sent = up.requests[n].json;
    assert.deepEqual(sent.tools, [WEATHER_TOOL]);
    assert.deepEqual(sent.tool_choice, { type: 'tool', name: 'get_weather' });
    assert.deepEqual(sent.messages, history);
    const stream = anthropic().messages.stream({
      model: 'tools-claude', max_tokens: 100, tools: [WEATHER_TOOL], messages: [{ role: 'user', content: 'Weather in Lyon?' }],
    });
    const final = await stream.finalMessage();
    assert.equal(final.stop_reason, 'tool_use');
    assert.deepEqual(final.content, [{ type: 'tool_use', id: 'toolu_01Lyon', name: 'get_weather', input: { city: 'Lyon' } }]);
  });
});

// The simulator calls a tool when the user names it, on each wire the gateway speaks to it
// (OpenAI, Anthropic, Ollama), and answers text after the tool's result.
describe('tool use against the simulator, every upstream wire', () => {
  for (const model of ['demo', 'claude', 'local']) {
    test(`${model}: a tool_use block when asked for by name, text after the tool_result`, async () => {
      const ask = { role: 'user', content: 'Use get_weather for Paris.' };
      const m = await client().messages.create({ model, max_tokens: 100, tools: [WEATHER_TOOL], messages: [ask] });
      assert.equal(m.stop_reason, 'tool_use', JSON.stringify(m));
      assert.equal(m.content.length, 1);
      const [use] = m.content;
      assert.equal(use.type, 'tool_use');
      assert.equal(use.name, 'get_weather');
      assert.equal(typeof use.input.city, 'string');

      const stream = client().messages.stream({ model, max_tokens: 100, tools: [WEATHER_TOOL], messages: [ask] });
      const final = await stream.finalMessage();
      assert.equal(final.stop_reason, 'tool_use');
      assert.deepEqual(final.content.map((b) => [b.type, b.name, b.input]), [['tool_use', 'get_weather', use.input]]);

      // Even with a forced choice (which an Ollama route cannot pass on).
      const choice = model === 'local' ? {} : { tool_choice: { type: 'any' } };
      const after = await client().messages.create({
        model, max_tokens: 5, tools: [WEATHER_TOOL], ...choice,
        messages: [ask, { role: 'assistant', content: m.content }, { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'sunny' }] }],
      });
      assert.deepEqual(after.content, [{ type: 'text', text: simText(5) }]);
    });
  }

  // (Through the gateway's chat translation the stop reason comes back as end_turn: a chat
  // completion's finish_reason "stop" does not say which sequence matched.)
  test('stop_sequences reach the simulator: the text ends before the first occurrence', async () => {
    const text = simText(12);
    for (const model of ['claude', 'demo', 'local']) {
      const m = await client().messages.create({ model, max_tokens: 12, stop_sequences: ['deep'], messages: [{ role: 'user', content: 'hi' }] });
      assert.equal(m.content[0].text, text.slice(0, text.indexOf('deep')), model);
      assert.notEqual(m.stop_reason, 'max_tokens', model);
    }
  });
});
