// POST /v1/embeddings through the gateway: the official openai SDK (which asks for base64
// by default), the simulator's vectors (similar texts near each other), an Ollama upstream
// translated from /api/embed, token quotas counting the input, records, and the requests a
// route cannot serve refused before anything is counted.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';

import { KEY, request, startGateway, startRecorder } from './lib.mjs';

let gw;
let ollama;

// An Ollama server's /api/embed: one fixed vector per input, its index in the first place.
function ollamaEmbed(req, res, json) {
  if (!req.url.endsWith('/api/embed')) return false;
  const inputs = Array.isArray(json.input) ? json.input : [json.input];
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(
    JSON.stringify({
      model: json.model,
      embeddings: inputs.map((_, i) => [i, 0.5, -0.25, 0.125]),
      total_duration: 1000,
      load_duration: 10,
      prompt_eval_count: 5 * inputs.length,
    }),
  );
  return true;
}

before(async () => {
  ollama = await startRecorder(ollamaEmbed);
  gw = await startGateway({
    instance: 'it-embeddings',
    keys: [{ name: 'app', key: KEY, tenant: 'acme', tier: 'gold' }],
    models: [
      { alias: 'embed', provider: 'simulated', sim: { ttft: '1ms', inter_token: '1ms', jitter: 0 } },
      { alias: 'ollama-embed', provider: 'ollama', base_url: ollama.url, model: 'all-minilm' },
      { alias: 'claude', provider: 'anthropic', base_url: ollama.url, model: 'claude-x', api_key: 'sk-ant-x' },
    ],
    rate_limits: { tokens: [{ scope: 'key', limit: 1000000, per: 'day' }] },
  });
});

after(async () => {
  await Promise.all([gw?.stop(), ollama?.close()]);
});

const client = () => new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 15000 });

const cosine = (a, b) => {
  let dot = 0;
  let na = 0;
  let nb = 0;
  for (let i = 0; i < a.length; i++) {
    dot += a[i] * b[i];
    na += a[i] * a[i];
    nb += b[i] * b[i];
  }
  return dot / Math.sqrt(na * nb);
};

describe('embeddings: the openai SDK', () => {
  test('base64 (the SDK default) and float answers carry the same vectors; similar texts are near', async () => {
    const input = ['the cat sat on the mat', 'the cat sat on a mat', 'quarterly revenue grew by nine percent'];
    const b64 = await client().embeddings.create({ model: 'embed', input });
    const floats = await client().embeddings.create({ model: 'embed', input, encoding_format: 'float' });
    assert.equal(b64.object, 'list');
    assert.equal(b64.data.length, 3);
    assert.deepEqual(
      b64.data.map((d) => d.index),
      [0, 1, 2],
    );
    for (let i = 0; i < 3; i++) {
      assert.equal(floats.data[i].object, 'embedding');
      assert.ok(Array.isArray(floats.data[i].embedding) && floats.data[i].embedding.length > 0);
      assert.equal(b64.data[i].embedding.length, floats.data[i].embedding.length);
      for (let k = 0; k < floats.data[i].embedding.length; k++) {
        assert.ok(Math.abs(b64.data[i].embedding[k] - floats.data[i].embedding[k]) < 1e-6);
      }
    }
    const [a, b, c] = floats.data.map((d) => d.embedding);
    assert.ok(cosine(a, b) > 0.8, `near: ${cosine(a, b)}`);
    assert.ok(cosine(a, c) < 0.3, `far: ${cosine(a, c)}`);
    assert.ok(b64.usage.prompt_tokens > 0);
  });

  test('dimensions are honoured; the same text gives the same vector', async () => {
    const one = await client().embeddings.create({ model: 'embed', input: 'hello world', dimensions: 32, encoding_format: 'float' });
    const two = await client().embeddings.create({ model: 'embed', input: 'hello world', dimensions: 32, encoding_format: 'float' });
    assert.equal(one.data[0].embedding.length, 32);
    assert.deepEqual(one.data[0].embedding, two.data[0].embedding);
  });

  test('the record and the token quota count the input; nothing is reserved for output', async () => {
    const r = await request(`${gw.url}/v1/embeddings`, {
      method: 'POST',
      key: KEY,
      body: { model: 'embed', input: ['one two three', 'four five'], encoding_format: 'float' },
    });
    assert.equal(r.status, 200, r.text);
    const answer = r.json;
    const line = await gw.logFor(r.headers.get('x-request-id'));
    assert.equal(line.status, 200);
    assert.equal(line.alias, 'embed');
    assert.equal(line.prompt_tokens, answer.usage.prompt_tokens);
    assert.equal(line.completion_tokens, 0);
    assert.ok(line.reserved_tokens >= line.prompt_tokens, JSON.stringify(line));
    assert.ok(line.reserved_tokens < 64, `only the input is reserved: ${line.reserved_tokens}`);
    assert.equal(Number(r.headers.get('x-ratelimit-limit-tokens')), 1000000);
  });
});

describe('embeddings: an Ollama upstream', () => {
  test('/api/embed is called with the real model and answered in OpenAI shape, floats or base64', async () => {
    const before = ollama.requests.length;
    const floats = await client().embeddings.create({ model: 'ollama-embed', input: ['a', 'b'], encoding_format: 'float' });
    const sent = ollama.requests[before];
    assert.equal(sent.url, '/api/embed');
    assert.deepEqual(sent.json, { model: 'all-minilm', input: ['a', 'b'] });
    assert.equal(floats.model, 'ollama-embed');
    assert.deepEqual(floats.data[1].embedding, [1, 0.5, -0.25, 0.125]);
    assert.deepEqual(floats.usage, { prompt_tokens: 10, total_tokens: 10 });
    const b64 = await client().embeddings.create({ model: 'ollama-embed', input: 'a' });  // SDK: base64
    assert.equal(ollama.requests[before + 1].json.encoding_format, undefined);
    assert.deepEqual(b64.data[0].embedding, [0, 0.5, -0.25, 0.125]);
  });
});

describe('embeddings: refused', () => {
  const post = (body) => request(`${gw.url}/v1/embeddings`, { method: 'POST', key: KEY, body });

  test('a model served by Anthropic, token ids to Ollama: a 400 naming the field, nothing sent', async () => {
    const before = ollama.requests.length;
    for (const [body, param] of [
      [{ model: 'claude', input: 'x' }, 'model'],
      [{ model: 'ollama-embed', input: [1, 2, 3] }, 'input'],
    ]) {
      const r = await post(body);
      assert.equal(r.status, 400);
      const e = r.json.error;
      assert.equal(e.param, param);
      assert.match(e.message, /cannot serve this request/);
    }
    assert.equal(ollama.requests.length, before);
  });

  test('requests the spec refuses, and unknown fields, are 400 with the field', async () => {
    for (const [body, param, code] of [
      [{ model: 'embed' }, 'input', 'invalid_request'],
      [{ model: 'embed', input: '' }, 'input', 'invalid_request'],
      [{ model: 'embed', input: 'x', encoding_format: 'yaml' }, 'encoding_format', 'invalid_request'],
      [{ model: 'embed', input: 'x', stream: true }, 'stream', 'option_not_allowed'],
    ]) {
      const r = await post(body);
      assert.equal(r.status, 400, JSON.stringify(body));
      const e = r.json.error;
      assert.equal(e.param, param);
      assert.equal(e.code, code);
    }
    const r = await post({ model: 'nope', input: 'x' });
    assert.equal(r.status, 404);
    const get = await request(`${gw.url}/v1/embeddings`, { key: KEY });
    assert.equal(get.status, 405);
  });
});
