// The token reservation is an upper bound of what the upstream can charge: every prompt
// part that is sent (tools, schemas, tool calls), a bound for bodies too large to count
// exactly, the output bound actually sent upstream (Ollama's num_predict, Anthropic's
// default), n choices, no overflow; a request that can never fit its limit is told so
// (no Retry-After); count_tokens is metered by the request limits. The upstream is a
// recorder that charges what it was allowed to (the most it could).
//
// Settlement: one rule on every path (the upstream's usage where it is valid, else the
// exact count of what was sent and relayed), a client that leaves mid-stream pays the
// tokens it received, absurd usage saturates, and SIGTERM sends what is queued (the
// usage, the token leases) to Redis before the process exits.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { contentEvents, KEY, redisLedger, request, sse, startGateway, startRecorder, startRedis } from './lib.mjs';

// An upstream that reports the largest usage its request allowed: the output bound sent,
// times n; the prompt as 10 tokens.
function chargeTheMost(req, res, json) {
  if (req.url.endsWith('/api/chat')) {
    const np = json?.options?.num_predict ?? 100000;
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({
        model: json.model,
        created_at: new Date().toISOString(),
        message: { role: 'assistant', content: 'x' },
        done: true,
        done_reason: 'length',
        prompt_eval_count: 10,
        eval_count: np,
      }),
    );
    return true;
  }
  if (req.url.endsWith('/v1/messages')) {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({
        id: 'msg_1',
        type: 'message',
        role: 'assistant',
        model: json.model,
        content: [{ type: 'text', text: 'x' }],
        stop_reason: 'max_tokens',
        usage: { input_tokens: 10, output_tokens: json.max_tokens },
      }),
    );
    return true;
  }
  if (req.url.endsWith('/chat/completions')) {
    const n = json?.n ?? 1;
    const out = (json?.max_tokens ?? 1000) * n;
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({
        id: 'chatcmpl-1',
        object: 'chat.completion',
        created: 1,
        model: json.model,
        choices: Array.from({ length: n }, (_, i) => ({
          index: i,
          message: { role: 'assistant', content: 'x' },
          finish_reason: 'length',
        })),
        usage: { prompt_tokens: 10, completion_tokens: out, total_tokens: 10 + out },
      }),
    );
    return true;
  }
  return false;
}

const LIMITED = 'sk-twoperminute-0000111122';

function gatewayConfig(up, { tokens = 1000, params } = {}) {
  return {
    keys: [
      { name: 'app', key: KEY, tenant: 'acme', tier: 'gold', models: ['*'] },
      { name: 'counter', key: LIMITED, tenant: 'beta', tier: 'free', models: ['*'] },
    ],
    models: [
      { alias: 'gpt', provider: 'openai', base_url: `${up.url}/v1`, model: 'gpt-4' },
      { alias: 'llama', provider: 'ollama', base_url: up.url, model: 'llama3' },
      { alias: 'claude', provider: 'anthropic', base_url: up.url, model: 'claude-x', api_key: 'sk-ant-acct-123456' },
    ],
    ...(params ? { params } : {}),
    rate_limits: {
      backend: 'memory',
      reserve_output_tokens: 100,
      requests: [{ scope: 'key', key: 'counter', limit: 2, window: '1m' }],
      tokens: [{ scope: 'key', key: 'app', limit: tokens, per: 'day' }],
    },
  };
}

function post(gw, path, body, key = KEY) {
  const headers = path === '/v1/chat/completions' ? {} : { 'anthropic-version': '2023-06-01' };
  return request(`${gw.url}${path}`, { method: 'POST', key, headers, body });
}

// Refused as never able to pass: a 400 with its own code, and no Retry-After.
function assertNeverFits(r, what) {
  assert.equal(r.status, 400, `${what}: ${r.status} ${r.text.slice(0, 300)}`);
  assert.equal(r.json.error.code, 'request_too_large_for_limit', r.text);
  assert.match(r.json.error.message, /can never pass/);
  assert.equal(r.headers.get('retry-after'), null);
}

describe('the reservation bounds what the upstream may charge', () => {
  let up;
  let gw;
  before(async () => {
    up = await startRecorder(chargeTheMost);
    gw = await startGateway(gatewayConfig(up));
  });
  after(async () => {
    await gw?.stop();
    await up?.close();
  });

  test('tool definitions are reserved: 40 KB of tools cannot pass a 1000-token budget', async () => {
    const names = Array.from({ length: 2000 }, (_, i) => `customer_record_field_${i}`);
    const tool = {
      type: 'function',
      function: { name: 'lookup', parameters: { type: 'object', properties: { f: { type: 'string', enum: names } } } },
    };
    assert.ok(JSON.stringify(tool).length > 40000);
    const before = up.requests.length;
    const results = await Promise.all(
      Array.from({ length: 5 }, () =>
        post(gw, '/v1/chat/completions', { model: 'gpt', messages: [{ role: 'user', content: 'hi' }], max_tokens: 5, tools: [tool] }),
      ),
    );
    for (const r of results) assertNeverFits(r, 'tools');
    assert.equal(up.requests.length, before, 'nothing reached the upstream');
  });

  test('assistant tool_calls arguments are reserved', async () => {
    const args = JSON.stringify({ text: 'lorem ipsum dolor sit amet '.repeat(300) });
    const r = await post(gw, '/v1/chat/completions', {
      model: 'gpt',
      max_tokens: 5,
      messages: [
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: args } }] },
        { role: 'tool', tool_call_id: 'c1', content: 'ok' },
      ],
    });
    assertNeverFits(r, 'tool_calls');
  });

  test('Ollama: options.num_predict, not max_tokens, is the output bound', async () => {
    const r = await post(gw, '/v1/chat/completions', {
      model: 'llama',
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 1,
      options: { num_predict: 4000 },
    });
    assertNeverFits(r, 'num_predict 4000');
    // Unbounded (-1, -2): the context it was given.
    for (const np of [-1, -2]) {
      const u = await post(gw, '/v1/chat/completions', {
        model: 'llama',
        messages: [{ role: 'user', content: 'hi' }],
        options: { num_predict: np, num_ctx: 2048 },
      });
      assertNeverFits(u, `num_predict ${np}`);
      assert.match(u.json.error.message, /needs 2\d{3} tokens/);
    }
  });

  test('Anthropic upstream: the 4096 output tokens it is sent are reserved', async () => {
    const r = await post(gw, '/v1/chat/completions', { model: 'claude', messages: [{ role: 'user', content: 'hi' }] });
    assertNeverFits(r, 'anthropic default');
    assert.match(r.json.error.message, /needs 4\d{3} tokens/);
    // With max_tokens set, what is sent is reserved, and the request passes.
    const ok = await post(gw, '/v1/chat/completions', { model: 'claude', messages: [{ role: 'user', content: 'hi' }], max_tokens: 50 });
    assert.equal(ok.status, 200, ok.text);
    const line = await gw.logFor(ok.headers.get('x-request-id'));
    assert.ok(line.reserved_tokens >= 50 && line.reserved_tokens < 1000, JSON.stringify(line));
  });

  test('a request whose reservation fits is charged no more than it reserved', async () => {
    for (const body of [
      { model: 'gpt', messages: [{ role: 'user', content: 'hi' }], max_tokens: 40 },
      { model: 'llama', messages: [{ role: 'user', content: 'hi' }], max_tokens: 1, options: { num_predict: 60 } },
      { model: 'claude', messages: [{ role: 'user', content: 'hi' }], max_tokens: 30 },
    ]) {
      const r = await post(gw, '/v1/chat/completions', body);
      assert.equal(r.status, 200, r.text);
      const line = await gw.logFor(r.headers.get('x-request-id'));
      const charged = line.prompt_tokens + line.completion_tokens;
      assert.ok(charged <= line.reserved_tokens, `${body.model}: charged ${charged}, reserved ${line.reserved_tokens}`);
    }
  });

  test('count_tokens is metered by the key\'s request limits: the 3rd in a minute is refused', async () => {
    const body = { model: 'gpt', messages: [{ role: 'user', content: 'x'.repeat(1000) }] };
    const statuses = [];
    for (let i = 0; i < 3; ++i) statuses.push(await post(gw, '/v1/messages/count_tokens', body, LIMITED));
    assert.deepEqual(statuses.map((r) => r.status), [200, 200, 429], statuses.map((r) => r.text).join('\n'));
    assert.ok(Number(statuses[2].headers.get('retry-after')) >= 1);
    assert.equal(statuses[2].json.error.type, 'rate_limit_error');
  });
});

describe('n, overflow and bodies too large to count exactly', () => {
  let up;
  let gw;
  before(async () => {
    up = await startRecorder(chargeTheMost);
    // `params` replaces the built-in ranges: n up to 8, max_tokens unbounded.
    gw = await startGateway(gatewayConfig(up, { tokens: 1000, params: { n: { min: 1, max: 8, integer: true } } }));
  });
  after(async () => {
    await gw?.stop();
    await up?.close();
  });

  test('n choices multiply the output reservation', async () => {
    const r = await post(gw, '/v1/chat/completions', { model: 'gpt', messages: [{ role: 'user', content: 'hi' }], max_tokens: 200, n: 8 });
    assertNeverFits(r, 'n=8');
    assert.match(r.json.error.message, /needs 16\d\d tokens/);
    const ok = await post(gw, '/v1/chat/completions', { model: 'gpt', messages: [{ role: 'user', content: 'hi' }], max_tokens: 100, n: 2 });
    assert.equal(ok.status, 200, ok.text);
    const line = await gw.logFor(ok.headers.get('x-request-id'));
    assert.ok(line.reserved_tokens >= 200, JSON.stringify(line));
  });

  test('prompt + max_tokens does not overflow', async () => {
    const raw = '{"model":"gpt","messages":[{"role":"user","content":"hi"}],"max_tokens":9223372036854775807}';
    const r = await post(gw, '/v1/chat/completions', raw);
    assertNeverFits(r, 'max_tokens INT64_MAX');
    assert.match(r.json.error.message, /needs 9223372036854775807 tokens/);
  });

  test('a body over 256 KiB is reserved by a bound never below its exact count', async () => {
    // Combining marks: the estimator counts about a third of the real tokens.
    let text = '';
    for (let i = 0; text.length < 170000; ++i) text += i % 4 === 0 ? 'a' : String.fromCodePoint(0x300 + ((i * 37) % 0x70));
    const messages = [{ role: 'user', content: text }];
    assert.ok(Buffer.byteLength(JSON.stringify(messages)) > 256 * 1024);
    // The exact count, from count_tokens (the same formula, the BPE).
    const counted = await post(gw, '/v1/messages/count_tokens', { model: 'gpt', messages });
    assert.equal(counted.status, 200, counted.text);
    const exact = counted.json.input_tokens;
    // A budget just below the exact count: the request cannot be admitted.
    const tight = await startGateway(gatewayConfig(up, { tokens: exact - 1 }));
    try {
      const before = up.requests.length;
      const r = await post(tight, '/v1/chat/completions', { model: 'gpt', messages, max_tokens: 1 });
      assertNeverFits(r, 'large body');
      assert.equal(up.requests.length, before);
    } finally {
      await tight.stop();
    }
  });
});

// ---- settlement ----------------------------------------------------------------------

// Tokens of `text` by the gateway's own count (count_tokens: a one-message prompt, minus
// the same prompt with an empty message).
async function tokensOf(gw, text, model = 'gpt') {
  const count = async (content) => {
    const r = await post(gw, '/v1/messages/count_tokens', { model, messages: [{ role: 'user', content }] });
    assert.equal(r.status, 200, r.text);
    return r.json.input_tokens;
  };
  return (await count(text)) - (await count(''));
}

// A recorder whose answers the test sets per request: `answers.next` is called with
// (req, res, json) and answers it.
function scriptedUpstream() {
  const answers = { next: null };
  return { answers, handler: (req, res, json) => (answers.next ? (answers.next(req, res, json), true) : false) };
}

function jsonAnswer(res, raw) {
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(raw);
}

function settleConfig(up, extra = {}) {
  return {
    keys: [{ name: 'app', key: KEY, tenant: 'acme', tier: 'gold', models: ['*'] }],
    models: [
      { alias: 'gpt', provider: 'openai', base_url: `${up.url}/v1`, model: 'gpt-4' },
      { alias: 'llama', provider: 'ollama', base_url: up.url, model: 'llama3' },
      { alias: 'claude', provider: 'anthropic', base_url: up.url, model: 'claude-x', api_key: 'sk-ant-acct-123456' },
    ],
    rate_limits: {
      backend: 'memory',
      reserve_output_tokens: 100,
      tokens: [{ scope: 'key', key: 'app', limit: 1000000000, per: 'day' }],
    },
    ...extra,
  };
}

describe('settlement: the upstream\'s usage where valid, else the exact count', () => {
  let up;
  let gw;
  const script = scriptedUpstream();
  before(async () => {
    up = await startRecorder(script.handler);
    gw = await startGateway(settleConfig(up));
  });
  after(async () => {
    await gw?.stop();
    await up?.close();
  });

  test('Ollama without prompt_eval_count (prompt from its cache): the prompt is counted, not charged 0', async () => {
    const prompt = 'The quarterly report covers revenue, costs and the outlook for next year. '.repeat(200);
    const messages = [{ role: 'user', content: prompt }];
    const counted = await post(gw, '/v1/messages/count_tokens', { model: 'llama', messages });
    const exact = counted.json.input_tokens;
    assert.ok(exact > 2500, `a prompt of ${exact} tokens`);
    script.answers.next = (req, res, json) =>
      jsonAnswer(
        res,
        JSON.stringify({
          model: json.model,
          created_at: new Date().toISOString(),
          message: { role: 'assistant', content: 'Noted.' },
          done: true,
          done_reason: 'stop',
          eval_count: 10, // no prompt_eval_count: the whole prompt came from the cache
        }),
      );
    let charged = 0;
    for (let i = 0; i < 3; ++i) {
      const r = await post(gw, '/v1/chat/completions', { model: 'llama', messages, max_tokens: 50 });
      assert.equal(r.status, 200, r.text);
      const line = await gw.logFor(r.headers.get('x-request-id'));
      assert.equal(line.prompt_tokens, exact, JSON.stringify(line));
      assert.equal(line.completion_tokens, 10);
      charged += line.prompt_tokens + line.completion_tokens;
    }
    assert.equal(charged, 3 * (exact + 10));
  });

  test('a non-streamed usage that is a string, negative, fractional, huge or missing falls back per field', async () => {
    const content = 'Paris is the capital of France, and its largest city by far.';
    const contentTokens = await tokensOf(gw, content);
    const messages = [{ role: 'user', content: 'What is the capital of France?' }];
    const prompt = (await post(gw, '/v1/messages/count_tokens', { model: 'gpt', messages })).json.input_tokens;
    const cases = [
      ['"prompt_tokens":"12","completion_tokens":"7"', prompt, contentTokens],
      ['"prompt_tokens":-5,"completion_tokens":-1', prompt, contentTokens],
      ['"prompt_tokens":3.7,"completion_tokens":2.5', prompt, contentTokens],
      ['"prompt_tokens":1e30,"completion_tokens":1e30', prompt, contentTokens],
      ['"prompt_tokens":12', 12, contentTokens], // partial: the completion is counted
      ['"completion_tokens":7', prompt, 7], // partial: the prompt is counted
      [null, prompt, contentTokens], // no usage at all
    ];
    for (const [usage, wantPrompt, wantCompletion] of cases) {
      script.answers.next = (req, res, json) =>
        jsonAnswer(
          res,
          `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"${json.model}",` +
            `"choices":[{"index":0,"message":{"role":"assistant","content":${JSON.stringify(content)}},"finish_reason":"stop"}]` +
            (usage === null ? '' : `,"usage":{${usage}}`) +
            '}',
        );
      const r = await post(gw, '/v1/chat/completions', { model: 'gpt', messages, max_tokens: 50 });
      assert.equal(r.status, 200, r.text);
      const line = await gw.logFor(r.headers.get('x-request-id'));
      assert.deepEqual([line.prompt_tokens, line.completion_tokens], [wantPrompt, wantCompletion], `usage {${usage}}`);
    }
  });

  test('Anthropic and tool calls: invalid counts fall back to the prompt and the relayed calls', async () => {
    const messages = [{ role: 'user', content: 'Look up the weather in Oslo.' }];
    const prompt = (await post(gw, '/v1/messages/count_tokens', { model: 'claude', messages })).json.input_tokens;
    const input = { city: 'Oslo', units: 'metric', days: 3 };
    script.answers.next = (req, res, json) =>
      jsonAnswer(
        res,
        JSON.stringify({
          id: 'msg_1',
          type: 'message',
          role: 'assistant',
          model: json.model,
          content: [{ type: 'tool_use', id: 'toolu_1', name: 'get_weather', input }],
          stop_reason: 'tool_use',
          usage: { input_tokens: '40', output_tokens: -3 },
        }),
      );
    const r = await post(gw, '/v1/chat/completions', { model: 'claude', messages, max_tokens: 50 });
    assert.equal(r.status, 200, r.text);
    const line = await gw.logFor(r.headers.get('x-request-id'));
    assert.equal(line.prompt_tokens, prompt, JSON.stringify(line));
    assert.equal(line.completion_tokens, await tokensOf(gw, 'get_weather' + JSON.stringify(input)));
  });

  test('a streamed usage that is invalid falls back the same way', async () => {
    const messages = [{ role: 'user', content: 'Count to three.' }];
    const prompt = (await post(gw, '/v1/messages/count_tokens', { model: 'gpt', messages })).json.input_tokens;
    const pieces = ['One', ', two', ', three', '.'];
    script.answers.next = (req, res, json) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const base = { id: 'chatcmpl-s', object: 'chat.completion.chunk', created: 1, model: json.model };
      for (const p of pieces) {
        res.write(`data: ${JSON.stringify({ ...base, choices: [{ index: 0, delta: { content: p }, finish_reason: null }] })}\n\n`);
      }
      res.write(`data: ${JSON.stringify({ ...base, choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] })}\n\n`);
      res.write(`data: {"id":"chatcmpl-s","object":"chat.completion.chunk","created":1,"choices":[],"usage":{"prompt_tokens":"9","completion_tokens":2.5}}\n\n`);
      res.end('data: [DONE]\n\n');
    };
    const r = await sse(`${gw.url}/v1/chat/completions`, { model: 'gpt', messages, max_tokens: 50, stream: true });
    assert.equal(r.status, 200);
    const line = await gw.logFor(r.headers.get('x-request-id'));
    assert.equal(line.prompt_tokens, prompt, JSON.stringify(line));
    assert.equal(line.completion_tokens, await tokensOf(gw, pieces.join('')));
  });

  test('a client that leaves before the usage chunk pays the tokens it received, not one per chunk', async () => {
    const messages = [{ role: 'user', content: 'Write a long text.' }];
    const piece = ' hello'.repeat(20); // 20 tokens per chunk
    const chunks = 100;
    const args = Array.from({ length: chunks }, (_, i) => `{"row":${i},"text":"alpha beta gamma delta"}`);
    for (const kind of ['content', 'tool_calls']) {
      let relayed = '';
      script.answers.next = (req, res, json) => {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        const base = { id: 'chatcmpl-l', object: 'chat.completion.chunk', created: 1, model: json.model };
        for (let i = 0; i < chunks; ++i) {
          const delta =
            kind === 'content'
              ? { content: piece }
              : {
                  tool_calls: [
                    i === 0
                      ? { index: 0, id: 'call_1', type: 'function', function: { name: 'store_rows', arguments: args[i] } }
                      : { index: 0, function: { arguments: args[i] } },
                  ],
                };
          res.write(`data: ${JSON.stringify({ ...base, choices: [{ index: 0, delta, finish_reason: null }] })}\n\n`);
        }
        // ... and the stream goes on (no finish, no usage chunk) until the client leaves.
      };
      relayed = kind === 'content' ? piece.repeat(chunks) : 'store_rows' + args.join('');
      const r = await sse(
        `${gw.url}/v1/chat/completions`,
        { model: 'gpt', messages, max_tokens: 100000, stream: true },
        {
          stopAfter: (events) =>
            (kind === 'content' ? contentEvents(events) : events.filter((e) => e.json?.choices?.[0]?.delta?.tool_calls))
              .length >= chunks,
        },
      );
      assert.equal(r.aborted, true);
      const line = await gw.logFor(r.headers.get('x-request-id'));
      assert.equal(line.client_cancelled, true);
      const want = await tokensOf(gw, relayed);
      assert.ok(want > 1000, `${kind}: ${want} tokens relayed`);
      assert.equal(line.completion_tokens, want, `${kind}: charged ${line.completion_tokens}, relayed ${want}`);
    }
  });
});

describe('settlement saturates', () => {
  let up;
  let gw;
  before(async () => {
    up = await startRecorder((req, res, json) => {
      if (!req.url.endsWith('/chat/completions')) return false;
      // prompt + completion is past INT64_MAX.
      jsonAnswer(
        res,
        `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"${json.model}",` +
          '"choices":[{"index":0,"message":{"role":"assistant","content":"x"},"finish_reason":"stop"}],' +
          '"usage":{"prompt_tokens":9223372036854775807,"completion_tokens":10,"total_tokens":1}}',
      );
      return true;
    });
    gw = await startGateway(settleConfig(up));
  });
  after(async () => {
    await gw?.stop();
    await up?.close();
  });

  test('an absurd usage charges the most one settlement can, not 0: the budget is spent', async () => {
    const body = { model: 'gpt', messages: [{ role: 'user', content: 'hi' }], max_tokens: 5 };
    const first = await post(gw, '/v1/chat/completions', body);
    assert.equal(first.status, 200, first.text);
    const next = await post(gw, '/v1/chat/completions', body);
    assert.equal(next.status, 429, next.text);
    assert.equal(next.json.error.code, 'quota_exceeded');
  });
});

describe('SIGTERM settles before exit', () => {
  let redis;
  let up;
  before(async () => {
    redis = await startRedis();
    up = await startRecorder(); // usage: 3 prompt + 1 completion tokens per answer
  });
  after(async () => {
    await up?.close();
    await redis?.stop();
  });

  test('queued settlements and token leases reach Redis: no reservation is left, used is what was charged', async () => {
    const LEASED = 'sk-leased-5555666677778888';
    const gw = await startGateway({
      keys: [
        { name: 'app', key: KEY, tenant: 'acme', tier: 'gold', models: ['*'] },
        { name: 'leased', key: LEASED, tenant: 'acme', tier: 'gold', models: ['*'] },
      ],
      models: [{ alias: 'gpt', provider: 'openai', base_url: `${up.url}/v1`, model: 'gpt-4' }],
      redis: { url: redis.url },
      rate_limits: {
        backend: 'redis',
        tokens: [
          { scope: 'key', key: 'app', limit: 1000000, per: 'day', lease: 0 }, // one reservation per request
          { scope: 'key', key: 'leased', limit: 1000000, per: 'day', lease: 5000 }, // requests served from leases
        ],
      },
    });
    const charged = { app: 0, leased: 0 };
    try {
      const body = { model: 'gpt', messages: [{ role: 'user', content: 'hi' }], max_tokens: 20 };
      await Promise.all(
        Array.from({ length: 8 }, async (_, i) => {
          for (let j = 0; j < 5; ++j) {
            const name = i % 2 ? 'leased' : 'app';
            const r = await post(gw, '/v1/chat/completions', { ...body, stream: j % 2 === 1 }, name === 'app' ? KEY : LEASED);
            assert.equal(r.status, 200, r.text);
            const line = await gw.logFor(r.headers.get('x-request-id'));
            charged[name] += line.prompt_tokens + line.completion_tokens;
          }
        }),
      );
      // The last ones: SIGTERM as soon as they are answered.
      const last = await Promise.all(
        [KEY, LEASED, KEY, LEASED].map((key) => post(gw, '/v1/chat/completions', body, key)),
      );
      for (const r of last) assert.equal(r.status, 200, r.text);
      await gw.stop();
      for (const [i, r] of last.entries()) {
        const line = gw.logLines().find((l) => l.request_id === r.headers.get('x-request-id'));
        charged[i % 2 ? 'leased' : 'app'] += line.prompt_tokens + line.completion_tokens;
      }
    } finally {
      await gw.stop();
    }
    assert.ok(charged.app > 0 && charged.leased > 0);
    for (const name of ['app', 'leased']) {
      assert.deepEqual(await redisLedger(redis, name), { requests: 0, used: charged[name], reserved: 0, holds: 0 }, name);
    }
  });
});
