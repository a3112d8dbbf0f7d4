// Request filters (src/filters, docs/phases.md "Filters") seen from a client:
// limits.max_messages, the first filter added as a file of its own. It ends a request
// before admission: no rate-limit count, no token reservation, no upstream call.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { KEY, request, startGateway, startSim } from './lib.mjs';

let sim, gw;

const user = (n) => Array.from({ length: n }, (_, i) => ({ role: 'user', content: `turn ${i}` }));

before(async () => {
  sim = await startSim({ ttft: '1ms', 'inter-token': '1ms' });
  gw = await startGateway({
    keys: [{ name: 'free-app', key: KEY, tenant: 'acme', tier: 'free', models: ['*'] }],
    limits: { max_messages: 3 },
    rate_limits: { backend: 'memory', requests: [{ scope: 'key', tier: 'free', limit: 1000, window: '1h' }] },
    models: [
      { alias: 'gpt', provider: 'openai', base_url: `${sim.url}/v1` },
      { alias: 'claude', provider: 'anthropic', base_url: sim.url, model: 'claude-x' },
    ],
  });
});

after(async () => {
  await Promise.all([gw?.stop(), sim?.stop()]);
});

const chat = (messages, extra = {}) =>
  request(`${gw.url}/v1/chat/completions`, { method: 'POST', key: KEY, body: { model: 'gpt', messages, max_tokens: 2, ...extra } });

const messagesApi = (body) =>
  request(`${gw.url}/v1/messages`, {
    method: 'POST',
    key: KEY,
    headers: { 'anthropic-version': '2023-06-01' },
    body: { model: 'claude', max_tokens: 2, ...body },
  });

const remaining = (r) => Number(r.headers.get('x-ratelimit-remaining-requests'));

describe('limits.max_messages', () => {
  test('a chat request with more messages than the cap is refused before admission', async () => {
    const ok = await chat(user(3));
    assert.equal(ok.status, 200, ok.text);
    const before = remaining(ok);
    const upstreamBefore = (await sim.stats()).requests;

    const r = await chat(user(4));
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.error.code, 'too_many_messages');
    assert.equal(r.json.error.param, 'messages');
    assert.match(r.json.error.message, /4 messages.*at most 3/);
    assert.equal(r.headers.get('x-ratelimit-remaining-requests'), null, 'refused before the rate limits ran');
    assert.equal((await sim.stats()).requests, upstreamBefore, 'the upstream was not called');

    const line = await gw.logFor(r.headers.get('x-request-id'));
    assert.equal(line.reason, 'too_many_messages');
    assert.equal(line.status, 400);

    const next = await chat(user(1));
    assert.equal(remaining(next), before - 1, 'the refused request was not counted');
  });

  test('system and developer messages are not counted', async () => {
    const r = await chat([{ role: 'system', content: 'be brief' }, { role: 'developer', content: 'no lists' }, ...user(3)]);
    assert.equal(r.status, 200, r.text);
  });

  test('through /v1/messages: the system prompt is not a message; the refusal is Anthropic-shaped', async () => {
    const ok = await messagesApi({ system: 'be brief', messages: user(3) });
    assert.equal(ok.status, 200, ok.text);
    const r = await messagesApi({ system: 'be brief', messages: user(4) });
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.type, 'error');
    assert.equal(r.json.error.type, 'invalid_request_error');
    assert.match(r.json.error.message, /4 messages/);
  });

  test('each tool_result block counts as one message, as in chat completions', async () => {
    // assistant tool_use with two calls, then one user turn with two tool_result blocks:
    // user, assistant, tool, tool = 4 chat messages.
    const r = await messagesApi({
      tools: [{ name: 'f', input_schema: { type: 'object' } }],
      messages: [
        { role: 'user', content: 'call f twice' },
        {
          role: 'assistant',
          content: [
            { type: 'tool_use', id: 't1', name: 'f', input: {} },
            { type: 'tool_use', id: 't2', name: 'f', input: {} },
          ],
        },
        {
          role: 'user',
          content: [
            { type: 'tool_result', tool_use_id: 't1', content: 'one' },
            { type: 'tool_result', tool_use_id: 't2', content: 'two' },
          ],
        },
      ],
    });
    assert.equal(r.status, 400, r.text);
    assert.match(r.json.error.message, /4 messages/);
  });

  test('count_tokens is not capped', async () => {
    const r = await request(`${gw.url}/v1/messages/count_tokens`, {
      method: 'POST',
      key: KEY,
      headers: { 'anthropic-version': '2023-06-01' },
      body: { model: 'claude', messages: user(5) },
    });
    assert.equal(r.status, 200, r.text);
    assert.ok(r.json.input_tokens > 0);
  });
});
