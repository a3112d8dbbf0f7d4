// Probes, models, identification headers, authentication, authorization, request
// validation, size limits and trace propagation.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import {
  BAD_KEY,
  KEY,
  KEY_LIMITED,
  USER,
  chat,
  rawRequest,
  request,
  startGateway,
  startRecorder,
  withGateway,
} from './lib.mjs';

const FAST = { ttft: '5ms', inter_token: '1ms', jitter: 0 };
const MAX_BODY = 4096;

let gw;
let rec;

// The file's gateway; a test that needs another setting starts its own with withGateway().
function basicsConfig() {
  return {
    instance: 'it-basics',
    keys: [
      { name: 'test-app', key: KEY, tenant: 'acme', tier: 'gold', models: ['*'] },
      { name: 'limited', key: KEY_LIMITED, tenant: 'beta', models: ['demo'] },
    ],
    models: [
      { alias: 'demo', provider: 'simulated', model: 'demo-real', sim: FAST },
      { alias: 'other', provider: 'simulated', sim: FAST },
      {
        alias: 'recorded',
        provider: 'openai',
        base_url: `${rec.url}/v1`,
        model: 'rec-real',
        api_key: 'sk-upstream-secret-9876',
      },
    ],
  };
}

before(async () => {
  rec = await startRecorder();
  gw = await startGateway(basicsConfig());
});

after(async () => {
  await gw?.stop();
  await rec?.close();
});

// The OpenAI error shape: {"error":{"message","type","code","param"}}.
function assertError(r, status, code, type) {
  assert.equal(r.status, status, `status; body: ${r.text ?? r.body}`);
  const body = r.json ?? JSON.parse(r.body);
  assert.equal(typeof body.error, 'object', 'error object');
  assert.equal(body.error.code, code);
  if (type) assert.equal(body.error.type, type);
  assert.equal(typeof body.error.message, 'string');
  assert.ok(body.error.message.length > 0, 'non-empty message');
  assert.ok('param' in body.error, 'param present');
  return body.error;
}

describe('probes', () => {
  test('/health answers 200 ok with the instance header', async () => {
    const r = await request(`${gw.url}/health`);
    assert.equal(r.status, 200);
    assert.deepEqual(r.json, { status: 'ok' });
    assert.equal(r.headers.get('x-sluice-instance'), 'it-basics');
  });

  test('/ready answers 200 ready', async () => {
    const r = await request(`${gw.url}/ready`);
    assert.equal(r.status, 200);
    assert.deepEqual(r.json, { status: 'ready', checks: { draining: false, rate_limiter: 'none' } });
    assert.equal(r.headers.get('x-sluice-instance'), 'it-basics');
  });
});

// Operators see each thread's role in top -H, ps -L and perf (docs/phases.md).
test('the gateway names its threads by role', () => {
  const names = fs.readdirSync(`/proc/${gw.pid}/task`).map((t) => fs.readFileSync(`/proc/${gw.pid}/task/${t}/comm`, 'utf8').trim());
  for (const name of ['sluice-w0', 'sluice-w1', 'sluice-log', 'sluice-history', 'sluice-monitor']) {
    assert.ok(names.includes(name), `${name} among ${names.join(', ')}`);
  }
});

describe('models', () => {
  test('/v1/models lists every alias for a key allowed "*"', async () => {
    const r = await request(`${gw.url}/v1/models`, { key: KEY });
    assert.equal(r.status, 200);
    assert.equal(r.json.object, 'list');
    assert.deepEqual(r.json.data.map((m) => m.id).sort(), ['demo', 'other', 'recorded']);
    for (const m of r.json.data) assert.equal(m.object, 'model');
    const byId = Object.fromEntries(r.json.data.map((m) => [m.id, m]));
    assert.equal(byId.demo.owned_by, 'simulated');
    assert.equal(byId.recorded.owned_by, 'openai');
  });

  test('/v1/models lists only the models of a restricted key', async () => {
    const r = await request(`${gw.url}/v1/models`, { key: KEY_LIMITED });
    assert.equal(r.status, 200);
    assert.deepEqual(
      r.json.data.map((m) => m.id),
      ['demo'],
    );
  });

  test('/v1/models requires a key', async () => {
    const r = await request(`${gw.url}/v1/models`);
    assertError(r, 401, 'missing_api_key', 'authentication_error');
  });
});

describe('request id and instance headers', () => {
  test('a valid X-Request-Id is echoed back', async () => {
    const r = await request(`${gw.url}/v1/models`, { key: KEY, headers: { 'x-request-id': 'client-req-42' } });
    assert.equal(r.status, 200);
    assert.equal(r.headers.get('x-request-id'), 'client-req-42');
    assert.equal(r.headers.get('x-sluice-instance'), 'it-basics');
  });

  test('without X-Request-Id a 32-hex id is generated, different per request', async () => {
    const a = await request(`${gw.url}/v1/models`, { key: KEY });
    const b = await request(`${gw.url}/v1/models`, { key: KEY });
    assert.match(a.headers.get('x-request-id'), /^[0-9a-f]{32}$/);
    assert.match(b.headers.get('x-request-id'), /^[0-9a-f]{32}$/);
    assert.notEqual(a.headers.get('x-request-id'), b.headers.get('x-request-id'));
  });

  test('an unusable X-Request-Id (over 128 chars) is replaced by a generated one', async () => {
    const long = 'a'.repeat(129);
    const r = await request(`${gw.url}/v1/models`, { key: KEY, headers: { 'x-request-id': long } });
    assert.equal(r.status, 200);
    assert.match(r.headers.get('x-request-id'), /^[0-9a-f]{32}$/);
  });

  test('error replies carry the request id and instance too', async () => {
    const r = await request(`${gw.url}/v1/models`, { headers: { 'x-request-id': 'err-req-1' } });
    assert.equal(r.status, 401);
    assert.equal(r.headers.get('x-request-id'), 'err-req-1');
    assert.equal(r.headers.get('x-sluice-instance'), 'it-basics');
  });

  test('a chat completion carries the request id and instance', async () => {
    const r = await chat(gw, { model: 'demo', messages: USER, max_tokens: 2 }, { headers: { 'x-request-id': 'chat-1' } });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers.get('x-request-id'), 'chat-1');
    assert.equal(r.headers.get('x-sluice-instance'), 'it-basics');
  });
});

describe('authentication', () => {
  const body = { model: 'demo', messages: USER, max_tokens: 2 };

  test('no key -> 401 missing_api_key', async () => {
    const r = await chat(gw, body, { key: null });
    assertError(r, 401, 'missing_api_key', 'authentication_error');
  });

  test('unknown key -> 401 invalid_api_key', async () => {
    const r = await chat(gw, body, { key: BAD_KEY });
    const e = assertError(r, 401, 'invalid_api_key', 'authentication_error');
    assert.ok(!e.message.includes(BAD_KEY), 'the key is not echoed');
  });

  test('"Authorization: Bearer" with an empty secret -> 401 missing_api_key', async () => {
    const r = await chat(gw, body, { key: null, headers: { authorization: 'Bearer ' } });
    assertError(r, 401, 'missing_api_key');
  });

  test('key via "Authorization: Bearer" is accepted', async () => {
    const r = await chat(gw, body, { key: null, headers: { authorization: `Bearer ${KEY}` } });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.object, 'chat.completion');
  });

  test('the Bearer scheme is case-insensitive', async () => {
    const r = await chat(gw, body, { key: null, headers: { authorization: `bearer ${KEY}` } });
    assert.equal(r.status, 200, r.text);
  });

  test('key via "X-API-Key" is accepted', async () => {
    const r = await chat(gw, body, { key: null, headers: { 'x-api-key': KEY } });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.object, 'chat.completion');
  });

  test('a bad key via X-API-Key -> 401 invalid_api_key', async () => {
    const r = await chat(gw, body, { key: null, headers: { 'x-api-key': BAD_KEY } });
    assertError(r, 401, 'invalid_api_key');
  });
});

describe('routing and authorization', () => {
  test('a key not allowed to use a model -> 403 model_not_allowed', async () => {
    const r = await chat(gw, { model: 'other', messages: USER }, { key: KEY_LIMITED });
    const e = assertError(r, 403, 'model_not_allowed', 'permission_error');
    assert.equal(e.param, 'model');
  });

  test('the restricted key may use its own model', async () => {
    const r = await chat(gw, { model: 'demo', messages: USER, max_tokens: 2 }, { key: KEY_LIMITED });
    assert.equal(r.status, 200, r.text);
  });

  test('unknown model -> 404 model_not_found', async () => {
    const r = await chat(gw, { model: 'no-such-model', messages: USER });
    const e = assertError(r, 404, 'model_not_found', 'invalid_request_error');
    assert.equal(e.param, 'model');
    assert.match(e.message, /no-such-model/);
  });

  test('unknown path -> 404 not_found', async () => {
    const r = await request(`${gw.url}/v1/does-not-exist`, { key: KEY });
    assertError(r, 404, 'not_found');
  });

  test('wrong method -> 405 method_not_allowed', async () => {
    const r = await request(`${gw.url}/v1/chat/completions`, { key: KEY });
    assertError(r, 405, 'method_not_allowed');
  });
});

describe('request validation', () => {
  test('malformed JSON -> 400 invalid_json', async () => {
    const r = await chat(gw, '{"model": "demo", "messages": [', { headers: { 'content-type': 'application/json' } });
    assertError(r, 400, 'invalid_json', 'invalid_request_error');
  });

  test('a body that is not an object -> 400 invalid_json', async () => {
    const r = await chat(gw, '[1,2]', { headers: { 'content-type': 'application/json' } });
    assertError(r, 400, 'invalid_json');
  });

  test('messages missing -> 400 invalid_request, param messages', async () => {
    const r = await chat(gw, { model: 'demo' });
    const e = assertError(r, 400, 'invalid_request', 'invalid_request_error');
    assert.equal(e.param, 'messages');
  });

  test('messages empty -> 400 invalid_request', async () => {
    const r = await chat(gw, { model: 'demo', messages: [] });
    const e = assertError(r, 400, 'invalid_request');
    assert.equal(e.param, 'messages');
  });

  test('a message without role -> 400, param messages[0].role', async () => {
    const r = await chat(gw, { model: 'demo', messages: [{ content: 'hi' }] });
    const e = assertError(r, 400, 'invalid_request');
    assert.equal(e.param, 'messages[0].role');
  });

  test('stream of the wrong type -> 400 invalid_request', async () => {
    const r = await chat(gw, { model: 'demo', messages: USER, stream: 'yes' });
    const e = assertError(r, 400, 'invalid_request');
    assert.equal(e.param, 'stream');
  });

  test('options.num_ctx out of range -> 400 option_out_of_range', async () => {
    const r = await chat(gw, { model: 'demo', messages: USER, options: { num_ctx: 999999 } });
    const e = assertError(r, 400, 'option_out_of_range', 'invalid_request_error');
    assert.equal(e.param, 'options.num_ctx');
    assert.match(e.message, /999999/);
  });

  test('an option not in the allow-list -> 400 option_not_allowed', async () => {
    const r = await chat(gw, { model: 'demo', messages: USER, options: { use_mmap: 1 } });
    const e = assertError(r, 400, 'option_not_allowed');
    assert.equal(e.param, 'options.use_mmap');
  });

  test('a top-level param out of range -> 400 option_out_of_range', async () => {
    const r = await chat(gw, { model: 'demo', messages: USER, temperature: 3.5 });
    const e = assertError(r, 400, 'option_out_of_range');
    assert.equal(e.param, 'temperature');
  });

  test('an unknown top-level field -> 400 option_not_allowed', async () => {
    const r = await chat(gw, { model: 'demo', messages: USER, frobnicate: true });
    const e = assertError(r, 400, 'option_not_allowed', 'invalid_request_error');
    assert.equal(e.param, 'frobnicate');
  });

  test('validation happens before routing: a bad body for an unknown model is a 400', async () => {
    const r = await chat(gw, { model: 'no-such-model', messages: USER, temperature: -1 });
    assertError(r, 400, 'option_out_of_range');
  });
});

describe('size limits (a gateway of their own, max_body_bytes lowered)', () => {
  const sized = (fn) => withGateway(basicsConfig, { limits: { max_body_bytes: MAX_BODY } }, fn);

  test('a body over max_body_bytes -> 413 body_too_large', async () => {
    const big = JSON.stringify({ model: 'demo', messages: [{ role: 'user', content: 'x'.repeat(MAX_BODY * 2) }] });
    await sized(async (gw) => {
      const r = await rawRequest({
        port: gw.port,
        method: 'POST',
        path: '/v1/chat/completions',
        headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
        body: big,
      });
      assert.equal(r.status, 413, r.body);
      const e = JSON.parse(r.body).error;
      assert.equal(e.code, 'body_too_large');
      assert.equal(r.headers['x-sluice-instance'], 'it-basics');
    });
  });

  test('a body just under max_body_bytes is accepted', async () => {
    const base = JSON.stringify({ model: 'demo', messages: [{ role: 'user', content: '' }], max_tokens: 1 });
    const content = 'x'.repeat(MAX_BODY - base.length - 8);
    await sized(async (gw) => {
      const r = await chat(gw, { model: 'demo', messages: [{ role: 'user', content }], max_tokens: 1 });
      assert.equal(r.status, 200, r.text);
    });
  });

  test("the file's gateway keeps the default limit", async () => {
    const content = 'x'.repeat(MAX_BODY * 2);
    const r = await chat(gw, { model: 'demo', messages: [{ role: 'user', content }], max_tokens: 1 });
    assert.equal(r.status, 200, r.text);
  });
});

describe('upstream request headers (seen by a recording upstream)', () => {
  // The simulator does not expose the headers it receives, so these use a plain Node HTTP
  // server as the OpenAI-compatible upstream and inspect what the gateway sent it.
  test('traceparent keeps the trace id, gets a new parent id, keeps the flags', async () => {
    const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
    const incoming = `00-${traceId}-00f067aa0ba902b7-01`;
    const n = rec.requests.length;
    const r = await chat(gw, { model: 'recorded', messages: USER }, { headers: { traceparent: incoming } });
    assert.equal(r.status, 200, r.text);
    assert.equal(rec.requests.length, n + 1, 'one upstream request');
    const up = rec.requests.at(-1);
    const m = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/.exec(up.headers.traceparent ?? '');
    assert.ok(m, `upstream traceparent well-formed: ${up.headers.traceparent}`);
    assert.equal(m[1], traceId, 'same trace id');
    assert.notEqual(m[2], '00f067aa0ba902b7', 'a new parent (span) id');
    assert.equal(m[3], '01', 'flags kept');
  });

  test('without traceparent the gateway starts a new trace', async () => {
    const r = await chat(gw, { model: 'recorded', messages: USER });
    assert.equal(r.status, 200, r.text);
    const up = rec.requests.at(-1);
    assert.match(up.headers.traceparent ?? '', /^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
    assert.notEqual(up.headers.traceparent.slice(3, 35), '0'.repeat(32));
  });

  test('an invalid traceparent is replaced, not forwarded', async () => {
    const bad = '00-00000000000000000000000000000000-00f067aa0ba902b7-01';
    const r = await chat(gw, { model: 'recorded', messages: USER }, { headers: { traceparent: bad } });
    assert.equal(r.status, 200, r.text);
    const tp = rec.requests.at(-1).headers.traceparent;
    assert.match(tp, /^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/);
    assert.notEqual(tp.slice(3, 35), '0'.repeat(32));
  });

  test('the request id goes upstream; the provider key replaces the client key', async () => {
    const r = await chat(gw, { model: 'recorded', messages: USER }, { headers: { 'x-request-id': 'up-req-7' } });
    assert.equal(r.status, 200, r.text);
    const up = rec.requests.at(-1);
    assert.equal(up.headers['x-request-id'], 'up-req-7');
    assert.equal(up.headers.authorization, 'Bearer sk-upstream-secret-9876');
    assert.ok(!JSON.stringify(up.headers).includes(KEY), 'the client key never reaches the upstream');
    assert.equal(up.url, '/v1/chat/completions');
    assert.equal(up.json.model, 'rec-real', 'alias replaced by the real model');
  });
});
