// Upstream failures as the client sees them: unreachable, 5xx, timeouts, 429 passthrough.
import { after, afterEach, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import {
  USER,
  assembled,
  chat,
  closedPort,
  contentEvents,
  delay,
  keysAll,
  sse,
  simText,
  startGateway,
  startSim,
  waitFor,
} from './lib.mjs';

const FIRST_TOKEN_MS = 500;
const TOTAL_MS = 1500;

let simA; // OpenAI wire
let simB; // Ollama wire
let gw;
let deadPort;

const BASE = {
  ttft_ms: 20,
  inter_token_ms: 10,
  jitter: 0,
  error_rate_429: 0,
  error_rate_500: 0,
  error_rate_503: 0,
  abort_rate: 0,
  hang_rate: 0,
};

before(async () => {
  [simA, simB, deadPort] = await Promise.all([startSim(), startSim(), closedPort()]);
  gw = await startGateway(gatewayConfig());
});

function gatewayConfig() {
  return {
    instance: 'it-errors',
    timeouts: { first_token: `${FIRST_TOKEN_MS}ms`, total: `${TOTAL_MS}ms`, connect: '2s' },
    keys: keysAll(),
    models: [
      { alias: 'gpt', provider: 'openai', base_url: `${simA.url}/v1` },
      { alias: 'llama', provider: 'ollama', base_url: simB.url },
      { alias: 'dead', provider: 'openai', base_url: `http://127.0.0.1:${deadPort}/v1` },
      { alias: 'dead-llama', provider: 'ollama', base_url: `http://127.0.0.1:${deadPort}` },
    ],
  };
}

after(async () => {
  await Promise.all([gw?.stop(), simA?.stop(), simB?.stop()]);
});

beforeEach(async () => {
  await Promise.all([simA.configure(BASE), simB.configure(BASE)]);
  await Promise.all([simA.reset(), simB.reset()]);
});

const url = () => `${gw.url}/v1/chat/completions`;

function assertGatewayError(r, status, code, type) {
  const body = r.json;
  assert.equal(r.status, status, `status; body: ${r.text ?? r.raw}`);
  assert.match(r.headers.get('content-type'), /^application\/json/);
  assert.ok(body?.error, `OpenAI error shape: ${r.text ?? r.raw}`);
  assert.equal(body.error.code, code);
  if (type) assert.equal(body.error.type, type);
  assert.equal(typeof body.error.message, 'string');
  assert.match(r.headers.get('x-request-id'), /^[0-9a-f]{32}$/);
  return body.error;
}

describe('upstream unreachable', () => {
  for (const alias of ['dead', 'dead-llama']) {
    test(`${alias}: non-streaming -> 502 upstream_unreachable`, async () => {
      const r = await chat(gw, { model: alias, messages: USER });
      assertGatewayError(r, 502, 'upstream_unreachable', 'upstream_error');
      const line = await gw.logFor(r.headers.get('x-request-id'));
      assert.equal(line.status, 502);
      assert.equal(line.reason, 'upstream_unreachable');
      // Two routes name different models on one address: the backends are told apart by model.
      assert.equal(line.backend, `127.0.0.1:${deadPort}/${alias}`);
    });
  }

  test('streaming -> a plain 502 JSON answer (nothing was streamed yet)', async () => {
    const r = await sse(url(), { model: 'dead', messages: USER, stream: true });
    assertGatewayError(r, 502, 'upstream_unreachable');
  });
});

describe('timeouts', () => {
  test('streaming: no first token within timeouts.first_token -> 504 first_token_timeout', async () => {
    await simA.configure({ ttft_ms: 5000 });
    const t0 = performance.now();
    const r = await sse(url(), { model: 'gpt', messages: USER, stream: true }, { timeout: 10000 });
    const took = performance.now() - t0;
    assertGatewayError(r, 504, 'first_token_timeout', 'timeout_error');
    assert.ok(took >= FIRST_TOKEN_MS - 50, `answered after ${took.toFixed(0)} ms, before the first-token timeout`);
    assert.ok(took < 4500, `answered after ${took.toFixed(0)} ms: the timeout did not fire`);
    // The upstream request is abandoned, not left running.
    await waitFor(
      async () => {
        const s = await simA.stats();
        return s.cancelled === 1 && s.in_flight === 0;
      },
      { timeout: 5000, what: 'the simulator to see the request cancelled' },
    );
    const line = await gw.logFor(r.headers.get('x-request-id'));
    assert.equal(line.status, 504);
    assert.equal(line.reason, 'first_token_timeout');
  });

  test('non-streaming is not bound by first_token: a slower first token still succeeds', async () => {
    await simA.configure({ ttft_ms: FIRST_TOKEN_MS + 250 });
    const r = await chat(gw, { model: 'gpt', messages: USER, max_tokens: 2 });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.choices[0].message.content, simText(2));
  });

  test('non-streaming: no answer within timeouts.total -> 504 upstream_timeout', async () => {
    await simA.configure({ ttft_ms: 5000 });
    const t0 = performance.now();
    const r = await chat(gw, { model: 'gpt', messages: USER });
    const took = performance.now() - t0;
    assertGatewayError(r, 504, 'upstream_timeout', 'timeout_error');
    assert.ok(took >= TOTAL_MS - 100, `answered after ${took.toFixed(0)} ms, before the total timeout`);
    assert.ok(took < 4500, `answered after ${took.toFixed(0)} ms: the timeout did not fire`);
    await waitFor(async () => (await simA.stats()).cancelled === 1, {
      timeout: 5000,
      what: 'the simulator to see the request cancelled',
    });
  });

  test('non-streaming: a hanging upstream -> 504 upstream_timeout', async () => {
    await simA.configure({ hang_rate: 1 });
    const r = await chat(gw, { model: 'gpt', messages: USER });
    assertGatewayError(r, 504, 'upstream_timeout');
    assert.equal((await simA.stats()).hung, 1);
  });

  test('streaming: the total deadline passing mid-stream -> upstream_timeout error event', async () => {
    // 20 tokens at 200 ms: ~4 s, past the 1.5 s total.
    await simA.configure({ inter_token_ms: 200 });
    const r = await sse(url(), { model: 'gpt', messages: USER, stream: true, max_tokens: 20 }, { timeout: 10000 });
    assert.equal(r.status, 200, r.raw);
    const n = contentEvents(r.events).length;
    assert.ok(n >= 1 && n < 20, `${n} tokens before the deadline`);
    assert.equal(assembled(r.events), simText(n));
    const err = r.events.find((e) => e.json?.error)?.json.error;
    assert.ok(err, `no error event in:\n${r.raw}`);
    assert.equal(err.code, 'upstream_timeout');
    assert.equal(r.events.at(-1).data, '[DONE]');
    assert.ok(r.ended);
  });
});

describe('upstream 429', () => {
  test('OpenAI upstream 429 passes through with its body and Retry-After', async () => {
    await simA.configure({ error_rate_429: 1 });
    const r = await chat(gw, { model: 'gpt', messages: USER });
    assert.equal(r.status, 429, r.text);
    assert.equal(r.headers.get('retry-after'), '1');
    // The provider's own error body, unchanged.
    assert.equal(r.json.error.type, 'rate_limit_error');
    assert.equal(r.json.error.code, 'rate_limit_exceeded');
    assert.equal(r.json.error.message, 'simulated rate limit');
    assert.match(r.headers.get('x-request-id'), /^[0-9a-f]{32}$/);
    assert.equal((await simA.stats()).errors_429, 1);
    const line = await gw.logFor(r.headers.get('x-request-id'));
    assert.equal(line.status, 429);
    assert.equal(line.upstream_status, 429);
    assert.equal(line.reason, 'upstream_error');
  });

  test('a streamed request gets the 429 too (before any byte was streamed)', async () => {
    await simA.configure({ error_rate_429: 1 });
    const r = await sse(url(), { model: 'gpt', messages: USER, stream: true });
    assert.equal(r.status, 429, r.raw);
    assert.equal(r.headers.get('retry-after'), '1');
    assert.equal(r.json.error.code, 'rate_limit_exceeded');
  });
});

// Non-2xx upstream answers that are not passed through are turned into a 502 by
// upstream_status_error(). Each test here gets its own gateway, so that a gateway crash is
// charged to the test that caused it rather than to whatever runs next.
describe('upstream error answers (fresh gateway per test)', () => {
  let main;
  beforeEach(async () => {
    main = gw;
    gw = await startGateway(gatewayConfig());
  });
  afterEach(async () => {
    const alive = gw.child.exitCode === null && gw.child.signalCode === null;
    const crashed = gw;
    await gw.stop();
    gw = main;
    assert.ok(alive, `the gateway died during this test (signal ${crashed.child.signalCode}, code ${crashed.child.exitCode})`);
  });

  test('upstream 500 -> 502 upstream_error', async () => {
    await simA.configure({ error_rate_500: 1 });
    const r = await chat(gw, { model: 'gpt', messages: USER });
    const e = assertGatewayError(r, 502, 'upstream_error', 'upstream_error');
    assert.match(e.message, /500/);
    assert.equal((await simA.stats()).errors_500, 1);
    const line = await gw.logFor(r.headers.get('x-request-id'));
    assert.equal(line.status, 502);
    assert.equal(line.upstream_status, 500);
    assert.equal(line.reason, 'upstream_error');
  });

  test('upstream 500 on a streamed request -> a plain 502', async () => {
    await simA.configure({ error_rate_500: 1 });
    const r = await sse(url(), { model: 'gpt', messages: USER, stream: true });
    assertGatewayError(r, 502, 'upstream_error');
  });

  test('upstream 503 -> 502 upstream_error (not passed through)', async () => {
    await simA.configure({ error_rate_503: 1 });
    const r = await chat(gw, { model: 'gpt', messages: USER });
    const e = assertGatewayError(r, 502, 'upstream_error');
    assert.match(e.message, /503/);
  });

  test('Ollama upstream 500 -> 502 upstream_error', async () => {
    await simB.configure({ error_rate_500: 1 });
    const r = await chat(gw, { model: 'llama', messages: USER });
    assertGatewayError(r, 502, 'upstream_error');
    assert.equal((await simB.stats()).errors_500, 1);
  });

  test('Ollama upstream 429 is not passed through: 502 upstream_error', async () => {
    await simB.configure({ error_rate_429: 1 });
    const r = await chat(gw, { model: 'llama', messages: USER });
    const e = assertGatewayError(r, 502, 'upstream_error');
    assert.match(e.message, /429/);
    assert.equal(r.headers.get('retry-after'), null);
  });

  // upstream_status_error() builds its message with a conditional expression inside the
  // co_await local_reply(...) arguments; under GCC 12 the temporary string is destroyed
  // twice (valgrind: invalid free). The heap corruption crashes the next request.
  test('the gateway keeps serving after upstream error answers (no crash)', async () => {
    const cases = [
      [simB, { error_rate_500: 1 }, 'llama'],
      [simA, { error_rate_500: 1 }, 'gpt'],
      [simA, { error_rate_503: 1 }, 'gpt'],
      [simB, { error_rate_429: 1 }, 'llama'],
    ];
    for (const [sim, fault, alias] of cases) {
      await sim.configure(fault);
      const bad = await chat(gw, { model: alias, messages: USER });
      assert.equal(bad.status, 502, `${alias} ${JSON.stringify(fault)}: ${bad.text}`);
      await sim.configure(BASE);
      for (const good of ['gpt', 'llama']) {
        let r;
        try {
          r = await chat(gw, { model: good, messages: USER, max_tokens: 1 }, { timeout: 5000 });
        } catch (e) {
          const exit = await Promise.race([gw.exited, delay(1000).then(() => ({ signal: 'none yet', code: null }))]);
          assert.fail(
            `after ${alias} ${JSON.stringify(fault)}, a request to ${good} failed: ${e.cause?.message ?? e.message}` +
              ` (gateway exit: signal ${exit.signal}, code ${exit.code})`,
          );
        }
        assert.equal(r.status, 200, `after ${alias} ${JSON.stringify(fault)}, ${good}: ${r.text}`);
      }
    }
  });
});
