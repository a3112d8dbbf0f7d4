// CORS (config `cors`, docs/configuration.md): off by default; on, preflights from an
// allowed origin are answered and its replies, streamed or not, carry the CORS headers.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { KEY, USER, keysAll, rawRequest, startGateway, withGateway } from './lib.mjs';

const SIM = { alias: 'demo', provider: 'simulated', sim: { ttft: '1ms', inter_token: '1ms', jitter: 0 } };
const APP = 'https://app.example.com';
let gw;

before(async () => {
  gw = await startGateway({ keys: keysAll(), models: [SIM], cors: { allowed_origins: [APP, 'http://localhost:5173'], max_age: '5m' } });
});

after(async () => {
  await gw?.stop();
});

const preflight = (origin, headers = {}) =>
  rawRequest({
    port: gw.port,
    method: 'OPTIONS',
    path: '/v1/chat/completions',
    headers: { origin, 'access-control-request-method': 'POST', ...headers },
  });

const chat = (origin, extra = {}) =>
  rawRequest({
    port: gw.port,
    method: 'POST',
    path: '/v1/chat/completions',
    headers: { origin, authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'demo', messages: USER, max_tokens: 2, ...extra }),
  });

describe('cors', () => {
  test('a preflight from an allowed origin is answered with what the browser needs', async () => {
    const r = await preflight(APP, { 'access-control-request-headers': 'authorization, content-type, x-stainless-os' });
    assert.equal(r.status, 200, r.body);
    assert.equal(r.body, '');
    assert.equal(r.headers['access-control-allow-origin'], APP);
    assert.match(r.headers['access-control-allow-methods'], /POST/);
    assert.equal(r.headers['access-control-allow-headers'], 'authorization, content-type, x-stainless-os');
    assert.equal(r.headers['access-control-max-age'], '300');
    assert.equal(r.headers.vary, 'Origin');
  });

  test('a preflight asking for odd header names gets the ones the API reads', async () => {
    const r = await preflight(APP, { 'access-control-request-headers': 'x-a;b' });
    assert.equal(r.status, 200);
    assert.match(r.headers['access-control-allow-headers'], /^authorization, content-type, x-api-key/);
  });

  test('a preflight from another origin is refused, without CORS headers', async () => {
    const r = await preflight('https://evil.example');
    assert.equal(r.status, 403, r.body);
    assert.equal(r.headers['access-control-allow-origin'], undefined);
    assert.equal(JSON.parse(r.body).error.code, 'forbidden');
  });

  test('replies to an allowed origin carry the CORS headers, streamed or not; others do not', async () => {
    const whole = await chat(APP);
    assert.equal(whole.status, 200, whole.body);
    assert.equal(whole.headers['access-control-allow-origin'], APP);
    assert.match(whole.headers['access-control-expose-headers'], /x-request-id/);
    const stream = await chat('http://localhost:5173', { stream: true });
    assert.equal(stream.status, 200);
    assert.match(stream.headers['content-type'], /text\/event-stream/);
    assert.equal(stream.headers['access-control-allow-origin'], 'http://localhost:5173');
    const other = await chat('https://evil.example');
    assert.equal(other.status, 200, 'the API still answers: the browser enforces CORS');
    assert.equal(other.headers['access-control-allow-origin'], undefined);
    const refused = await rawRequest({ port: gw.port, method: 'POST', path: '/v1/chat/completions', headers: { origin: APP }, body: '{}' });
    assert.equal(refused.status, 401);
    assert.equal(refused.headers['access-control-allow-origin'], APP, 'an error is readable by the page too');
  });

  test('off by default: OPTIONS is a 405 and no reply carries CORS headers', async () => {
    await withGateway({ models: [SIM] }, async (plain) => {
      const r = await rawRequest({
        port: plain.port,
        method: 'OPTIONS',
        path: '/v1/chat/completions',
        headers: { origin: APP, 'access-control-request-method': 'POST' },
      });
      assert.equal(r.status, 405);
      assert.equal(r.headers['access-control-allow-origin'], undefined);
    });
  });
});
