// Provider adapters: an `openai` route and an `ollama` route, each pointing at its own
// `sluice sim` process, non-streaming and streaming; plus a recording upstream that shows
// the exact body each adapter sends.
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import {
  USER,
  assembled,
  chat,
  contentEvents,
  keysAll,
  sse,
  simText,
  startGateway,
  startRecorder,
  startSim,
} from './lib.mjs';

const DEFAULT_TOKENS = 6;

let simOpenAI;
let simOllama;
let rec;
let gw;

before(async () => {
  const flags = { ttft: '20ms', 'inter-token': '5ms', 'default-output-tokens': DEFAULT_TOKENS };
  [simOpenAI, simOllama, rec] = await Promise.all([startSim(flags), startSim(flags), startRecorder()]);
  gw = await startGateway({
    instance: 'it-adapters',
    keys: keysAll(),
    models: [
      { alias: 'gpt', provider: 'openai', base_url: `${simOpenAI.url}/v1`, model: 'real-gpt' },
      { alias: 'llama', provider: 'ollama', base_url: simOllama.url, model: 'llama3.2:1b' },
      { alias: 'rec-openai', provider: 'openai', base_url: `${rec.url}/v1`, model: 'rec-gpt' },
      { alias: 'rec-ollama', provider: 'ollama', base_url: rec.url, model: 'rec-llama' },
    ],
  });
});

after(async () => {
  await Promise.all([gw?.stop(), simOpenAI?.stop(), simOllama?.stop(), rec?.close()]);
});

beforeEach(async () => {
  await Promise.all([simOpenAI.reset(), simOllama.reset()]);
});

// Each provider: the alias, its simulator, the other simulator, and the "model" the client
// sees (an OpenAI upstream's body passes through, so it names the real model the upstream
// was asked for; the Ollama adapter writes the client's alias).
const providers = [
  { name: 'openai', alias: 'gpt', sim: () => simOpenAI, other: () => simOllama, shownModel: 'real-gpt' },
  { name: 'ollama', alias: 'llama', sim: () => simOllama, other: () => simOpenAI, shownModel: 'llama' },
];

function assertUsage(usage, completion) {
  assert.equal(typeof usage, 'object', 'usage present');
  assert.equal(usage.completion_tokens, completion, 'completion_tokens');
  assert.ok(Number.isInteger(usage.prompt_tokens) && usage.prompt_tokens >= 1, `prompt_tokens ${usage.prompt_tokens}`);
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens, 'total_tokens');
}

function assertChunks(r) {
  assert.equal(r.status, 200, r.raw);
  assert.match(r.headers.get('content-type'), /^text\/event-stream/);
  assert.ok(r.ended, 'the stream ended normally');
  const data = r.events.filter((e) => e.data !== undefined);
  assert.equal(data.at(-1).data, '[DONE]', 'last event is [DONE]');
  assert.equal(data.filter((e) => e.data === '[DONE]').length, 1, 'one [DONE]');
  const chunks = data.filter((e) => e.data !== '[DONE]');
  for (const c of chunks) {
    assert.ok(c.json, `chunk is JSON: ${c.data}`);
    assert.equal(c.json.object, 'chat.completion.chunk');
    assert.equal(typeof c.json.id, 'string');
    assert.ok(Array.isArray(c.json.choices));
  }
  assert.equal(new Set(chunks.map((c) => c.json.id)).size, 1, 'every chunk has the same id');
  const content = contentEvents(r.events);
  assert.ok(content.length > 0, 'content chunks');
  assert.equal(content[0].json.choices[0].delta.role, 'assistant', 'the first delta has the role');
  return chunks;
}

for (const p of providers) {
  describe(`${p.name} provider`, () => {
    test('non-streaming: an OpenAI chat.completion', async () => {
      const r = await chat(gw, { model: p.alias, messages: USER });
      assert.equal(r.status, 200, r.text);
      const b = r.json;
      assert.equal(b.object, 'chat.completion');
      assert.match(b.id, /^chatcmpl-/);
      assert.equal(typeof b.created, 'number');
      assert.equal(b.model, p.shownModel);
      assert.equal(b.choices.length, 1);
      assert.equal(b.choices[0].index, 0);
      assert.equal(b.choices[0].message.role, 'assistant');
      assert.equal(b.choices[0].message.content, simText(DEFAULT_TOKENS));
      assert.equal(b.choices[0].finish_reason, 'stop');
      assertUsage(b.usage, DEFAULT_TOKENS);
      // It went to this provider's simulator and nowhere else.
      const [mine, other] = await Promise.all([p.sim().stats(), p.other().stats()]);
      assert.equal(mine.requests, 1);
      assert.equal(mine.completed, 1);
      assert.equal(other.requests, 0);
    });

    test('max_tokens is honoured: completion_tokens equals it, finish_reason length', async () => {
      const r = await chat(gw, { model: p.alias, messages: USER, max_tokens: 3 });
      assert.equal(r.status, 200, r.text);
      assert.equal(r.json.choices[0].message.content, simText(3));
      assert.equal(r.json.choices[0].finish_reason, 'length');
      assertUsage(r.json.usage, 3);
    });

    test('max_completion_tokens is honoured too', async () => {
      const r = await chat(gw, { model: p.alias, messages: USER, max_completion_tokens: 2 });
      assert.equal(r.status, 200, r.text);
      assertUsage(r.json.usage, 2);
      assert.equal(r.json.choices[0].message.content, simText(2));
    });

    test('streaming: chat.completion.chunk events, content assembled, finish_reason, [DONE]', async () => {
      const r = await sse(`${gw.url}/v1/chat/completions`, { model: p.alias, messages: USER, stream: true });
      const chunks = assertChunks(r);
      assert.equal(assembled(r.events), simText(DEFAULT_TOKENS));
      assert.equal(contentEvents(r.events).length, DEFAULT_TOKENS, 'one chunk per token');
      const finish = chunks.filter((c) => c.json.choices[0]?.finish_reason);
      assert.equal(finish.length, 1, 'one chunk with a finish_reason');
      assert.equal(finish[0].json.choices[0].finish_reason, 'stop');
      assert.ok(!chunks.some((c) => 'usage' in c.json && c.json.usage), 'no usage without include_usage');
      for (const c of chunks) assert.equal(c.json.model, p.shownModel);
      const st = await p.sim().stats();
      assert.equal(st.completed, 1);
    });

    test('streaming with max_tokens: finish_reason length', async () => {
      const r = await sse(`${gw.url}/v1/chat/completions`, { model: p.alias, messages: USER, stream: true, max_tokens: 4 });
      const chunks = assertChunks(r);
      assert.equal(assembled(r.events), simText(4));
      assert.equal(chunks.find((c) => c.json.choices[0]?.finish_reason)?.json.choices[0].finish_reason, 'length');
    });

    test('stream_options.include_usage true: one usage chunk before [DONE]', async () => {
      const r = await sse(`${gw.url}/v1/chat/completions`, {
        model: p.alias,
        messages: USER,
        stream: true,
        max_tokens: 5,
        stream_options: { include_usage: true },
      });
      const chunks = assertChunks(r);
      const usage = chunks.filter((c) => c.json.usage);
      assert.equal(usage.length, 1, 'exactly one usage chunk');
      assert.deepEqual(usage[0].json.choices, [], 'the usage chunk has no choices');
      assertUsage(usage[0].json.usage, 5);
      const idx = chunks.indexOf(usage[0]);
      assert.equal(idx, chunks.length - 1, 'usage is the last chunk before [DONE]');
      const finishIdx = chunks.findIndex((c) => c.json.choices[0]?.finish_reason);
      assert.ok(finishIdx >= 0 && finishIdx < idx, 'usage comes after the finish chunk');
    });

    test('stream_options.include_usage false: no usage chunk', async () => {
      const r = await sse(`${gw.url}/v1/chat/completions`, {
        model: p.alias,
        messages: USER,
        stream: true,
        max_tokens: 5,
        stream_options: { include_usage: false },
      });
      const chunks = assertChunks(r);
      assert.equal(assembled(r.events), simText(5));
      assert.equal(chunks.filter((c) => c.json.usage).length, 0);
    });
  });
}

describe('openai adapter specifics', () => {
  test('the non-streamed body passes through unchanged (upstream id and model)', async () => {
    const r = await chat(gw, { model: 'gpt', messages: USER, max_tokens: 1 });
    assert.equal(r.status, 200, r.text);
    // The simulator echoes the model it was asked for: the alias was mapped.
    assert.equal(r.json.model, 'real-gpt');
    assert.equal('logprobs' in r.json.choices[0], true, 'upstream fields are kept');
  });

  test('upstream body: real model, stream_options.include_usage forced when streaming, Ollama fields dropped', async () => {
    const n = rec.requests.length;
    const r = await sse(`${gw.url}/v1/chat/completions`, {
      model: 'rec-openai',
      messages: USER,
      stream: true,
      temperature: 0.3,
      options: { num_ctx: 2048 },
      keep_alive: '5m',
    });
    assert.equal(r.status, 200, r.raw);
    assert.equal(rec.requests.length, n + 1);
    const up = rec.requests.at(-1);
    assert.equal(up.method, 'POST');
    assert.equal(up.url, '/v1/chat/completions');
    assert.equal(up.json.model, 'rec-gpt');
    assert.equal(up.json.stream, true);
    assert.deepEqual(up.json.stream_options, { include_usage: true });
    assert.equal(up.json.temperature, 0.3);
    assert.deepEqual(up.json.messages, USER);
    assert.ok(!('options' in up.json), 'options not sent to an OpenAI upstream');
    assert.ok(!('keep_alive' in up.json), 'keep_alive not sent to an OpenAI upstream');
    // The gateway asked for usage, the client did not: it must not see it.
    assert.equal(r.events.filter((e) => e.json?.usage).length, 0);
    assert.equal(assembled(r.events), 'hello');
  });

  test('non-streaming upstream body has no stream_options', async () => {
    const r = await chat(gw, { model: 'rec-openai', messages: USER, stream_options: { include_usage: true } });
    assert.equal(r.status, 200, r.text);
    const up = rec.requests.at(-1);
    assert.ok(!('stream_options' in up.json), `stream_options sent: ${up.raw}`);
  });
});

describe('ollama adapter specifics', () => {
  test('non-streaming: id is chatcmpl-<request id>, model is the alias', async () => {
    const r = await chat(gw, { model: 'llama', messages: USER, max_tokens: 2 }, { headers: { 'x-request-id': 'ollama-req-1' } });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.id, 'chatcmpl-ollama-req-1');
    assert.equal(r.json.model, 'llama');
  });

  test('options pass through after validation: num_predict bounds the output', async () => {
    const r = await chat(gw, { model: 'llama', messages: USER, options: { num_predict: 4, num_ctx: 2048 } });
    assert.equal(r.status, 200, r.text);
    assertUsage(r.json.usage, 4);
    assert.equal(r.json.choices[0].message.content, simText(4));
    assert.equal(r.json.choices[0].finish_reason, 'length');
  });

  test('options in a streamed request pass through too', async () => {
    const r = await sse(`${gw.url}/v1/chat/completions`, {
      model: 'llama',
      messages: USER,
      stream: true,
      options: { num_predict: 3 },
      stream_options: { include_usage: true },
    });
    assertChunks(r);
    assert.equal(assembled(r.events), simText(3));
    assertUsage(r.events.find((e) => e.json?.usage).json.usage, 3);
  });

  test('upstream body: /api/chat, real model, options merged (client options win)', async () => {
    const n = rec.requests.length;
    const r = await chat(gw, {
      model: 'rec-ollama',
      messages: USER,
      temperature: 0.2,
      top_p: 0.9,
      seed: 42,
      stop: 'END',
      max_tokens: 7,
      options: { num_ctx: 2048, temperature: 0.9, top_k: 40 },
      keep_alive: '5m',
    });
    assert.equal(r.status, 200, r.text);
    assert.equal(rec.requests.length, n + 1);
    const up = rec.requests.at(-1);
    assert.equal(up.url, '/api/chat');
    assert.equal(up.json.model, 'rec-llama');
    assert.equal(up.json.stream, false);
    assert.deepEqual(up.json.messages, [{ role: 'user', content: USER[0].content }]);
    assert.deepEqual(up.json.options, {
      temperature: 0.9,
      top_p: 0.9,
      seed: 42,
      stop: ['END'],
      num_predict: 7,
      num_ctx: 2048,
      top_k: 40,
    });
    assert.equal(up.json.keep_alive, '5m');
    // The answer is translated back.
    assert.equal(r.json.object, 'chat.completion');
    assert.equal(r.json.choices[0].message.content, 'hello');
    assert.deepEqual(r.json.usage, { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 });
  });

  test('an invalid option is rejected before anything is sent upstream', async () => {
    const n = rec.requests.length;
    const r = await chat(gw, { model: 'rec-ollama', messages: USER, options: { num_ctx: 999999 } });
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.error.code, 'option_out_of_range');
    assert.equal(rec.requests.length, n, 'no upstream request');
  });
});
