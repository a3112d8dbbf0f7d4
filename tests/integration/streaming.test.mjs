// Streaming relay: tokens are relayed as they come, heartbeats while the upstream is
// silent, a mid-stream upstream failure becomes an error event, and a client that goes
// away cancels the upstream request.
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import {
  KEY,
  USER,
  assembled,
  chat,
  contentEvents,
  delay,
  keysAll,
  request,
  sse,
  simText,
  simTokens,
  startGateway,
  startRecorder,
  startSim,
  waitFor,
} from './lib.mjs';

let simA; // OpenAI wire
let simB; // Ollama wire
let scripted; // a Node upstream that misbehaves on purpose (see script())
let gw;

// Upstream behaviours the simulator cannot produce reliably: three tokens, then the
// connection is destroyed ("drop") or the upstream goes silent ("stall"); or the response
// head comes at once and the first token 1.5 s later ("late-head").
function script(req, res, json) {
  if (!['drop', 'stall', 'late-head'].includes(json?.model)) return false;
  const ollama = req.url.endsWith('/api/chat');
  res.writeHead(200, { 'content-type': ollama ? 'application/x-ndjson' : 'text/event-stream' });
  if (json.model === 'late-head') {
    // The response head at once, the first token only after 1.5 s.
    res.flushHeaders();
    const chunk = (delta, finish) =>
      `data: ${JSON.stringify({ id: 'chatcmpl-l', object: 'chat.completion.chunk', created: 1, model: 'x', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    const t = setTimeout(() => {
      res.end(chunk({ role: 'assistant', content: simText(1) }, null) + chunk({}, 'stop') + 'data: [DONE]\n\n');
    }, 1500);
    res.on('close', () => clearTimeout(t));
    return true;
  }
  for (const text of simTokens(3)) {
    res.write(
      ollama
        ? `${JSON.stringify({ model: 'x', message: { role: 'assistant', content: text }, done: false })}\n`
        : `data: ${JSON.stringify({
            id: 'chatcmpl-s',
            object: 'chat.completion.chunk',
            created: 1,
            model: 'x',
            choices: [{ index: 0, delta: { content: text }, finish_reason: null }],
          })}\n\n`,
    );
  }
  if (json.model === 'drop') setTimeout(() => res.socket.destroy(), 100);
  return true;
}

const BASE = {
  ttft_ms: 20,
  inter_token_ms: 10,
  jitter: 0,
  abort_rate: 0,
  hang_rate: 0,
  error_rate_500: 0,
  slow_first_token_rate: 0,
};

before(async () => {
  [simA, simB, scripted] = await Promise.all([startSim(), startSim(), startRecorder(script)]);
  gw = await startGateway({
    instance: 'it-stream',
    timeouts: { heartbeat: '200ms', idle: '3s' },
    keys: keysAll(),
    models: [
      { alias: 'gpt', provider: 'openai', base_url: `${simA.url}/v1`, model: 'real-gpt' },
      { alias: 'llama', provider: 'ollama', base_url: simB.url, model: 'llama3' },
      { alias: 'drop-gpt', provider: 'openai', base_url: `${scripted.url}/v1`, model: 'drop' },
      { alias: 'drop-llama', provider: 'ollama', base_url: scripted.url, model: 'drop' },
      { alias: 'stall-gpt', provider: 'openai', base_url: `${scripted.url}/v1`, model: 'stall' },
      { alias: 'late-head', provider: 'openai', base_url: `${scripted.url}/v1`, model: 'late-head' },
    ],
  });
});

after(async () => {
  await Promise.all([gw?.stop(), simA?.stop(), simB?.stop()]);
  await scripted?.close();
});

beforeEach(async () => {
  await Promise.all([simA.configure(BASE), simB.configure(BASE)]);
  await Promise.all([simA.reset(), simB.reset()]);
});

const url = () => `${gw.url}/v1/chat/completions`;

describe('relay timing', () => {
  test('tokens are relayed as they are produced: the first arrives well before the last', async () => {
    await simA.configure({ ttft_ms: 100, inter_token_ms: 100 });
    const r = await sse(url(), { model: 'gpt', messages: USER, stream: true, max_tokens: 20 });
    assert.equal(r.status, 200, r.raw);
    const content = contentEvents(r.events);
    assert.equal(content.length, 20);
    assert.equal(assembled(r.events), simText(20));
    const spread = content.at(-1).t - content[0].t;
    // The upstream needs ~1.9 s between its first and last token; a buffering relay would
    // deliver them together.
    assert.ok(spread >= 1000, `first-to-last token spread ${spread.toFixed(0)} ms, expected >= 1000 ms`);
    // Arrival times never go backwards and the tokens came in many separate reads.
    const reads = new Set(content.map((e) => e.t));
    assert.ok(reads.size >= 10, `tokens arrived in ${reads.size} reads`);
    assert.ok(r.ended && r.done);
  });

  test('the Ollama stream is relayed incrementally too', async () => {
    await simB.configure({ ttft_ms: 100, inter_token_ms: 100 });
    const r = await sse(url(), { model: 'llama', messages: USER, stream: true, max_tokens: 20 });
    assert.equal(r.status, 200, r.raw);
    const content = contentEvents(r.events);
    assert.equal(content.length, 20);
    const spread = content.at(-1).t - content[0].t;
    assert.ok(spread >= 1000, `first-to-last token spread ${spread.toFixed(0)} ms, expected >= 1000 ms`);
  });
});

describe('heartbeat', () => {
  // The simulator sends its response head with the first token (as Ollama does), so the
  // whole TTFT is spent inside the gateway's wait for the upstream head, before the relay
  // (and its heartbeat) starts. See the next test for the same silence after an early head.
  test('": keep-alive" comments are sent while the upstream is silent, before the first token', async () => {
    await simA.configure({ ttft_ms: 1500 });
    const r = await sse(url(), { model: 'gpt', messages: USER, stream: true, max_tokens: 3 });
    assert.equal(r.status, 200, r.raw);
    const hb = r.raw.indexOf(': keep-alive');
    const firstData = r.raw.indexOf('data:');
    assert.ok(hb >= 0, `no heartbeat in:\n${r.raw}`);
    assert.ok(firstData > hb, 'the heartbeat precedes the first data event');
    const before = r.raw.slice(0, firstData).match(/^: keep-alive$/gm) ?? [];
    // ~1.5 s of silence with a 200 ms heartbeat: expect several; 2 is a generous floor.
    assert.ok(before.length >= 2, `${before.length} heartbeats before the first token`);
    // Heartbeats do not disturb the content.
    assert.equal(assembled(r.events), simText(3));
    assert.ok(r.done && r.ended);
    const comments = r.events.filter((e) => e.comment !== undefined);
    assert.ok(comments.every((c) => c.comment === 'keep-alive'));
    assert.ok(comments[0].t < contentEvents(r.events)[0].t, 'heartbeat arrived before the first token');
  });

  test('": keep-alive" comments are sent before the first token when the upstream sent its head early', async () => {
    const r = await sse(url(), { model: 'late-head', messages: USER, stream: true });
    assert.equal(r.status, 200, r.raw);
    const firstData = r.raw.indexOf('data:');
    const before = r.raw.slice(0, firstData).match(/^: keep-alive$/gm) ?? [];
    assert.ok(before.length >= 2, `${before.length} heartbeats before the first token:\n${r.raw}`);
    assert.equal(assembled(r.events), simText(1));
  });

  test('": keep-alive" comments are sent in long gaps between tokens', async () => {
    await simA.configure({ ttft_ms: 20, inter_token_ms: 1000 });
    const r = await sse(url(), { model: 'gpt', messages: USER, stream: true, max_tokens: 3 });
    assert.equal(r.status, 200, r.raw);
    const content = contentEvents(r.events);
    assert.equal(content.length, 3);
    const between = r.events.filter((e) => e.comment === 'keep-alive' && e.t > content[0].t && e.t < content.at(-1).t);
    // ~2 s of gaps with a 200 ms heartbeat: expect several; 2 is a generous floor.
    assert.ok(between.length >= 2, `${between.length} heartbeats between the tokens:\n${r.raw}`);
    assert.equal(assembled(r.events), simText(3));
  });
});

describe('mid-stream upstream failure', () => {
  // The error event the gateway writes when the upstream fails after the first token, and
  // the clean end after it.
  function assertErrorThenEnd(r, code, contentBefore) {
    assert.equal(r.status, 200, r.raw);
    assert.equal(assembled(r.events), contentBefore);
    const errIdx = r.events.findIndex((e) => e.json?.error);
    assert.ok(errIdx >= 0, `no error event in:\n${r.raw}`);
    const err = r.events[errIdx].json.error;
    assert.equal(err.code, code, `error event: ${JSON.stringify(err)}`);
    assert.equal(typeof err.message, 'string');
    const lastContent = r.events.indexOf(contentEvents(r.events).at(-1));
    assert.ok(errIdx > lastContent, 'the error comes after the content');
    assert.equal(r.events.at(-1).data, '[DONE]', 'the stream is closed with [DONE]');
    assert.ok(r.ended, 'the HTTP response ended normally (terminating chunk)');
    assert.equal(r.error, undefined);
  }

  // The simulator must close the connection after half of the tokens (docs/simulator.md,
  // Faults). If it only stops sending, the gateway ends the stream after timeouts.idle (3 s)
  // with upstream_idle_timeout instead.
  test('simulator abort fault (abort_rate 1) -> an error event, then a clean end', async () => {
    await simA.configure({ abort_rate: 1 });
    const t0 = performance.now();
    const r = await sse(url(), { model: 'gpt', messages: USER, stream: true, max_tokens: 10 }, { timeout: 10000 });
    const took = performance.now() - t0;
    // The simulator drops the connection after half of the tokens (5 of 10).
    assert.equal((await simA.stats()).aborted, 1);
    assertErrorThenEnd(r, 'upstream_stream_failed', simText(5));
    // A dropped connection is seen at once, not after the 3 s idle timeout.
    assert.ok(took < 2500, `the stream took ${took.toFixed(0)} ms to end after the upstream dropped`);
    const line = await gw.logFor(r.headers.get('x-request-id'));
    assert.equal(line.status, 200);
    assert.equal(line.reason, 'upstream_stream_failed');
    assert.equal(line.stream, true);
    assert.equal(line.client_cancelled, false);
  });

  for (const alias of ['drop-gpt', 'drop-llama']) {
    test(`${alias}: the upstream connection is destroyed mid-stream -> an error event, then a clean end`, async () => {
      const r = await sse(url(), { model: alias, messages: USER, stream: true }, { timeout: 10000 });
      assertErrorThenEnd(r, 'upstream_stream_failed', simText(3));
      const line = await gw.logFor(r.headers.get('x-request-id'));
      assert.equal(line.status, 200);
      assert.equal(line.reason, 'upstream_stream_failed');
      assert.equal(line.completion_tokens, 3);
    });
  }

  test('the upstream goes silent mid-stream -> upstream_idle_timeout error event after timeouts.idle', async () => {
    const t0 = performance.now();
    const r = await sse(url(), { model: 'stall-gpt', messages: USER, stream: true }, { timeout: 15000 });
    const took = performance.now() - t0;
    assertErrorThenEnd(r, 'upstream_idle_timeout', simText(3));
    assert.ok(took >= 2500, `ended after ${took.toFixed(0)} ms, before the 3 s idle timeout`);
    const line = await gw.logFor(r.headers.get('x-request-id'));
    assert.equal(line.reason, 'upstream_idle_timeout');
  });

  test('the gateway keeps serving after a failed stream', async () => {
    const r = await chat(gw, { model: 'gpt', messages: USER, max_tokens: 2 });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.choices[0].message.content, simText(2));
  });
});

describe('client disconnect', () => {
  test('aborting a stream cancels the upstream request and is logged as 499', async () => {
    // 200 tokens at 100 ms: ~20 s if nothing cancelled it.
    await simA.configure({ ttft_ms: 20, inter_token_ms: 100 });
    const t0 = Date.now();
    const r = await sse(
      url(),
      { model: 'gpt', messages: USER, stream: true, max_tokens: 200 },
      { stopAfter: (events) => contentEvents(events).length >= 2 },
    );
    assert.equal(r.status, 200);
    assert.ok(r.aborted, 'the client aborted');
    assert.ok(contentEvents(r.events).length >= 2);
    const rid = r.headers.get('x-request-id');
    assert.match(rid, /^[0-9a-f]{32}$/);

    const st = await waitFor(
      async () => {
        const s = await simA.stats();
        return s.cancelled >= 1 && s.in_flight === 0 ? s : null;
      },
      { timeout: 8000, what: 'the simulator to see the request cancelled' },
    );
    assert.equal(st.cancelled, 1);
    assert.equal(st.completed, 0);
    assert.ok(Date.now() - t0 < 15000, 'cancelled long before the stream would have ended');

    const line = await gw.logFor(rid);
    assert.equal(line.client_cancelled, true);
    assert.equal(line.status, 499);
    assert.equal(line.reason, 'client_closed');
    assert.equal(line.stream, true);
    assert.equal(line.alias, 'gpt');
    assert.ok(typeof line.ttft_ms === 'number' && line.ttft_ms > 0, `ttft_ms ${line.ttft_ms}`);
    assert.ok(line.wall_ms < 15000);
  });

  test('aborting a non-streamed request while the upstream works cancels it too', async () => {
    await simA.configure({ ttft_ms: 10000 });
    const ac = new AbortController();
    const p = fetch(url(), {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', 'x-request-id': 'abort-nonstream-1' },
      body: JSON.stringify({ model: 'gpt', messages: USER, max_tokens: 2 }),
      signal: ac.signal,
    });
    // Wait until the simulator holds the request, then leave.
    await waitFor(async () => (await simA.stats()).in_flight === 1, { timeout: 5000, what: 'the request upstream' });
    ac.abort();
    await assert.rejects(p);
    await waitFor(
      async () => {
        const s = await simA.stats();
        return s.cancelled === 1 && s.in_flight === 0;
      },
      { timeout: 5000, what: 'the simulator to see the request cancelled' },
    );
    const line = await gw.logFor('abort-nonstream-1');
    assert.equal(line.status, 499);
    assert.equal(line.client_cancelled, true);
    assert.equal(line.reason, 'client_closed');
    assert.equal(line.stream, false);
  });

  test('the gateway keeps serving after client disconnects', async () => {
    await delay(50);
    const r = await request(`${gw.url}/health`);
    assert.equal(r.status, 200);
    const c = await chat(gw, { model: 'gpt', messages: USER, max_tokens: 1 });
    assert.equal(c.status, 200, c.text);
  });
});
