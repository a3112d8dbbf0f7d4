// The simulator's Responses API (POST /v1/responses on a `sluice sim` process, spoken to
// directly): every Response and every stream event validated against OpenAI's schemas,
// the text simText() predicts, JSON output, tool calls, the reasoning item, the limit,
// faults, the `responses` counter, and the official openai SDK (docs/simulator.md).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { simText, simTokens, sse, startSim } from './lib.mjs';
import { assertValid } from './openai_schema.mjs';

let sim;

before(async () => {
  sim = await startSim({ ttft: '1ms', 'inter-token': '0ms', 'default-output-tokens': 12 });
});

after(async () => {
  await sim?.stop();
});

const WEATHER = {
  type: 'object',
  properties: { city: { type: 'string' }, days: { type: 'integer', minimum: 1, maximum: 7 } },
  required: ['city', 'days'],
};
const WEATHER_TOOL = { type: 'function', name: 'get_weather', description: 'Weather of a city', parameters: WEATHER, strict: true };

// The reasoning summary: the first sentence of the text for seed 1.
const SUMMARY = simText(40, 1).split(/(?<=\.) /)[0];

async function post(body, headers = {}) {
  const res = await fetch(`${sim.url}/v1/responses`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, text, json: res.headers.get('content-type')?.startsWith('application/json') ? JSON.parse(text) : undefined };
}

// A Response, checked against the schema.
async function respond(body) {
  const r = await post(body);
  assert.equal(r.status, 200, r.text);
  assertValid('Response', r.json, 'a Response');
  return r.json;
}

// The stream's events, each checked: valid by the schema, its `event:` line its type,
// numbered from 0, no [DONE]; the last one's Response valid too.
async function streamed(body, headers = {}) {
  const r = await sse(`${sim.url}/v1/responses`, { ...body, stream: true }, { key: null, headers });
  assert.equal(r.status, 200, r.raw);
  assert.ok(!r.raw.includes('[DONE]'), r.raw);
  const events = r.events.filter((e) => e.data !== undefined);
  for (const e of events) {
    assertValid('ResponseStreamEvent', e.json, e.event);
    assert.equal(e.event, e.json.type);
  }
  const data = events.map((e) => e.json);
  assert.deepEqual(data.map((e) => e.sequence_number), data.map((_, i) => i));
  return { events: data, ended: r.ended };
}

function last(events) {
  const e = events.at(-1);
  assertValid('Response', e.response, `the Response of ${e.type}`);
  return e.response;
}

const of = (events, type) => events.filter((e) => e.type === type);

describe('simulator Responses API: text', () => {
  test('not streamed: the text, completed, usage and what the request set echoed', async () => {
    const r = await respond({
      model: 'gpt-sim', input: 'Tell me something.', instructions: 'Be brief.', metadata: { run: '1' }, temperature: 0.2, store: false,
    });
    assert.match(r.id, /^resp_[0-9a-f]{32}$/);
    assert.equal(r.object, 'response');
    assert.equal(r.status, 'completed');
    assert.equal(r.model, 'gpt-sim');
    assert.equal(r.output.length, 1);
    assert.equal(r.output[0].type, 'message');
    assert.equal(r.output[0].id, `msg_${r.id.slice(5)}`);
    assert.equal(r.output[0].status, 'completed');
    assert.deepEqual(r.output[0].content, [{ type: 'output_text', text: simText(12), annotations: [], logprobs: [] }]);
    assert.equal(r.instructions, 'Be brief.');
    assert.deepEqual(r.metadata, { run: '1' });
    assert.equal(r.temperature, 0.2);
    assert.equal(r.store, false);
    assert.equal(r.previous_response_id, null);
    // (18 + 9 bytes) / 4
    assert.deepEqual(r.usage, {
      input_tokens: 6, input_tokens_details: { cached_tokens: 0, cache_write_tokens: 0 },
      output_tokens: 12, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 18,
    });
  });

  test('streamed: one output_text.delta per token, then the item closed and response.completed', async () => {
    const { events } = await streamed({ model: 'm', input: [{ role: 'user', content: [{ type: 'input_text', text: 'Hi.' }] }] });
    assert.deepEqual(events.slice(0, 4).map((e) => e.type), ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added']);
    assert.equal(events[0].response.status, 'in_progress');
    assert.deepEqual(events[0].response.output, []);
    assert.equal(events[0].response.usage, undefined);
    assert.deepEqual(of(events, 'response.output_text.delta').map((e) => e.delta), simTokens(12));
    assert.equal(of(events, 'response.output_text.done')[0].text, simText(12));
    assert.deepEqual(events.slice(-3).map((e) => e.type), ['response.content_part.done', 'response.output_item.done', 'response.completed']);
    const r = last(events);
    assert.equal(r.status, 'completed');
    assert.equal(r.output[0].content[0].text, simText(12));
    assert.equal(r.usage.output_tokens, 12);
  });

  test('max_output_tokens: cut there, status incomplete with reason max_output_tokens, streamed and not', async () => {
    const body = { model: 'm', input: 'Say something.', max_output_tokens: 5 };
    const r = await respond(body);
    assert.equal(r.status, 'incomplete');
    assert.deepEqual(r.incomplete_details, { reason: 'max_output_tokens' });
    assert.equal(r.output[0].status, 'incomplete');
    assert.equal(r.output[0].content[0].text, simText(5));
    assert.equal(r.max_output_tokens, 5);
    assert.equal(r.usage.output_tokens, 5);
    const { events } = await streamed(body);
    assert.equal(events.at(-1).type, 'response.incomplete');
    assert.equal(of(events, 'response.output_text.delta').length, 5);
    assert.deepEqual(last(events).incomplete_details, { reason: 'max_output_tokens' });
  });
});

describe('simulator Responses API: JSON, tools, reasoning', () => {
  test('text.format json_schema: an object with the required properties, streamed piece by piece', async () => {
    const body = { model: 'm', input: 'Weather?', text: { format: { type: 'json_schema', name: 'weather', schema: WEATHER, strict: true } } };
    const r = await respond(body);
    assert.equal(r.status, 'completed');
    assert.deepEqual(r.text, body.text);
    const o = JSON.parse(r.output[0].content[0].text);
    assert.deepEqual(Object.keys(o), ['city', 'days']);
    assert.ok(Number.isInteger(o.days) && o.days >= 1 && o.days <= 7);
    const { events } = await streamed(body);
    const pieces = of(events, 'response.output_text.delta').map((e) => e.delta);
    assert.equal(pieces[0], '{');
    assert.deepEqual(JSON.parse(pieces.join('')), o, 'the same object');
    const json = await respond({ model: 'm', input: 'x', text: { format: { type: 'json_object' } } });
    assert.equal(JSON.parse(json.output[0].content[0].text).answer, simText(40).split(/(?<=\.) /)[0]);
  });

  test('a function tool named by the user is called; other tool types are accepted and never called', async () => {
    const body = { model: 'm', input: 'Use get_weather for Lyon', tools: [{ type: 'web_search_preview' }, WEATHER_TOOL] };
    const r = await respond(body);
    assert.equal(r.output.length, 1);
    const call = r.output[0];
    assert.equal(call.type, 'function_call');
    assert.match(call.id, /^fc_[0-9a-f]{32}$/);
    assert.match(call.call_id, /^call_[0-9a-f]{24}$/);
    assert.equal(call.name, 'get_weather');
    assert.equal(call.status, 'completed');
    assert.deepEqual(Object.keys(JSON.parse(call.arguments)), ['city', 'days']);
    assert.deepEqual(r.tools, [{ type: 'web_search_preview' }, WEATHER_TOOL]);

    const { events } = await streamed(body);
    const added = of(events, 'response.output_item.added')[0].item;
    assert.equal(added.arguments, '');
    assert.equal(added.status, 'in_progress');
    const args = of(events, 'response.function_call_arguments.delta').map((e) => e.delta);
    assert.ok(args.length > 4);
    assert.equal(of(events, 'response.function_call_arguments.done')[0].arguments, args.join(''));
    assert.deepEqual(JSON.parse(args.join('')), JSON.parse(call.arguments), 'the same arguments');
    assert.equal(last(events).output[0].arguments, args.join(''));

    // Not named: text. After the tool's output: text, whatever the choice.
    assert.equal((await respond({ ...body, input: 'Hello', max_output_tokens: 3 })).output[0].content[0].text, simText(3));
    const after = await respond({
      ...body, tool_choice: 'required', max_output_tokens: 3,
      input: [{ role: 'user', content: 'Use get_weather' }, { ...call, id: undefined, status: undefined }, { type: 'function_call_output', call_id: call.call_id, output: 'rain' }],
    });
    assert.equal(after.output[0].type, 'message');
    assert.equal(after.output[0].content[0].text, simText(3));
    const named = await respond({ ...body, input: 'Hello', tool_choice: { type: 'function', name: 'get_weather' } });
    assert.equal(named.output[0].name, 'get_weather');
  });

  test('reasoning: a reasoning item with a summary comes first; its tokens are reasoning tokens', async () => {
    const body = { model: 'm', input: 'Think.', reasoning: { effort: 'low', summary: 'auto' } };
    const r = await respond(body);
    assert.deepEqual(r.reasoning, { effort: 'low', summary: 'auto' });
    assert.equal(r.output.length, 2);
    assert.deepEqual(r.output[0], { type: 'reasoning', id: `rs_${r.id.slice(5)}`, summary: [{ type: 'summary_text', text: SUMMARY }] });
    assert.equal(r.output[1].content[0].text, simText(12));
    const words = SUMMARY.split(' ').length;
    assert.equal(r.usage.output_tokens_details.reasoning_tokens, words);
    assert.equal(r.usage.output_tokens, 12 + words);

    const { events } = await streamed(body);
    assert.deepEqual(events.slice(2, 9).map((e) => e.type), [
      'response.output_item.added', 'response.reasoning_summary_part.added', 'response.reasoning_summary_text.delta',
      'response.reasoning_summary_text.done', 'response.reasoning_summary_part.done', 'response.output_item.done',
      'response.output_item.added',
    ]);
    assert.equal(events[4].delta, SUMMARY);
    assert.equal(events[8].output_index, 1);
    assert.ok(of(events, 'response.output_text.delta').every((e) => e.output_index === 1));
    assert.deepEqual(last(events).output, r.output.map((o) => ({ ...o, id: o.id.replace(r.id.slice(5), last(events).id.slice(5)) })));

    // The summary comes out of max_output_tokens too.
    const cut = await respond({ ...body, max_output_tokens: words + 2 });
    assert.equal(cut.output[1].content[0].text, simText(2));
    assert.equal(cut.usage.output_tokens, words + 2);
    assert.equal(cut.status, 'incomplete');
  });
});

describe('simulator Responses API: refusals, faults, counters', () => {
  test('previous_response_id is refused (this server stores nothing); bad bodies are 400 ErrorResponses', async () => {
    const r = await post({ model: 'm', input: 'x', previous_response_id: 'resp_123' });
    assert.equal(r.status, 400);
    assertValid('ErrorResponse', r.json, 'previous_response_id');
    assert.equal(r.json.error.message, 'previous_response_id is not supported by this server (it stores nothing)');
    assert.equal(r.json.error.type, 'invalid_request_error');
    for (const [body, message] of [
      [{ input: 'x' }, "'model' must be a non-empty string"],
      [{ model: 'm', input: 3 }, "'input' must be a string or an array of input items"],
      [{ model: 'm', input: 'x', max_output_tokens: 0 }, "'max_output_tokens' must be an integer >= 1"],
    ]) {
      const bad = await post(body);
      assert.equal(bad.status, 400, JSON.stringify(body));
      assert.equal(bad.json.error.message, message);
    }
    assert.equal((await post({ model: 'm', input: 'x', previous_response_id: null, store: true })).status, 200);
  });

  test('faults: an injected 429 in the OpenAI error shape; abort-after drops the stream before its end', async () => {
    const r = await post({ model: 'm', input: 'x' }, { 'x-sim-fault': 'error-429' });
    assert.equal(r.status, 429);
    assertValid('ErrorResponse', r.json, 'injected 429');
    assert.equal(r.json.error.code, 'rate_limit_exceeded');
    const s = await sse(`${sim.url}/v1/responses`, { model: 'm', input: 'x', stream: true }, { key: null, headers: { 'x-sim-fault': 'abort-after=3' } });
    const types = s.events.filter((e) => e.json).map((e) => e.json.type);
    assert.equal(types.filter((t) => t === 'response.output_text.delta').length, 3);
    assert.ok(!types.includes('response.completed'), types.join());
    assert.ok(!s.ended || s.error, 'the connection was dropped');
  });

  test('/sim/stats counts a Responses request in `responses` and `requests`, a chat completion only in `requests`', async () => {
    await sim.reset();
    await respond({ model: 'm', input: 'x', max_output_tokens: 1 });
    await streamed({ model: 'm', input: 'x', max_output_tokens: 1 });
    const chat = await fetch(`${sim.url}/v1/chat/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'x' }], max_tokens: 1 }),
    });
    assert.equal(chat.status, 200);
    await chat.text();
    const st = await sim.stats();
    assert.equal(st.responses, 2);
    assert.equal(st.requests, 3);
  });
});

describe('simulator Responses API: the openai SDK', () => {
  const client = () => new OpenAI({ apiKey: 'unused', baseURL: `${sim.url}/v1`, maxRetries: 0, timeout: 15000 });

  test('responses.create, not streamed: output_text and usage', async () => {
    const r = await client().responses.create({ model: 'gpt-sim', input: 'Say something.', max_output_tokens: 6 });
    assertValid('Response', r, 'the SDK Response');
    assert.equal(r.output_text, simText(6));
    assert.equal(r.status, 'incomplete');
    assert.equal(r.usage.output_tokens, 6);
    const withReasoning = await client().responses.create({ model: 'gpt-sim', input: 'Think.', reasoning: { effort: 'low' } });
    assert.equal(withReasoning.output[0].type, 'reasoning');
    assert.equal(withReasoning.output_text, simText(12));
  });

  test('responses.create streamed (for await), and responses.stream assembling the final Response', async () => {
    const stream = await client().responses.create({ model: 'gpt-sim', input: 'Count.', stream: true, max_output_tokens: 4 });
    const events = [];
    for await (const e of stream) events.push(e);
    assert.deepEqual(events.map((e) => e.sequence_number), events.map((_, i) => i));
    assert.equal(of(events, 'response.output_text.delta').map((e) => e.delta).join(''), simText(4));
    assert.equal(events.at(-1).type, 'response.incomplete');

    const helper = client().responses.stream({ model: 'gpt-sim', input: 'Use get_weather', tools: [WEATHER_TOOL], reasoning: { summary: 'auto' } });
    const deltas = [];
    helper.on('response.function_call_arguments.delta', (e) => deltas.push(e.delta));
    const final = await helper.finalResponse();
    assert.equal(final.status, 'completed');
    assert.deepEqual(final.output.map((o) => o.type), ['reasoning', 'function_call']);
    assert.equal(final.output[1].arguments, deltas.join(''));
    assert.equal(typeof JSON.parse(final.output[1].arguments).city, 'string');
  });
});
