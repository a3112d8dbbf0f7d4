// The official `openai` npm package against the gateway: what real clients see.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { BAD_KEY, KEY, KEY_LIMITED, simText, simTokens, startGateway, startRecorder, startSim } from './lib.mjs';

let gw;
let sim429;
let dropper;

const messages = [{ role: 'user', content: 'Hello from the SDK test.' }];

// A recording upstream that sends two tokens and then destroys the connection.
function drop(req, res) {
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  for (const text of simTokens(2)) {
    res.write(
      `data: ${JSON.stringify({
        id: 'chatcmpl-d',
        object: 'chat.completion.chunk',
        created: 1,
        model: 'x',
        choices: [{ index: 0, delta: { content: text }, finish_reason: null }],
      })}\n\n`,
    );
  }
  setTimeout(() => res.socket.destroy(), 100);
  return true;
}

before(async () => {
  [sim429, dropper] = await Promise.all([startSim({ 'error-rate-429': 1 }), startRecorder(drop)]);
  gw = await startGateway({
    instance: 'it-sdk',
    keys: [
      { name: 'test-app', key: KEY, tenant: 'acme', tier: 'gold', models: ['*'] },
      { name: 'limited', key: KEY_LIMITED, models: ['demo'] },
    ],
    models: [
      { alias: 'demo', provider: 'simulated', sim: { ttft: '20ms', inter_token: '5ms', jitter: 0 } },
      { alias: 'busy', provider: 'openai', base_url: `${sim429.url}/v1` },
      { alias: 'dropper', provider: 'openai', base_url: `${dropper.url}/v1` },
      { alias: 'team/demo', provider: 'simulated', sim: { ttft: '1ms', inter_token: '1ms', jitter: 0 } },
    ],
  });
});

after(async () => {
  await Promise.all([gw?.stop(), sim429?.stop(), dropper?.close()]);
});

const client = (apiKey = KEY) => new OpenAI({ apiKey, baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 15000 });

describe('openai SDK: success', () => {
  test('models.list returns the aliases', async () => {
    const ids = [];
    for await (const m of client().models.list()) ids.push(m.id);
    assert.deepEqual(ids.sort(), ['busy', 'demo', 'dropper', 'team/demo']);
  });

  test('models.retrieve returns one alias, also one holding a slash (the SDK encodes it)', async () => {
    const m = await client().models.retrieve('demo');
    assert.deepEqual(m, { id: 'demo', object: 'model', created: 0, owned_by: 'simulated' });
    const slash = await client().models.retrieve('team/demo');
    assert.equal(slash.id, 'team/demo');
  });

  test('models.retrieve of an unknown model, or of one the key may not use, is a 404', async () => {
    for (const [key, model] of [
      [KEY, 'nope'],
      [KEY_LIMITED, 'busy'],
    ]) {
      await assert.rejects(client(key).models.retrieve(model), (e) => {
        assert.ok(e instanceof OpenAI.NotFoundError, String(e));
        assert.equal(e.code, 'model_not_found');
        return true;
      });
    }
  });

  test('chat.completions.create: plain completion', async () => {
    const c = await client().chat.completions.create({ model: 'demo', messages, max_tokens: 3 });
    assert.equal(c.object, 'chat.completion');
    assert.equal(c.choices[0].message.role, 'assistant');
    assert.equal(c.choices[0].message.content, simText(3));
    assert.equal(c.choices[0].finish_reason, 'length');
    assert.equal(c.usage.completion_tokens, 3);
    assert.equal(c.usage.total_tokens, c.usage.prompt_tokens + 3);
    // The SDK exposes the x-request-id response header.
    assert.match(c._request_id, /^[0-9a-f]{32}$/);
  });

  test('withResponse: gateway headers are visible to the SDK', async () => {
    const { data, response } = await client()
      .chat.completions.create({ model: 'demo', messages, max_tokens: 1 })
      .withResponse();
    assert.equal(data.choices[0].message.content, simText(1));
    assert.equal(response.status, 200);
    assert.equal(response.headers.get('x-sluice-instance'), 'it-sdk');
  });

  test('streamed completion: for await over chunks assembles the content', async () => {
    const stream = await client().chat.completions.create({ model: 'demo', messages, max_tokens: 6, stream: true });
    let content = '';
    let chunks = 0;
    let finish = null;
    for await (const chunk of stream) {
      assert.equal(chunk.object, 'chat.completion.chunk');
      chunks++;
      content += chunk.choices[0]?.delta?.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.equal(content, simText(6));
    assert.equal(finish, 'length');
    assert.ok(chunks >= 6);
  });

  test('streamed completion with include_usage: the last chunk carries usage', async () => {
    const stream = await client().chat.completions.create({
      model: 'demo',
      messages,
      max_tokens: 4,
      stream: true,
      stream_options: { include_usage: true },
    });
    const all = [];
    for await (const chunk of stream) all.push(chunk);
    const last = all.at(-1);
    assert.deepEqual(last.choices, []);
    assert.equal(last.usage.completion_tokens, 4);
    assert.equal(all.filter((c) => c.usage).length, 1);
  });

  test('the key may be sent as X-API-Key through defaultHeaders', async () => {
    const c = new OpenAI({
      apiKey: 'unused-placeholder',
      baseURL: `${gw.url}/v1`,
      maxRetries: 0,
      // The SDK always sends Authorization; replace it with an empty value and use X-API-Key.
      defaultHeaders: { Authorization: null, 'X-API-Key': KEY },
    });
    const r = await c.chat.completions.create({ model: 'demo', messages, max_tokens: 1 });
    assert.equal(r.choices[0].message.content, simText(1));
  });
});

describe('openai SDK: errors map to the SDK classes', () => {
  test('bad key -> AuthenticationError (401)', async () => {
    await assert.rejects(client(BAD_KEY).chat.completions.create({ model: 'demo', messages }), (e) => {
      assert.ok(e instanceof OpenAI.AuthenticationError, `got ${e.constructor.name}: ${e.message}`);
      assert.equal(e.status, 401);
      assert.equal(e.code, 'invalid_api_key');
      assert.equal(e.type, 'authentication_error');
      assert.match(e.requestID, /^[0-9a-f]{32}$/);
      return true;
    });
  });

  test('unknown model -> NotFoundError (404)', async () => {
    await assert.rejects(client().chat.completions.create({ model: 'no-such-model', messages }), (e) => {
      assert.ok(e instanceof OpenAI.NotFoundError, `got ${e.constructor.name}: ${e.message}`);
      assert.equal(e.status, 404);
      assert.equal(e.code, 'model_not_found');
      assert.equal(e.param, 'model');
      return true;
    });
  });

  test('invalid parameter -> BadRequestError (400)', async () => {
    await assert.rejects(client().chat.completions.create({ model: 'demo', messages, temperature: 5 }), (e) => {
      assert.ok(e instanceof OpenAI.BadRequestError, `got ${e.constructor.name}: ${e.message}`);
      assert.equal(e.status, 400);
      assert.equal(e.code, 'option_out_of_range');
      assert.equal(e.param, 'temperature');
      return true;
    });
  });

  test('model not allowed for the key -> PermissionDeniedError (403)', async () => {
    await assert.rejects(client(KEY_LIMITED).chat.completions.create({ model: 'busy', messages }), (e) => {
      assert.ok(e instanceof OpenAI.PermissionDeniedError, `got ${e.constructor.name}: ${e.message}`);
      assert.equal(e.status, 403);
      assert.equal(e.code, 'model_not_allowed');
      return true;
    });
  });

  test('upstream rate limit -> RateLimitError (429) with Retry-After', async () => {
    await assert.rejects(client().chat.completions.create({ model: 'busy', messages }), (e) => {
      assert.ok(e instanceof OpenAI.RateLimitError, `got ${e.constructor.name}: ${e.message}`);
      assert.equal(e.status, 429);
      assert.equal(e.code, 'rate_limit_exceeded');
      assert.equal(e.headers.get('retry-after'), '1');
      return true;
    });
  });

  test('a mid-stream upstream failure surfaces as an APIError while iterating', async () => {
    const stream = await client().chat.completions.create({ model: 'dropper', messages, stream: true });
    let content = '';
    await assert.rejects(
      (async () => {
        for await (const chunk of stream) content += chunk.choices[0]?.delta?.content ?? '';
      })(),
      (e) => {
        assert.ok(e instanceof OpenAI.APIError, `got ${e.constructor.name}: ${e.message}`);
        assert.equal(e.code, 'upstream_stream_failed');
        return true;
      },
    );
    assert.equal(content, simText(2), 'the content before the failure was delivered');
  });
});
