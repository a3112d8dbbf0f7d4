// POST /v1/responses passed natively to a backend that serves the Responses API itself
// (native_responses: a `sluice sim` process, which answers with a reasoning item the
// gateway's translation never makes, and refuses previous_response_id): answers and events
// relayed with the gateway's ids and valid by OpenAI's schemas, the conversation the
// gateway keeps continued natively and across native and translated backends, what only a
// native backend serves refused elsewhere, and the official openai SDK.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';

import { KEY, request, sse, startGateway, startRecorder, startSim } from './lib.mjs';
import { assertValid } from './openai_schema.mjs';

let sim;
let gw;

before(async () => {
  sim = await startSim({ ttft: '1ms', 'inter-token': '0ms', 'default-output-tokens': 8 });
  const backend = { provider: 'openai', base_url: `${sim.url}/v1`, model: 'sim-model' };
  gw = await startGateway({
    instance: 'it-responses-native',
    keys: [{ name: 'app', key: KEY, tenant: 'acme' }],
    models: [
      // Built-in tools run on the operator's account: allowed here only.
      { alias: 'native', ...backend, native_responses: true, allow_params: ['builtin_tools'] },
      { alias: 'native-plain', ...backend, native_responses: true },
      { alias: 'translated', ...backend },
      // Native first, translated as its fallback: not all its backends are native.
      { alias: 'mixed', ...backend, native_responses: true, fallbacks: ['translated'] },
    ],
  });
});

after(async () => {
  await gw?.stop();
  await sim?.stop();
});

const client = () => new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 15000 });
const post = (body) => request(`${gw.url}/v1/responses`, { method: 'POST', key: KEY, body });
const suffix = (id) => id.replace(/^resp_/, '');

describe('responses natively', () => {
  test('a whole answer is the backend\'s, with the gateway\'s ids and the client\'s model', async () => {
    const before = await sim.stats();
    const r = await post({ model: 'native', input: 'Think, then answer.', reasoning: { effort: 'low', summary: 'auto' } });
    assert.equal(r.status, 200, r.text);
    assertValid('Response', r.json, 'a native Response');
    const after = await sim.stats();
    assert.equal(after.responses - before.responses, 1, 'the simulator served it as a Responses request');
    const { id, output, model, store, usage } = r.json;
    assert.match(id, /^resp_[0-9a-f]{32}$/);
    assert.equal(model, 'native');
    assert.equal(store, true);  // sent upstream as false: the gateway stores it
    assert.deepEqual(output.map((i) => i.type), ['reasoning', 'message']);
    assert.deepEqual(output.map((i) => i.id), [`rs_${suffix(id)}_0`, `msg_${suffix(id)}_1`]);
    assert.ok(usage.input_tokens > 0 && usage.output_tokens > 0, JSON.stringify(usage));
    // Stored: read back as it was answered.
    assert.deepEqual((await client().responses.retrieve(id)).output, output);
    const line = await gw.logFor(r.headers.get('x-request-id'));
    assert.equal(line.status, 200);
    assert.equal(line.completion_tokens, usage.output_tokens);
  });

  test('a stream is the backend\'s events, valid, numbered, with the gateway\'s ids', async () => {
    const r = await sse(`${gw.url}/v1/responses`, { model: 'native', input: 'Stream it.', reasoning: { effort: 'low' }, stream: true });
    assert.equal(r.status, 200, r.raw);
    const events = r.events.filter((e) => e.data !== undefined).map((e) => e.json);
    for (const e of events) assertValid('ResponseStreamEvent', e, e.type);
    assert.deepEqual(events.map((e) => e.sequence_number), events.map((_, i) => i));
    const done = events.at(-1);
    assert.equal(done.type, 'response.completed');
    const id = done.response.id;
    assert.equal(events[0].response.id, id);
    const deltas = events.filter((e) => e.type === 'response.output_text.delta');
    assert.ok(deltas.length > 1);
    for (const d of deltas) assert.equal(d.item_id, `msg_${suffix(id)}_1`);
    assert.equal((await client().responses.retrieve(id)).output_text, deltas.map((d) => d.delta).join(''));
  });

  test('the openai SDK, streamed: its final response is the stored one', async () => {
    const stream = client().responses.stream({ model: 'native', input: 'Hello there.' });
    const final = await stream.finalResponse();
    assert.equal(final.model, 'native');
    const text = final.output.find((i) => i.type === 'message').content[0].text;
    assert.ok(text.length > 0);
    assert.equal((await client().responses.retrieve(final.id)).output_text, text);
  });

  test('a conversation continues natively, then on a translated backend, then natively again', async () => {
    const one = await client().responses.create({ model: 'native', input: 'My name is Ada.' });
    // The backend stores nothing and refuses previous_response_id: the gateway put the
    // conversation in the input (it grew).
    const two = await client().responses.create({ model: 'native', input: 'What is my name?', previous_response_id: one.id });
    assert.equal(two.previous_response_id, one.id);
    assert.ok(two.usage.input_tokens > one.usage.input_tokens, `${two.usage.input_tokens} > ${one.usage.input_tokens}`);
    const three = await client().responses.create({ model: 'translated', input: 'And now?', previous_response_id: two.id });
    assert.ok(three.usage.input_tokens > two.usage.input_tokens);
    assert.ok(!three.output.some((i) => i.type === 'reasoning'));
    const four = await client().responses.create({ model: 'native', input: 'Once more.', previous_response_id: three.id });
    assert.ok(four.usage.input_tokens > three.usage.input_tokens);
    // An item of a native answer, referenced: resolved to the stored item.
    const ref = await post({ model: 'native', input: [{ type: 'item_reference', id: two.output.at(-1).id }, { role: 'user', content: 'Go on.' }] });
    assert.equal(ref.status, 200, ref.text);
  });

  test('what only a native backend serves is refused elsewhere, naming the field', async () => {
    const body = (model) => ({ model, input: 'Search the web.', tools: [{ type: 'web_search_preview' }] });
    const ok = await post(body('native'));
    assert.equal(ok.status, 200, ok.text);
    // A native route that does not allow them: they would bill the operator's account.
    const unbilled = await post(body('native-plain'));
    assert.equal(unbilled.status, 400, unbilled.text);
    assert.equal(unbilled.json.error.param, 'tools[0].type');
    assert.match(unbilled.json.error.message, /'builtin_tools' is not allowed.*allow_params/);
    for (const model of ['translated', 'mixed']) {
      const r = await post(body(model));
      assert.equal(r.status, 400, r.text);
      assertValid('ErrorResponse', r.json, 'error');
      assert.equal(r.json.error.param, 'tools[0].type');
      assert.equal(r.json.error.code, 'option_not_allowed');
      assert.match(r.json.error.message, /native_responses/);
    }
    // What any backend serves goes either way on the mixed route.
    const plain = await post({ model: 'mixed', input: 'Plain.' });
    assert.equal(plain.status, 200, plain.text);
  });

  test('a backend that fails is the gateway\'s 502; a stream it cuts ends in response.failed', async () => {
    await sim.configure({ error_rate_500: 1 });
    try {
      const r = await post({ model: 'native', input: 'x' });
      assert.equal(r.status, 502, r.text);
      assertValid('ErrorResponse', r.json, 'error');
    } finally {
      await sim.configure({ error_rate_500: 0 });
    }
    await sim.configure({ abort_rate: 1 });
    try {
      const cut = await sse(`${gw.url}/v1/responses`, { model: 'native', input: 'Cut me.', stream: true, max_output_tokens: 16 });
      assert.equal(cut.status, 200, cut.raw);
      const events = cut.events.filter((e) => e.data !== undefined).map((e) => e.json);
      for (const e of events) assertValid('ResponseStreamEvent', e, e.type);
      assert.deepEqual(events.slice(-2).map((e) => e.type), ['error', 'response.failed']);
      assert.deepEqual(events.map((e) => e.sequence_number), events.map((_, i) => i));
      assert.equal(events.at(-1).response.id, events[0].response.id);
    } finally {
      await sim.configure({ abort_rate: 0 });
    }
  });
});

// An upstream that keeps the connection open after response.completed: the answer is
// whole, so it is relayed and stored as it is (no error after it, no idle timeout).
describe('responses natively: an upstream that does not close after the end', () => {
  let upstream;
  let gw2;
  before(async () => {
    upstream = await startRecorder((req, res, json) => {
      if (!req.url.endsWith('/responses')) return false;
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const response = { id: 'resp_up', object: 'response', created_at: 1, status: 'in_progress', model: json.model, output: [] };
      const send = (e) => res.write(`event: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`);
      send({ type: 'response.created', sequence_number: 0, response });
      send({ type: 'response.completed', sequence_number: 1, response: { ...response, status: 'completed', usage: { input_tokens: 2, output_tokens: 0, total_tokens: 2 } } });
      setTimeout(() => res.end(), 8000);  // open well past the gateway's idle timeout
      return true;
    });
    gw2 = await startGateway({
      instance: 'it-responses-native-open',
      keys: [{ name: 'app', key: KEY, tenant: 'acme' }],
      models: [{ alias: 'held', provider: 'openai', base_url: `${upstream.url}/v1`, native_responses: true }],
      timeouts: { idle: '2s' },
    });
  });
  after(async () => {
    await gw2?.stop();
    await upstream?.close();
  });

  test('the stream ends after response.completed, with nothing after it, and is stored', async () => {
    const started = Date.now();
    const r = await sse(`${gw2.url}/v1/responses`, { model: 'held', input: 'Hi', stream: true }, { timeout: 15000 });
    assert.equal(r.status, 200, r.raw);
    const events = r.events.filter((e) => e.data !== undefined).map((e) => e.json);
    assert.deepEqual(events.map((e) => e.type), ['response.created', 'response.completed']);
    assert.ok(Date.now() - started < 6000, 'ended without waiting for the upstream to close');
    const id = events[1].response.id;
    const got = await request(`${gw2.url}/v1/responses/${id}`, { key: KEY });
    assert.equal(got.status, 200, got.text);
  });
});
