// Conformance: what the gateway answers on the OpenAI API, checked against the OpenAI API's
// own OpenAPI schemas (schemas/openai.json, see openai_schema.mjs), for every kind of route:
// the built-in simulator (`provider: simulated`), an OpenAI-compatible upstream (a `sluice
// sim` process, and a fake that calls tools), an Ollama upstream and an Anthropic Messages
// upstream (small fakes speaking those APIs). Completions, every chunk of a stream (with and
// without include_usage), tool calls, Responses and their stream events, error bodies, the
// models list and embeddings.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { BAD_KEY, KEY, USER, assembled, chat, request, rawRequest, simLogprob, simText, simTokens, sse, startGateway, startRecorder, startSim } from './lib.mjs';
import { SOURCE, assertValid, schemaNames, validate, validator } from './openai_schema.mjs';

let gw;
let sim;
let fake;

const LIMITED_KEY = 'sk-conf-limited-0123456789';
const WEATHER_TOOL = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather of a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};
const TOOL_MESSAGES = [{ role: 'user', content: 'What is the weather in Paris?' }];
// A user message the fakes answer with their API's error (see `fakes`).
const FAIL = 'please fail';
const FAIL_MIDWAY = 'please fail midway';
const WORDS = ['The ', 'sky ', 'is ', 'clear.'];

// ---- the fake upstreams -------------------------------------------------------------------
// One Node server, three APIs, each answered as that API does (field for field, with the
// fields a real server adds). A request that offers tools gets a call of get_weather for
// Paris; the user message FAIL gets the API's error, FAIL_MIDWAY a stream that fails.

const lastUser = (json) => {
  const m = json?.messages?.at(-1);
  return typeof m?.content === 'string' ? m.content : '';
};
const offersTools = (json) => Array.isArray(json?.tools) && json.tools.length > 0;

function writeJson(res, status, body) {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

// OpenAI /v1/chat/completions (the openai-fake route: tool calls and errors).
function openaiChat(res, json) {
  if (lastUser(json) === FAIL) {
    writeJson(res, 400, {
      error: { message: "Invalid value for 'messages': the fake refuses.", type: 'invalid_request_error', param: 'messages', code: 'invalid_value' },
    });
    return;
  }
  const base = { id: 'chatcmpl-fake0001', created: 1767225600, model: json.model, service_tier: 'default', system_fingerprint: 'fp_fake' };
  const usage = { prompt_tokens: 61, completion_tokens: 15, total_tokens: 76, prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 }, completion_tokens_details: { reasoning_tokens: 0, audio_tokens: 0, accepted_prediction_tokens: 0, rejected_prediction_tokens: 0 } };
  const tools = offersTools(json);
  if (!json.stream) {
    const message = tools
      ? { role: 'assistant', content: null, tool_calls: [{ id: 'call_fake01', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }], refusal: null, annotations: [] }
      : { role: 'assistant', content: WORDS.join(''), refusal: null, annotations: [] };
    writeJson(res, 200, {
      ...base,
      object: 'chat.completion',
      choices: [{ index: 0, message, logprobs: null, finish_reason: tools ? 'tool_calls' : 'stop' }],
      usage,
    });
    return;
  }
  const withUsage = json.stream_options?.include_usage === true;
  const chunk = (delta, finish = null) =>
    `data: ${JSON.stringify({ ...base, object: 'chat.completion.chunk', choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }], ...(withUsage ? { usage: null } : {}) })}\n\n`;
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  if (tools) {
    res.write(chunk({ role: 'assistant', content: null, tool_calls: [{ index: 0, id: 'call_fake01', type: 'function', function: { name: 'get_weather', arguments: '' } }], refusal: null }));
    for (const part of ['{"', 'city', '":"', 'Paris', '"}']) res.write(chunk({ tool_calls: [{ index: 0, function: { arguments: part } }] }));
    res.write(chunk({}, 'tool_calls'));
  } else {
    res.write(chunk({ role: 'assistant', content: '', refusal: null }));
    for (const w of WORDS) res.write(chunk({ content: w }));
    if (lastUser(json) === FAIL_MIDWAY) {
      setTimeout(() => res.socket.destroy(), 50); // the connection breaks off
      return;
    }
    res.write(chunk({}, 'stop'));
  }
  if (withUsage) res.write(`data: ${JSON.stringify({ ...base, object: 'chat.completion.chunk', choices: [], usage })}\n\n`);
  res.end('data: [DONE]\n\n');
}

// Ollama /api/chat and /api/embed.
function ollamaChat(res, json) {
  if (lastUser(json) === FAIL) {
    writeJson(res, 400, { error: 'the fake refuses this request' });
    return;
  }
  const at = () => new Date().toISOString();
  const counts = { total_duration: 812000000, load_duration: 21000000, prompt_eval_count: 26, prompt_eval_duration: 130000000, eval_count: 7, eval_duration: 650000000 };
  const call = { function: { name: 'get_weather', arguments: { city: 'Paris' } } };
  const tools = offersTools(json);
  if (!json.stream) {
    writeJson(res, 200, {
      model: json.model,
      created_at: at(),
      message: tools ? { role: 'assistant', content: '', tool_calls: [call] } : { role: 'assistant', content: WORDS.join('') },
      done_reason: 'stop',
      done: true,
      ...counts,
    });
    return;
  }
  res.writeHead(200, { 'content-type': 'application/x-ndjson' });
  const line = (message) => res.write(JSON.stringify({ model: json.model, created_at: at(), message, done: false }) + '\n');
  if (tools) line({ role: 'assistant', content: '', tool_calls: [call] });
  else for (const w of WORDS) line({ role: 'assistant', content: w });
  if (lastUser(json) === FAIL_MIDWAY) {
    res.end(JSON.stringify({ error: 'the fake failed midway' }) + '\n');
    return;
  }
  res.end(JSON.stringify({ model: json.model, created_at: at(), message: { role: 'assistant', content: '' }, done_reason: 'stop', done: true, ...counts }) + '\n');
}

function ollamaEmbed(res, json) {
  const inputs = Array.isArray(json.input) ? json.input : [json.input];
  writeJson(res, 200, {
    model: json.model,
    embeddings: inputs.map((_, i) => [0.125 * (i + 1), -0.5, 0.25, 0.0625]),
    total_duration: 14000000,
    load_duration: 1000000,
    prompt_eval_count: 4 * inputs.length,
  });
}

// Anthropic /v1/messages.
function anthropicMessages(res, json) {
  if (lastUser(json) === FAIL) {
    writeJson(res, 400, { type: 'error', error: { type: 'invalid_request_error', message: 'messages: the fake refuses' }, request_id: 'req_fake01' });
    return;
  }
  const tools = offersTools(json);
  const usage = (output) => ({ input_tokens: 384, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: output, service_tier: 'standard' });
  const message = { id: 'msg_01Fake', type: 'message', role: 'assistant', model: json.model };
  if (!json.stream) {
    writeJson(res, 200, {
      ...message,
      content: tools
        ? [{ type: 'text', text: 'Let me check.' }, { type: 'tool_use', id: 'toolu_01Fake', name: 'get_weather', input: { city: 'Paris' } }]
        : [{ type: 'text', text: WORDS.join('') }],
      stop_reason: tools ? 'tool_use' : 'end_turn',
      stop_sequence: null,
      usage: usage(tools ? 41 : 5),
    });
    return;
  }
  const ev = (type, data) => res.write(`event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`);
  res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8' });
  ev('message_start', { message: { ...message, content: [], stop_reason: null, stop_sequence: null, usage: usage(1) } });
  ev('content_block_start', { index: 0, content_block: { type: 'text', text: '' } });
  ev('ping', {});
  for (const w of tools ? ['Let me ', 'check.'] : WORDS) ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: w } });
  if (lastUser(json) === FAIL_MIDWAY) {
    ev('error', { error: { type: 'overloaded_error', message: 'Overloaded' } });
    res.end();
    return;
  }
  ev('content_block_stop', { index: 0 });
  if (tools) {
    ev('content_block_start', { index: 1, content_block: { type: 'tool_use', id: 'toolu_01Fake', name: 'get_weather', input: {} } });
    for (const part of ['', '{"city": ', '"Paris"}']) ev('content_block_delta', { index: 1, delta: { type: 'input_json_delta', partial_json: part } });
    ev('content_block_stop', { index: 1 });
  }
  ev('message_delta', { delta: { stop_reason: tools ? 'tool_use' : 'end_turn', stop_sequence: null }, usage: { output_tokens: tools ? 41 : 5 } });
  ev('message_stop', {});
  res.end();
}

function fakes(req, res, json) {
  if (req.method !== 'POST') return false;
  const url = req.url.split('?')[0];
  if (url === '/v1/chat/completions') openaiChat(res, json);
  else if (url === '/api/chat') ollamaChat(res, json);
  else if (url === '/api/embed') ollamaEmbed(res, json);
  else if (url === '/v1/messages') anthropicMessages(res, json);
  else return false;
  return true;
}

// ---- the gateway --------------------------------------------------------------------------

before(async () => {
  [sim, fake] = await Promise.all([startSim({ ttft: '5ms', 'inter-token': '1ms', 'default-output-tokens': 5 }), startRecorder(fakes)]);
  gw = await startGateway({
    instance: 'it-conformance',
    keys: [
      { name: 'conformance', key: KEY, tenant: 'acme', tier: 'gold', models: ['*'] },
      { name: 'limited', key: LIMITED_KEY, models: ['simulated'] },
    ],
    models: [
      { alias: 'simulated', provider: 'simulated', sim: { ttft: '1ms', inter_token: '1ms', jitter: 0 } },
      { alias: 'openai-sim', provider: 'openai', base_url: `${sim.url}/v1`, model: 'sluice-sim' },
      { alias: 'openai-fake', provider: 'openai', base_url: `${fake.url}/v1`, model: 'gpt-fake' },
      { alias: 'ollama', provider: 'ollama', base_url: fake.url, model: 'llama-fake' },
      { alias: 'anthropic', provider: 'anthropic', base_url: fake.url, model: 'claude-fake', api_key: 'sk-ant-fake-0123456789' },
    ],
  });
});

after(async () => {
  await Promise.all([gw?.stop(), sim?.stop(), fake?.close()]);
});

// Every kind of route. The OpenAI-compatible kind twice: in front of a `sluice sim` process,
// and of a fake that answers as the OpenAI API does (field for field). `tools`: its upstream
// calls a tool when offered one (the simulators call one only when asked: see "the
// simulator's answers" below); `fails`: its upstream answers FAIL with its API's error and
// FAIL_MIDWAY with a stream that breaks off.
const ROUTES = [
  { kind: 'simulated', alias: 'simulated', sim: true },
  { kind: 'openai (sluice sim)', alias: 'openai-sim', sim: true },
  { kind: 'openai (OpenAI-shaped fake)', alias: 'openai-fake', tools: true, fails: true },
  { kind: 'ollama', alias: 'ollama', tools: true, fails: true },
  { kind: 'anthropic', alias: 'anthropic', tools: true, fails: true },
];

const COMPLETION = 'CreateChatCompletionResponse';
const CHUNK = 'CreateChatCompletionStreamResponse';
const ERROR = 'ErrorResponse';

// The chunks of an answered stream (parsed), after checking it is an event stream that ends
// with one [DONE].
function chunksOf(r, what) {
  assert.equal(r.status, 200, `${what}: HTTP ${r.status}: ${r.raw}`);
  assert.match(r.headers.get('content-type') ?? '', /^text\/event-stream/, what);
  const data = r.events.filter((e) => e.data !== undefined);
  assert.equal(data.at(-1)?.data, '[DONE]', `${what}: the last event is [DONE]`);
  assert.equal(data.filter((e) => e.data === '[DONE]').length, 1, `${what}: one [DONE]`);
  const chunks = data.slice(0, -1);
  for (const c of chunks) assert.ok(c.json !== undefined, `${what}: an event that is not JSON: ${c.data}`);
  assert.ok(chunks.length > 0, `${what}: no chunk`);
  return chunks.map((c) => c.json);
}

// Every chunk against the chunk schema; one failure lists every error, each with the
// chunks it was found in.
function assertChunksValid(chunks, what) {
  const found = new Map();
  chunks.forEach((c, i) => {
    for (const e of validate(CHUNK, c)) {
      if (!found.has(e)) found.set(e, []);
      found.get(e).push(i);
    }
  });
  if (found.size === 0) return;
  const lines = [...found].map(([e, at]) => `chunk ${at.join(',')} of ${chunks.length}: ${e}`);
  assert.fail(`${what}: chunks that are not valid ${CHUNK}:\n  ${lines.join('\n  ')}\nfirst chunk: ${JSON.stringify(chunks[0])}`);
}

// The tool calls of a stream, assembled from the deltas.
function streamedCalls(chunks) {
  const calls = [];
  for (const c of chunks) {
    for (const tc of c.choices?.[0]?.delta?.tool_calls ?? []) {
      calls[tc.index] ??= { id: '', type: '', name: '', arguments: '' };
      if (tc.id) calls[tc.index].id = tc.id;
      if (tc.type) calls[tc.index].type = tc.type;
      if (tc.function?.name) calls[tc.index].name = tc.function.name;
      calls[tc.index].arguments += tc.function?.arguments ?? '';
    }
  }
  return calls;
}

const finishOf = (chunks) => chunks.map((c) => c.choices?.[0]?.finish_reason).filter(Boolean);

function assertStreamedUsage(chunks, what) {
  const last = chunks.at(-1);
  assert.deepEqual(last.choices, [], `${what}: the usage chunk has no choices`);
  assert.ok(last.usage && typeof last.usage === 'object', `${what}: the last chunk carries usage: ${JSON.stringify(last)}`);
  assert.equal(last.usage.total_tokens, last.usage.prompt_tokens + last.usage.completion_tokens, what);
}

// ---- the validator itself ----------------------------------------------------------------

describe('the schemas and the validator', () => {
  const completion = {
    id: 'chatcmpl-1',
    object: 'chat.completion',
    created: 1,
    model: 'm',
    choices: [{ index: 0, message: { role: 'assistant', content: 'hi', refusal: null }, logprobs: null, finish_reason: 'stop' }],
    usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
  };
  const chunk = {
    id: 'chatcmpl-1',
    object: 'chat.completion.chunk',
    created: 1,
    model: 'm',
    choices: [{ index: 0, delta: { content: 'hi' }, finish_reason: null }],
  };

  test('come from the pinned OpenAPI document, every root present and compiling', () => {
    assert.equal(SOURCE.repository, 'openai/openai-openapi');
    assert.match(SOURCE.commit, /^[0-9a-f]{40}$/);
    const names = schemaNames();
    for (const root of [COMPLETION, CHUNK, 'CreateEmbeddingResponse', 'ListModelsResponse', 'Model', ERROR, 'CreateChatCompletionRequest', 'CreateEmbeddingRequest', 'Response', 'ResponseStreamEvent', 'CreateResponse']) {
      assert.ok(names.includes(root), root);
      assert.equal(typeof validator(root), 'function', root);
    }
  });

  test('accepts what the OpenAI API answers', () => {
    assertValid(COMPLETION, completion);
    assertValid(CHUNK, chunk);
    assertValid(CHUNK, { ...chunk, usage: null });
    assertValid(CHUNK, { ...chunk, choices: [], usage: { prompt_tokens: 1, completion_tokens: 2, total_tokens: 3 } });
    assertValid(ERROR, { error: { message: 'm', type: 'invalid_request_error', param: null, code: null } });
    assertValid('ListModelsResponse', { object: 'list', data: [{ id: 'a', object: 'model', created: 0, owned_by: 'x' }] });
    assertValid('CreateEmbeddingResponse', {
      object: 'list',
      model: 'e',
      data: [{ object: 'embedding', index: 0, embedding: [0.5, -1] }],
      usage: { prompt_tokens: 2, total_tokens: 2 },
    });
  });

  test('rejects broken bodies, naming the path', () => {
    const { choices, ...noChoices } = completion;
    assert.ok(choices);
    assert.match(validate(COMPLETION, noChoices).join('\n'), /^\/: must have required property 'choices'/m);
    assert.match(validate(CHUNK, { ...chunk, usage: 'x' }).join('\n'), /^\/usage: must be object/m);
    // nullable: null is fine where the document says nullable, not elsewhere.
    assert.deepEqual(validate(CHUNK, { ...chunk, choices: [{ ...chunk.choices[0], finish_reason: 'bored' }] }).length > 0, true);
    assert.match(validate(CHUNK, { ...chunk, id: null }).join('\n'), /^\/id: must be string/m);
    const badMessage = structuredClone(completion);
    delete badMessage.choices[0].message.refusal;
    badMessage.choices[0].logprobs = 'none';
    const errors = validate(COMPLETION, badMessage).join('\n');
    assert.match(errors, /^\/choices\/0\/message: must have required property 'refusal'/m);
    assert.match(errors, /^\/choices\/0\/logprobs: must be object/m);
    assert.match(validate(ERROR, { error: { message: 'm', type: 't' } }).join('\n'), /required property 'param'/);
    assert.match(validate('Model', { id: 'a', object: 'model', created: '0', owned_by: 'x' }).join('\n'), /^\/created: must be integer/m);
    // A discriminated union names the unknown tag.
    const toolCall = structuredClone(completion);
    toolCall.choices[0].message.tool_calls = [{ id: 'c', type: 'telepathy', function: { name: 'f', arguments: '{}' } }];
    assert.match(validate(COMPLETION, toolCall).join('\n'), /tool_calls\/0: value of tag "type" must be in oneOf/);
    assert.throws(() => assertValid(COMPLETION, noChoices, 'a completion without choices'), /a completion without choices: not a valid/);
  });

  test('the requests this suite sends are valid CreateChatCompletionRequests', () => {
    for (const body of [
      { model: 'm', messages: USER },
      { model: 'm', messages: USER, stream: true, stream_options: { include_usage: true } },
      { model: 'm', messages: TOOL_MESSAGES, tools: [WEATHER_TOOL], max_tokens: 100 },
    ]) {
      assertValid('CreateChatCompletionRequest', body);
    }
    assert.ok(validate('CreateChatCompletionRequest', { model: 'm' }).length > 0, 'messages is required');
  });
});

// ---- chat completions, route by route ---------------------------------------------------

for (const route of ROUTES) {
  describe(`${route.kind} route`, () => {
    test('a chat completion is a CreateChatCompletionResponse', async () => {
      const r = await chat(gw, { model: route.alias, messages: USER, max_tokens: 5 });
      assert.equal(r.status, 200, r.text);
      assertValid(COMPLETION, r.json, `${route.kind}: a chat completion`);
    });

    test('the Responses API: a Response, and every stream event a ResponseStreamEvent', async () => {
      const body = { model: route.alias, input: 'Say something.', max_output_tokens: 5, store: false };
      if (route.tools) body.tools = [{ type: 'function', name: 'get_weather', parameters: WEATHER_TOOL.function.parameters, strict: false }];
      if (route.tools) body.input = 'What is the weather in Paris?';
      const whole = await request(`${gw.url}/v1/responses`, { method: 'POST', key: KEY, body });
      assert.equal(whole.status, 200, whole.text);
      assertValid('Response', whole.json, `${route.kind}: a Response`);
      if (route.tools) assert.equal(whole.json.output.at(-1).type, 'function_call', whole.text);
      const r = await sse(`${gw.url}/v1/responses`, { ...body, stream: true });
      assert.equal(r.status, 200, r.raw);
      const events = r.events.filter((e) => e.data !== undefined).map((e) => e.json);
      assert.ok(events.length >= 3, r.raw);
      for (const e of events) assertValid('ResponseStreamEvent', e, `${route.kind}: ${e?.type}`);
      assert.ok(['response.completed', 'response.incomplete'].includes(events.at(-1).type), r.raw);
      assertValid('Response', events.at(-1).response, `${route.kind}: the streamed Response`);
    });

    test('every chunk of a stream is a CreateChatCompletionStreamResponse', async () => {
      const r = await sse(`${gw.url}/v1/chat/completions`, { model: route.alias, messages: USER, max_tokens: 5, stream: true });
      const chunks = chunksOf(r, `${route.kind}: stream`);
      assertChunksValid(chunks, `${route.kind}: stream`);
      assert.equal(finishOf(chunks).length, 1, 'one finish_reason');
      assert.ok(!chunks.some((c) => c.usage), 'no usage without include_usage');
    });

    test('with include_usage, every chunk is valid and the last carries the usage', async () => {
      const r = await sse(`${gw.url}/v1/chat/completions`, {
        model: route.alias,
        messages: USER,
        max_tokens: 5,
        stream: true,
        stream_options: { include_usage: true },
      });
      const chunks = chunksOf(r, `${route.kind}: stream with usage`);
      assertChunksValid(chunks, `${route.kind}: stream with usage`);
      assertStreamedUsage(chunks, `${route.kind}: stream with usage`);
    });

    // The schema's description of `usage`: "An optional field that will only be present
    // when you set stream_options: {include_usage: true} in your request. When present, it
    // contains a null value except for the last chunk". A client may rely on either.
    test('with include_usage, the chunks before the last carry usage: null', async () => {
      const r = await sse(`${gw.url}/v1/chat/completions`, {
        model: route.alias,
        messages: USER,
        max_tokens: 5,
        stream: true,
        stream_options: { include_usage: true },
      });
      const chunks = chunksOf(r, `${route.kind}: stream with usage`);
      const wrong = chunks.slice(0, -1).flatMap((c, i) => (c.usage === null ? [] : [i]));
      if (wrong.length) assert.fail(`${route.kind}: chunks ${wrong.join(',')} of ${chunks.length} have no "usage": null; chunk ${wrong[0]}: ${JSON.stringify(chunks[wrong[0]])}`);
    });

    test('without include_usage, no chunk has a usage field', async () => {
      const r = await sse(`${gw.url}/v1/chat/completions`, { model: route.alias, messages: USER, max_tokens: 5, stream: true });
      const chunks = chunksOf(r, `${route.kind}: stream`);
      const wrong = chunks.flatMap((c, i) => ('usage' in c ? [i] : []));
      if (wrong.length) assert.fail(`${route.kind}: chunks ${wrong.join(',')} of ${chunks.length} have a usage field the client did not ask for; chunk ${wrong[0]}: ${JSON.stringify(chunks[wrong[0]])}`);
    });

    if (route.tools) {
      test('a tool call, not streamed, is a CreateChatCompletionResponse with tool_calls', async () => {
        const body = { model: route.alias, messages: TOOL_MESSAGES, tools: [WEATHER_TOOL], max_tokens: 100 };
        const r = await chat(gw, body);
        assert.equal(r.status, 200, r.text);
        assertValid(COMPLETION, r.json, `${route.kind}: a tool call`);
        const choice = r.json.choices[0];
        assert.equal(choice.finish_reason, 'tool_calls');
        assert.equal(choice.message.tool_calls.length, 1);
        const call = choice.message.tool_calls[0];
        assert.equal(call.type, 'function');
        assert.equal(call.function.name, 'get_weather');
        assert.deepEqual(JSON.parse(call.function.arguments), { city: 'Paris' });
      });

      test('a tool call, streamed: every chunk is valid and the deltas assemble the call', async () => {
        const r = await sse(`${gw.url}/v1/chat/completions`, {
          model: route.alias,
          messages: TOOL_MESSAGES,
          tools: [WEATHER_TOOL],
          max_tokens: 100,
          stream: true,
          stream_options: { include_usage: true },
        });
        const chunks = chunksOf(r, `${route.kind}: streamed tool call`);
        assertChunksValid(chunks, `${route.kind}: streamed tool call`);
        assert.deepEqual(finishOf(chunks), ['tool_calls']);
        const calls = streamedCalls(chunks);
        assert.equal(calls.length, 1, JSON.stringify(calls));
        assert.equal(calls[0].type, 'function');
        assert.equal(calls[0].name, 'get_weather');
        assert.ok(calls[0].id, 'the call has an id');
        assert.deepEqual(JSON.parse(calls[0].arguments), { city: 'Paris' });
        assertStreamedUsage(chunks, `${route.kind}: streamed tool call`);
      });
    } else {
      test('tools offered but not asked for (the simulator answers text): still a valid completion and stream', async () => {
        const body = { model: route.alias, messages: TOOL_MESSAGES, tools: [WEATHER_TOOL], max_tokens: 4 };
        const s = await sse(`${gw.url}/v1/chat/completions`, { ...body, stream: true });
        assertChunksValid(chunksOf(s, `${route.kind}: tools offered, streamed`), `${route.kind}: tools offered, streamed`);
        const r = await chat(gw, body);
        assert.equal(r.status, 200, r.text);
        assertValid(COMPLETION, r.json, `${route.kind}: tools offered`);
      });
    }

    if (route.fails) {
      test("an upstream's error reaches the client as an ErrorResponse, streamed or not", async () => {
        const messages = [{ role: 'user', content: FAIL }];
        const r = await chat(gw, { model: route.alias, messages });
        assert.ok(r.status >= 400, `HTTP ${r.status}: ${r.text}`);
        assertValid(ERROR, r.json, `${route.kind}: upstream error, HTTP ${r.status}`);
        const s = await sse(`${gw.url}/v1/chat/completions`, { model: route.alias, messages, stream: true });
        assert.ok(s.status >= 400, `HTTP ${s.status}: ${s.raw}`);
        assertValid(ERROR, JSON.parse(s.raw), `${route.kind}: upstream error before a stream, HTTP ${s.status}`);
      });

      test('a stream that fails midway: valid chunks, then an error event that is an ErrorResponse', async () => {
        const r = await sse(`${gw.url}/v1/chat/completions`, { model: route.alias, messages: [{ role: 'user', content: FAIL_MIDWAY }], stream: true });
        const events = chunksOf(r, `${route.kind}: failed stream`);
        const last = events.at(-1);
        assert.ok(last.error, `the last event is an error: ${JSON.stringify(last)}`);
        assertValid(ERROR, last, `${route.kind}: the error event`);
        assertChunksValid(events.slice(0, -1), `${route.kind}: chunks before the error`);
      });
    }
  });
}

// ---- the simulator's answers: tool calls, JSON, log probabilities, stop ------------------
// Through both simulator routes (in-process and a `sluice sim` process behind an openai
// route): what the simulator answers for the features clients use is still a valid
// CreateChatCompletionResponse / every chunk a valid CreateChatCompletionStreamResponse.

const ASKS_FOR_TOOL = [{ role: 'user', content: 'Use get_weather for Paris, please.' }];
const SCHEMA_FORMAT = {
  type: 'json_schema',
  json_schema: {
    name: 'forecast',
    strict: true,
    schema: {
      type: 'object',
      properties: { city: { type: 'string' }, days: { type: 'integer' }, rain: { type: 'boolean' }, temps: { type: 'array', items: { type: 'number' } } },
      required: ['city', 'days', 'rain', 'temps'],
      additionalProperties: false,
    },
  },
};

function assertForecast(text, what) {
  const o = JSON.parse(text);
  assert.equal(typeof o.city, 'string', what);
  assert.ok(Number.isInteger(o.days), what);
  assert.equal(typeof o.rain, 'boolean', what);
  assert.ok(Array.isArray(o.temps) && o.temps.every((t) => typeof t === 'number'), what);
}

for (const route of ROUTES.filter((r) => r.sim)) {
  describe(`${route.kind} route: the simulator's answers`, () => {
    test('a tool call asked for by name: a valid completion with tool_calls, arguments from the schema', async () => {
      const r = await chat(gw, { model: route.alias, messages: ASKS_FOR_TOOL, tools: [WEATHER_TOOL], max_tokens: 100 });
      assert.equal(r.status, 200, r.text);
      assertValid(COMPLETION, r.json, `${route.kind}: a tool call`);
      const choice = r.json.choices[0];
      assert.equal(choice.finish_reason, 'tool_calls');
      assert.equal(choice.message.content, null);
      const [call] = choice.message.tool_calls;
      assert.equal(call.type, 'function');
      assert.equal(call.function.name, 'get_weather');
      assert.match(call.id, /^call_/);
      assert.equal(typeof JSON.parse(call.function.arguments).city, 'string');
    });

    test('a tool call, streamed (tool_choice required): valid chunks that assemble the call', async () => {
      const r = await sse(`${gw.url}/v1/chat/completions`, {
        model: route.alias,
        messages: USER,
        tools: [WEATHER_TOOL],
        tool_choice: 'required',
        max_tokens: 100,
        stream: true,
        stream_options: { include_usage: true },
      });
      const chunks = chunksOf(r, `${route.kind}: streamed tool call`);
      assertChunksValid(chunks, `${route.kind}: streamed tool call`);
      assert.deepEqual(finishOf(chunks), ['tool_calls']);
      const calls = streamedCalls(chunks);
      assert.equal(calls.length, 1, JSON.stringify(calls));
      assert.equal(calls[0].name, 'get_weather');
      assert.ok(calls[0].id);
      assert.equal(typeof JSON.parse(calls[0].arguments).city, 'string');
      assertStreamedUsage(chunks, `${route.kind}: streamed tool call`);
      // One token per chunk: the head and each piece of the arguments.
      assert.equal(chunks.at(-1).usage.completion_tokens, chunks.filter((c) => c.choices[0]?.delta?.tool_calls).length);
    });

    test('after the tool result, text again', async () => {
      const messages = [
        ...ASKS_FOR_TOOL,
        { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
        { role: 'tool', tool_call_id: 'call_1', content: 'sunny, 21 C' },
      ];
      const r = await chat(gw, { model: route.alias, messages, tools: [WEATHER_TOOL], max_tokens: 6 });
      assert.equal(r.status, 200, r.text);
      assertValid(COMPLETION, r.json, `${route.kind}: the answer after a tool result`);
      assert.equal(r.json.choices[0].message.content, simText(6));
      assert.equal(r.json.choices[0].message.tool_calls, undefined);
    });

    test('a json_schema response format: a valid completion and stream whose content is such an object', async () => {
      const body = { model: route.alias, messages: USER, response_format: SCHEMA_FORMAT, max_tokens: 200 };
      const r = await chat(gw, body);
      assert.equal(r.status, 200, r.text);
      assertValid(COMPLETION, r.json, `${route.kind}: json_schema`);
      assert.equal(r.json.choices[0].finish_reason, 'stop');
      assertForecast(r.json.choices[0].message.content, `${route.kind}: json_schema`);
      const s = await sse(`${gw.url}/v1/chat/completions`, { ...body, stream: true });
      const chunks = chunksOf(s, `${route.kind}: json_schema streamed`);
      assertChunksValid(chunks, `${route.kind}: json_schema streamed`);
      assert.ok(chunks.length > 10, 'streamed piece by piece');
      assert.equal(assembled(s.events), r.json.choices[0].message.content);
    });

    test('logprobs: valid, one entry per token, in the completion and in each chunk', async () => {
      const body = { model: route.alias, messages: USER, max_tokens: 4, logprobs: true, top_logprobs: 3, seed: 5 };
      const r = await chat(gw, body);
      assert.equal(r.status, 200, r.text);
      assertValid(COMPLETION, r.json, `${route.kind}: logprobs`);
      const { content } = r.json.choices[0].logprobs;
      assert.deepEqual(content.map((e) => e.token), simTokens(4, 5));
      assert.deepEqual(content.map((e) => e.logprob), [0, 1, 2, 3].map((i) => simLogprob(i, 5)));
      for (const e of content) {
        assert.deepEqual(e.bytes, [...Buffer.from(e.token)]);
        assert.equal(e.top_logprobs.length, 3);
        assert.equal(e.top_logprobs[0].token, e.token);
      }
      const s = await sse(`${gw.url}/v1/chat/completions`, { ...body, stream: true });
      const chunks = chunksOf(s, `${route.kind}: logprobs streamed`);
      assertChunksValid(chunks, `${route.kind}: logprobs streamed`);
      const streamed = chunks.flatMap((c) => c.choices[0]?.logprobs?.content ?? []);
      assert.deepEqual(streamed, content);
    });

    test('stop: the content ends before it, finish_reason stop', async () => {
      const text = simText(30, 9);
      const cut = text.indexOf(' ', text.indexOf(' ') + 1);  // the stop: the third word with its space
      const stop = text.slice(cut, text.indexOf(' ', cut + 1));
      const r = await chat(gw, { model: route.alias, messages: USER, seed: 9, max_tokens: 30, stop: [stop] });
      assert.equal(r.status, 200, r.text);
      assertValid(COMPLETION, r.json, `${route.kind}: stop`);
      assert.equal(r.json.choices[0].message.content, text.slice(0, text.indexOf(stop)));
      assert.equal(r.json.choices[0].finish_reason, 'stop');
    });
  });
}

// ---- errors the gateway itself answers ---------------------------------------------------

describe('error bodies are ErrorResponses', () => {
  const post = (body, headers = {}, key = KEY) =>
    request(`${gw.url}/v1/chat/completions`, { method: 'POST', key, headers: { 'content-type': 'application/json', ...headers }, body });

  const cases = [
    ['an unknown model (404)', 404, () => post({ model: 'no-such-model', messages: USER })],
    ['a body that is not JSON (400)', 400, () => post('{"model":')],
    ['no messages (400)', 400, () => post({ model: 'simulated' })],
    ['an out-of-range parameter (400)', 400, () => post({ model: 'simulated', messages: USER, temperature: 5 })],
    ['no key (401)', 401, () => post({ model: 'simulated', messages: USER }, {}, null)],
    ['a wrong key (401)', 401, () => post({ model: 'simulated', messages: USER }, {}, BAD_KEY)],
    ['a model the key may not use (403)', 403, () => post({ model: 'ollama', messages: USER }, {}, LIMITED_KEY)],
    ['an unknown model, streamed (404)', 404, () => post({ model: 'no-such-model', messages: USER, stream: true })],
    ['an unknown model on GET /v1/models/{id} (404)', 404, () => request(`${gw.url}/v1/models/no-such-model`, { key: KEY })],
    ['no key on GET /v1/models (401)', 401, () => request(`${gw.url}/v1/models`)],
    ['an unknown model on POST /v1/embeddings (404)', 404, () => request(`${gw.url}/v1/embeddings`, { method: 'POST', key: KEY, body: { model: 'no-such-model', input: 'x' } })],
  ];
  for (const [what, status, send] of cases) {
    test(what, async () => {
      const r = await send();
      assert.equal(r.status, status, r.text);
      assert.match(r.headers.get('content-type') ?? '', /^application\/json/);
      assertValid(ERROR, r.json, what);
    });
  }

  test('a wrong method (405) and an unknown path under /v1 (404)', async () => {
    for (const [p, method, status] of [
      ['/v1/chat/completions', 'GET', 405],
      ['/v1/no-such-endpoint', 'POST', 404],
    ]) {
      const r = await rawRequest({ port: gw.port, method, path: p, headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' }, body: method === 'POST' ? '{}' : undefined });
      assert.equal(r.status, status, `${method} ${p}: ${r.body}`);
      assertValid(ERROR, JSON.parse(r.body), `${method} ${p}`);
    }
  });
});

// ---- models ------------------------------------------------------------------------------

describe('models', () => {
  test('GET /v1/models is a ListModelsResponse naming every route', async () => {
    const r = await request(`${gw.url}/v1/models`, { key: KEY });
    assert.equal(r.status, 200, r.text);
    assertValid('ListModelsResponse', r.json, 'GET /v1/models');
    assert.deepEqual(r.json.data.map((m) => m.id).sort(), ['anthropic', 'ollama', 'openai-fake', 'openai-sim', 'simulated']);
    const limited = await request(`${gw.url}/v1/models`, { key: LIMITED_KEY });
    assertValid('ListModelsResponse', limited.json, 'GET /v1/models, a limited key');
  });

  test('GET /v1/models/{id} is a Model, for every kind of route', async () => {
    for (const id of ['simulated', 'openai-sim', 'ollama', 'anthropic']) {
      const r = await request(`${gw.url}/v1/models/${id}`, { key: KEY });
      assert.equal(r.status, 200, r.text);
      assertValid('Model', r.json, `GET /v1/models/${id}`);
      assert.equal(r.json.id, id);
    }
  });
});

// ---- embeddings --------------------------------------------------------------------------

describe('embeddings', () => {
  const embed = (body) => request(`${gw.url}/v1/embeddings`, { method: 'POST', key: KEY, body });

  test('the simulated route: a CreateEmbeddingResponse', async () => {
    const body = { model: 'simulated', input: ['the cat sat', 'on the mat'], encoding_format: 'float' };
    assertValid('CreateEmbeddingRequest', body);
    const r = await embed(body);
    assert.equal(r.status, 200, r.text);
    assertValid('CreateEmbeddingResponse', r.json, 'simulated embeddings');
    assert.equal(r.json.data.length, 2);
  });

  test('an Ollama route (/api/embed): a CreateEmbeddingResponse', async () => {
    const n = fake.requests.length;
    const r = await embed({ model: 'ollama', input: ['a', 'b'] });
    assert.equal(r.status, 200, r.text);
    assert.equal(fake.requests[n]?.url, '/api/embed');
    assertValid('CreateEmbeddingResponse', r.json, 'ollama embeddings');
    assert.deepEqual(r.json.data[1].embedding, [0.25, -0.5, 0.25, 0.0625]);
  });
});

// ---- what the gateway sends an OpenAI upstream -------------------------------------------

describe('requests to an OpenAI-compatible upstream', () => {
  test('are valid CreateChatCompletionRequests, streamed or not, with tools', async () => {
    const n = fake.requests.length;
    const base = { model: 'openai-fake', messages: TOOL_MESSAGES, tools: [WEATHER_TOOL], tool_choice: 'auto', max_tokens: 100, temperature: 0.5 };
    assert.equal((await chat(gw, base)).status, 200);
    const s = await sse(`${gw.url}/v1/chat/completions`, { ...base, stream: true });
    assert.equal(s.status, 200);
    const sent = fake.requests.slice(n).filter((q) => q.url === '/v1/chat/completions');
    assert.equal(sent.length, 2);
    for (const [i, q] of sent.entries()) assertValid('CreateChatCompletionRequest', q.json, `upstream request ${i}`);
  });
});
