// The simulator's answers on its three APIs (a `sluice sim` process, spoken to directly):
// the text that simText() predicts for any seed, stop sequences, JSON output, tool calls
// and log probabilities, streamed and not (docs/simulator.md, Answers).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { SIM_WORDS, simLogprob, simText, simTokens, sse, startSim } from './lib.mjs';

let sim;

before(async () => {
  sim = await startSim({ ttft: '1ms', 'inter-token': '0ms', 'default-output-tokens': 12 });
});

after(async () => {
  await sim?.stop();
});

const USER = [{ role: 'user', content: 'Tell me something.' }];
const WEATHER = {
  type: 'object',
  properties: { city: { type: 'string' }, days: { type: 'integer', minimum: 1, maximum: 7 } },
  required: ['city', 'days'],
};

async function post(path, body) {
  const res = await fetch(`${sim.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, text, json: res.headers.get('content-type')?.startsWith('application/json') ? JSON.parse(text) : undefined };
}

// Ollama's NDJSON stream, one object per line.
async function ollamaLines(body) {
  const r = await post('/api/chat', body);
  assert.equal(r.status, 200, r.text);
  return r.text.trim().split('\n').map((l) => JSON.parse(l));
}

// Anthropic's event stream: [{event, data}].
async function anthropicEvents(body) {
  const r = await sse(`${sim.url}/v1/messages`, { ...body, stream: true }, { key: null });
  assert.equal(r.status, 200, r.raw);
  return r.events.filter((e) => e.json).map((e) => ({ event: e.event, data: e.json }));
}

describe('simulator: text', () => {
  test('simText predicts the text for any seed, long answers included (every word of the vocabulary)', async () => {
    for (const seed of [undefined, 0, 1, 7, -3, 2 ** 40 + 5, 9007199254740991]) {
      const r = await post('/v1/chat/completions', { model: 'm', messages: USER, max_tokens: 3000, ...(seed === undefined ? {} : { seed }) });
      assert.equal(r.status, 200, r.text);
      assert.equal(r.json.choices[0].message.content, simText(3000, seed ?? 0), `seed ${seed}`);
    }
    const all = new Set(simTokens(3000).map((t) => t.trim().replace(/[.,]$/, '').toLowerCase()));
    assert.equal(all.size, SIM_WORDS.length, 'the long answer used every word');
  });

  test('one word per chunk on every API; no seed is seed 0', async () => {
    const openai = await sse(`${sim.url}/v1/chat/completions`, { model: 'm', messages: USER, max_tokens: 7, stream: true, seed: 11 }, { key: null });
    const deltas = openai.events.map((e) => e.json?.choices?.[0]?.delta?.content).filter((c) => c !== undefined && c !== '');
    assert.deepEqual(deltas, simTokens(7, 11));

    const lines = await ollamaLines({ model: 'm', messages: USER, options: { num_predict: 5, seed: 11 } });
    assert.deepEqual(lines.filter((l) => !l.done).map((l) => l.message.content), simTokens(5, 11));

    const events = await anthropicEvents({ model: 'm', max_tokens: 6, messages: USER });
    assert.deepEqual(events.filter((e) => e.event === 'content_block_delta').map((e) => e.data.delta.text), simTokens(6));
  });

  test('sentences: capitalised, 4 to 12 words, ending with a full stop', () => {
    const sentences = simText(400).split(/(?<=\.) /);
    for (const s of sentences.slice(0, -1)) {
      assert.match(s, /^[A-Z][a-z]*(,? [a-z]+)*\.$/, s);
      const n = s.split(' ').length;
      assert.ok(n >= 4 && n <= 12, s);
    }
  });
});

describe('simulator: stop sequences', () => {
  test('OpenAI stop (string or array): the content ends before the first occurrence, finish stop', async () => {
    const text = simText(40, 3);
    const stop = simTokens(40, 3)[6];  // a whole token, leading space included
    const r = await post('/v1/chat/completions', { model: 'm', messages: USER, seed: 3, max_tokens: 40, stop });
    assert.equal(r.json.choices[0].message.content, text.slice(0, text.indexOf(stop)));
    assert.equal(r.json.choices[0].finish_reason, 'stop');
    assert.equal(r.json.usage.completion_tokens, simTokens(40, 3).indexOf(stop));
    const r2 = await post('/v1/chat/completions', { model: 'm', messages: USER, seed: 3, max_tokens: 40, stop: ['no such text', '.'] });
    assert.equal(r2.json.choices[0].message.content, text.slice(0, text.indexOf('.')));
  });

  test('Anthropic stop_sequences: stop_reason stop_sequence with the one that matched, streamed and not', async () => {
    const text = simText(12);
    // 'st' first comes inside " last": the token keeps " la".
    const body = { model: 'm', max_tokens: 12, messages: USER, stop_sequences: ['zzz', 'st'] };
    const want = text.slice(0, text.indexOf('st'));
    assert.ok(want.endsWith(' la'), want);
    const m = (await post('/v1/messages', body)).json;
    assert.equal(m.content[0].text, want);
    assert.equal(m.stop_reason, 'stop_sequence');
    assert.equal(m.stop_sequence, 'st');
    assert.equal(m.usage.output_tokens, simTokens(12).findIndex((t) => t.includes('st')) + 1);
    const events = await anthropicEvents(body);
    assert.equal(events.filter((e) => e.event === 'content_block_delta').map((e) => e.data.delta.text).join(''), want);
    const delta = events.find((e) => e.event === 'message_delta').data;
    assert.deepEqual(delta.delta, { stop_reason: 'stop_sequence', stop_sequence: 'st' });
  });

  test('Ollama options.stop', async () => {
    const text = simText(12);
    const lines = await ollamaLines({ model: 'm', messages: USER, options: { stop: ['deep'] } });
    assert.equal(lines.map((l) => l.message.content).join(''), text.slice(0, text.indexOf('deep')));
    assert.equal(lines.at(-1).done_reason, 'stop');
  });
});

describe('simulator: JSON output', () => {
  test('OpenAI json_object: {"answer": <the first sentence>}, streamed piece by piece', async () => {
    const body = { model: 'm', messages: USER, response_format: { type: 'json_object' } };
    const r = await post('/v1/chat/completions', body);
    const first = simText(40).split(/(?<=\.) /)[0];
    assert.deepEqual(JSON.parse(r.json.choices[0].message.content), { answer: first });
    const s = await sse(`${sim.url}/v1/chat/completions`, { ...body, stream: true }, { key: null });
    const pieces = s.events.map((e) => e.json?.choices?.[0]?.delta?.content).filter((c) => c);
    assert.equal(pieces.join(''), r.json.choices[0].message.content);
    assert.equal(pieces.length, r.json.usage.completion_tokens);
    assert.equal(pieces[0], '{');
  });

  test('OpenAI json_schema and Ollama format: the required properties with their types', async () => {
    const r = await post('/v1/chat/completions', {
      model: 'm', messages: USER, response_format: { type: 'json_schema', json_schema: { name: 'w', schema: WEATHER } },
    });
    const o = JSON.parse(r.json.choices[0].message.content);
    assert.deepEqual(Object.keys(o), ['city', 'days']);
    assert.equal(typeof o.city, 'string');
    assert.ok(Number.isInteger(o.days) && o.days >= 1 && o.days <= 7);
    const lines = await ollamaLines({ model: 'm', messages: USER, format: WEATHER });
    assert.deepEqual(JSON.parse(lines.map((l) => l.message.content).join('')), o, 'the same seed, the same object');
    const plain = await ollamaLines({ model: 'm', messages: USER, format: 'json', stream: false });
    assert.equal(typeof JSON.parse(plain[0].message.content).answer, 'string');
  });
});

describe('simulator: tool calls', () => {
  const openaiTool = { type: 'function', function: { name: 'get_weather', parameters: WEATHER } };

  test('OpenAI: asked by name -> tool_calls (streamed: id and name first, then the arguments in pieces)', async () => {
    const body = { model: 'm', messages: [{ role: 'user', content: 'Use get_weather for Lyon' }], tools: [openaiTool] };
    const r = await post('/v1/chat/completions', body);
    const choice = r.json.choices[0];
    assert.equal(choice.finish_reason, 'tool_calls');
    const args = JSON.parse(choice.message.tool_calls[0].function.arguments);
    assert.deepEqual(Object.keys(args), ['city', 'days']);

    const s = await sse(`${sim.url}/v1/chat/completions`, { ...body, stream: true }, { key: null });
    const deltas = s.events.map((e) => e.json?.choices?.[0]?.delta?.tool_calls?.[0]).filter(Boolean);
    assert.match(deltas[0].id, /^call_[0-9a-f]{24}$/);
    assert.equal(deltas[0].function.name, 'get_weather');
    assert.deepEqual(JSON.parse(deltas.map((d) => d.function.arguments).join('')), args);
    assert.ok(deltas.length > 4);

    // Not named, auto: text. After the tool's result: text again.
    const text = await post('/v1/chat/completions', { ...body, messages: USER, max_tokens: 3 });
    assert.equal(text.json.choices[0].message.content, simText(3));
    const after = await post('/v1/chat/completions', {
      ...body, tool_choice: 'required', max_tokens: 3,
      messages: [...body.messages, { role: 'assistant', content: null, tool_calls: choice.message.tool_calls }, { role: 'tool', tool_call_id: choice.message.tool_calls[0].id, content: 'rain' }],
    });
    assert.equal(after.json.choices[0].message.content, simText(3));
  });

  test('Anthropic: tool_choice any -> a tool_use block, streamed with input_json_delta', async () => {
    const body = { model: 'm', max_tokens: 100, messages: USER, tools: [{ name: 'get_weather', input_schema: WEATHER }], tool_choice: { type: 'any' } };
    const m = (await post('/v1/messages', body)).json;
    assert.equal(m.stop_reason, 'tool_use');
    assert.equal(m.content[0].type, 'tool_use');
    assert.match(m.content[0].id, /^toolu_/);
    assert.equal(m.content[0].name, 'get_weather');
    assert.equal(typeof m.content[0].input.city, 'string');
    const events = await anthropicEvents(body);
    const start = events.find((e) => e.event === 'content_block_start').data.content_block;
    assert.equal(start.type, 'tool_use');
    const partial = events.filter((e) => e.event === 'content_block_delta').map((e) => e.data.delta.partial_json).join('');
    assert.deepEqual(JSON.parse(partial), m.content[0].input);
    assert.equal(events.find((e) => e.event === 'message_delta').data.delta.stop_reason, 'tool_use');
  });

  test('Ollama: asked by name -> message.tool_calls with the arguments as an object', async () => {
    const body = { model: 'm', messages: [{ role: 'user', content: 'get_weather?' }], tools: [openaiTool] };
    const lines = await ollamaLines(body);
    assert.equal(lines.length, 2, 'the call in one line, then the final object');
    const call = lines[0].message.tool_calls[0].function;
    assert.equal(call.name, 'get_weather');
    assert.equal(typeof call.arguments.city, 'string');
    assert.equal(lines[1].done_reason, 'stop');
    const whole = await ollamaLines({ ...body, stream: false });
    assert.deepEqual(whole[0].message.tool_calls, lines[0].message.tool_calls);
  });
});

describe('simulator: log probabilities', () => {
  test('OpenAI logprobs with top_logprobs: an entry per token, deterministic, in the answer and in each chunk', async () => {
    const body = { model: 'm', messages: USER, max_tokens: 6, logprobs: true, top_logprobs: 5, seed: 21 };
    const r = await post('/v1/chat/completions', body);
    const { content, refusal } = r.json.choices[0].logprobs;
    assert.equal(refusal, null);
    assert.deepEqual(content.map((e) => e.token), simTokens(6, 21));
    for (const [i, e] of content.entries()) {
      assert.equal(e.logprob, simLogprob(i, 21));
      assert.ok(e.logprob < 0);
      assert.deepEqual(e.bytes, [...Buffer.from(e.token)]);
      assert.equal(e.top_logprobs.length, 5);
      assert.deepEqual(e.top_logprobs[0], { token: e.token, logprob: e.logprob, bytes: e.bytes });
      const p = e.top_logprobs.reduce((sum, t) => sum + Math.exp(t.logprob), 0);
      assert.ok(p < 1, `probabilities sum to ${p}`);
    }
    const s = await sse(`${sim.url}/v1/chat/completions`, { ...body, stream: true }, { key: null });
    const per = s.events.filter((e) => e.json?.choices?.[0]?.delta?.content).map((e) => e.json.choices[0].logprobs.content);
    assert.ok(per.every((c) => c.length === 1));
    assert.deepEqual(per.flat(), content);
  });
});
