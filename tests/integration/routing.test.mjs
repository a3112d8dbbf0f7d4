// Routing and resilience against several simulator processes with their fault injection:
// balancing, passive ejection and breakers, probes that catch a hung backend, the latency
// breaker moving traffic to a fallback model, retries only before the first byte, canned
// replies, canary split with automatic rollback, and configuration reload.
import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';

import {
  KEY,
  USER,
  assembled,
  chat,
  closedPort,
  delay,
  keysAll,
  metricValue,
  request,
  sse,
  startGateway,
  startRecorder,
  startSim,
  stopProcess,
  waitFor,
} from './lib.mjs';

const started = [];
const closers = [];
async function sim(flags = {}) {
  const s = await startSim({ ttft: '5ms', 'inter-token': '2ms', ...flags });
  started.push(s);
  return s;
}
async function gateway(config) {
  const gw = await startGateway({ keys: keysAll(), ...config });
  started.push(gw);
  return gw;
}
after(async () => {
  await Promise.all([...started.map((p) => stopProcess(p)), ...closers.map((c) => c())]);
});

const backend = (s, extra = {}) => ({ provider: 'openai', base_url: `${s.url}/v1`, ...extra });
const infra = async (gw) => (await request(`${gw.adminUrl}/infra`)).json.routing;
async function many(n, fn) {
  const out = [];
  for (let i = 0; i < n; i++) out.push(await fn(i));
  return out;
}

describe('balancing', () => {
  test('weights 3:1:1 hold exactly over whole cycles (smooth weighted round robin)', async () => {
    const [a, b, c] = await Promise.all([sim(), sim(), sim()]);
    const gw = await gateway({
      models: [
        {
          alias: 'w',
          balance: 'weighted',
          backends: [backend(a, { weight: 3 }), backend(b, { weight: 1 }), backend(c, { weight: 1 })],
        },
      ],
    });
    const rs = await many(100, () => chat(gw, { model: 'w', messages: USER, max_tokens: 1 }));
    for (const r of rs) assert.equal(r.status, 200, r.text);
    const counts = await Promise.all([a, b, c].map(async (s) => (await s.stats()).requests));
    assert.deepEqual(counts, [60, 20, 20]);
  });

  test('least connections spreads long streams evenly', async () => {
    const [a, b] = await Promise.all([sim({ ttft: '50ms', 'inter-token': '50ms' }), sim({ ttft: '50ms', 'inter-token': '50ms' })]);
    const gw = await gateway({ models: [{ alias: 'lc', backends: [backend(a), backend(b)] }] });
    // Ten streams of 20 tokens (about a second each) opened one after the other: each goes
    // to the backend with fewer open.
    const streams = [];
    for (let i = 0; i < 10; i++) {
      streams.push(sse(`${gw.url}/v1/chat/completions`, { model: 'lc', messages: USER, max_tokens: 20, stream: true }));
      await delay(20);
    }
    const done = await Promise.all(streams);
    for (const s of done) assert.equal(s.status, 200);
    const [sa, sb] = await Promise.all([a.stats(), b.stats()]);
    assert.equal(sa.requests + sb.requests, 10);
    assert.ok(Math.abs(sa.requests - sb.requests) <= 2, `uneven: ${sa.requests} vs ${sb.requests}`);
    await waitFor(() => gw.logLines().filter((l) => l.alias === 'lc').length === 10, { what: 'ten log lines' });
  });
});

describe('failures before the first byte', () => {
  test('a failing backend is retried elsewhere (the client sees 200), then ejected; it returns after recovery', async () => {
    const [bad, good] = await Promise.all([sim({ 'error-rate-500': 1 }), sim()]);
    const hook = await startRecorder();
    closers.push(hook.close);
    const gw = await gateway({
      routing: {
        health: { eject_after: 3, eject_for: '1500ms' },
        breaker: { enabled: false },
        webhook: `${hook.url}/notices`,
      },
      models: [{ alias: 'r', balance: 'round_robin', backends: [backend(bad), backend(good)] }],
    });
    const rs = await many(12, (i) =>
      chat(gw, { model: 'r', messages: USER, max_tokens: 2, stream: i % 2 === 1 }),
    );
    for (const r of rs) assert.equal(r.status, 200, r.text);
    const s = await bad.stats();
    assert.equal(s.errors_500, 3, 'three failures, then the backend is ejected');
    await waitFor(() => gw.logLines().filter((l) => l.alias === 'r').length === 12, { what: 'twelve log lines' });
    const retried = gw.logLines().filter((l) => l.alias === 'r' && l.attempts === 2);
    assert.equal(retried.length, 3);
    for (const l of retried) assert.equal(l.backend, `127.0.0.1:${good.port}`);
    const st = await infra(gw);
    const b = st.backends.find((x) => x.name === `127.0.0.1:${bad.port}`);
    assert.equal(b.state, 'ejected');
    assert.equal(b.health.ejections, 1);
    assert.equal(await gw.metric('sluice_backend_ejections_total', { backend: `127.0.0.1:${bad.port}` }), 1);
    assert.equal(await gw.metric('sluice_route_retries_total', { model: 'r' }), 3);
    // The route degraded: a notice reached the webhook.
    await waitFor(() => hook.requests.find((q) => q.json?.event === 'route.degraded' && q.json.route === 'r'), {
      what: 'the route.degraded notice',
    });
    // Recovery: once the ejection ends, it gets traffic again.
    await bad.configure({ error_rate_500: 0 });
    await waitFor(async () => (await infra(gw)).backends.find((x) => x.name === b.name).state === 'up', {
      what: 'the ejection to end',
    });
    await bad.reset();
    await many(6, () => chat(gw, { model: 'r', messages: USER, max_tokens: 1 }));
    assert.ok((await bad.stats()).completed >= 2, 'the recovered backend serves again');
    await waitFor(() => hook.requests.find((q) => q.json?.event === 'route.recovered' && q.json.route === 'r'), {
      what: 'the route.recovered notice',
    });
  });

  test('passive ejection never leaves a route with nothing to try', async () => {
    const solo = await sim({ 'error-rate-500': 1 });
    const gw = await gateway({
      routing: { health: { eject_after: 2, eject_for: '60s' }, breaker: { enabled: false } },
      models: [{ alias: 'solo', backends: [backend(solo)] }],
    });
    for (const r of await many(2, () => chat(gw, { model: 'solo', messages: USER, max_tokens: 1 }))) {
      assert.equal(r.status, 502, r.text);  // its only backend: the upstream's own error
      assert.equal(r.json.error.code, 'upstream_error');
    }
    const name = `127.0.0.1:${solo.port}`;
    // (An outcome is recorded once its reply has left: the state may lag the answer.)
    const state = async () => (await infra(gw)).backends.find((x) => x.name === name).state;
    await waitFor(async () => (await state()) === 'ejected', { timeout: 5000, what: 'the backend to be ejected' });
    // Ejected, but the only one: still tried, and its first success ends the ejection.
    await solo.configure({ error_rate_500: 0 });
    const r = await chat(gw, { model: 'solo', messages: USER, max_tokens: 1 });
    assert.equal(r.status, 200, r.text);
    await waitFor(async () => (await state()) === 'up', { timeout: 5000, what: 'the ejection to end' });
  });

  test('the error-rate breaker opens on a backend and says why', async () => {
    const [bad, good] = await Promise.all([sim({ 'error-rate-503': 1 }), sim()]);
    const gw = await gateway({
      routing: { health: { eject_after: 0 } },
      models: [
        {
          alias: 'b',
          balance: 'round_robin',
          breaker: { min_requests: 4, error_rate: 0.5, open_for: '60s' },
          backends: [backend(bad), backend(good)],
        },
      ],
    });
    const rs = await many(12, () => chat(gw, { model: 'b', messages: USER, max_tokens: 1 }));
    for (const r of rs) assert.equal(r.status, 200, r.text);
    // 4 failures open it; the good backend's successes count in its own breaker only.
    assert.equal((await bad.stats()).errors_503, 4);
    const name = `127.0.0.1:${bad.port}`;
    const b = (await infra(gw)).backends.find((x) => x.name === name);
    assert.equal(b.breaker.state, 'open');
    assert.match(b.breaker.last_reason, /error rate 1\.00 over 4 requests/);
    const m = await gw.metrics();
    assert.equal(metricValue(m, 'sluice_breaker_state', { scope: 'backend', name }), 1);
    assert.equal(metricValue(m, 'sluice_breaker_transitions_total', { scope: 'backend', name, to: 'open' }), 1);
  });

  test('the provider breaker takes every model of a failing provider endpoint out at once', async () => {
    const [provider, other] = await Promise.all([sim({ 'error-rate-503': 1 }), sim()]);
    const gw = await gateway({
      routing: {
        health: { eject_after: 0 },
        breaker: { enabled: false },
        provider_breaker: { min_requests: 4, error_rate: 0.5, open_for: '60s' },
      },
      models: [
        // Two models on one endpoint (one provider account), each falling back elsewhere.
        { alias: 'p1', backends: [backend(provider, { model: 'm1' })], fallbacks: ['spare'] },
        { alias: 'p2', backends: [backend(provider, { model: 'm2' })], fallbacks: ['spare'] },
        { alias: 'spare', backends: [backend(other)] },
      ],
    });
    // Failures of both models count for the endpoint: two each open its breaker.
    for (const m of ['p1', 'p2', 'p1', 'p2']) {
      assert.equal((await chat(gw, { model: m, messages: USER, max_tokens: 1 })).status, 200);
    }
    assert.equal((await provider.stats()).errors_503, 4);
    const key = `openai://127.0.0.1:${provider.port}`;
    assert.equal(await gw.metric('sluice_breaker_state', { scope: 'provider', name: key }), 1);
    // Now neither model's backend is tried: both go straight to the spare.
    for (const m of ['p1', 'p2']) {
      const r = await chat(gw, { model: m, messages: USER, max_tokens: 1 });
      assert.equal(r.status, 200);
      assert.equal((await gw.logFor(r.headers.get('x-request-id'))).served_by, 'spare');
    }
    assert.equal((await provider.stats()).requests, 4);
    const b = (await infra(gw)).backends.find((x) => x.name === `127.0.0.1:${provider.port}/m2`);
    assert.equal(b.state, 'provider_breaker_open');
    assert.match(b.provider_breaker.last_reason, /error rate 1\.00 over 4 requests/);
  });

  test('a failure after the first byte is never retried: no second generation starts', async () => {
    const [aborting, good] = await Promise.all([sim({ 'abort-rate': 1 }), sim()]);
    const gw = await gateway({
      routing: { health: { eject_after: 0 }, breaker: { enabled: false } },
      models: [{ alias: 'a', balance: 'round_robin', backends: [backend(aborting), backend(good)] }],
    });
    let cut = 0;
    let whole = 0;
    for (let i = 0; i < 6; i++) {
      const s = await sse(`${gw.url}/v1/chat/completions`, { model: 'a', messages: USER, max_tokens: 8, stream: true });
      assert.equal(s.status, 200);
      if (s.events.some((e) => e.json?.error)) cut++;
      else if (s.done) whole++;
    }
    const [sa, sg] = await Promise.all([aborting.stats(), good.stats()]);
    assert.equal(cut, 3);
    assert.equal(whole, 3);
    // Exactly one generation per request: the cut ones were not started again elsewhere.
    assert.equal(sa.requests, 3);
    assert.equal(sa.aborted, 3);
    assert.equal(sg.requests, 3);
  });

  test('every option exhausted: 503 naming what was tried, or the canned reply in every dialect', async () => {
    const [p1, p2] = await Promise.all([closedPort(), closedPort()]);
    const dead = (p) => ({ provider: 'openai', base_url: `http://127.0.0.1:${p}/v1` });
    const gw = await gateway({
      routing: { health: { eject_after: 0 }, breaker: { enabled: false } },
      models: [
        { alias: 'gone', backends: [dead(p1), dead(p2)] },
        { alias: 'soft', backends: [dead(p1), dead(p2)], canned_reply: 'We are busy, try again in a minute.' },
      ],
    });
    const r = await chat(gw, { model: 'gone', messages: USER });
    assert.equal(r.status, 503, r.text);
    assert.equal(r.json.error.code, 'no_backend_available');
    assert.match(r.json.error.message, new RegExp(`127\\.0\\.0\\.1:${p1}`));
    assert.match(r.json.error.message, new RegExp(`127\\.0\\.0\\.1:${p2}`));
    assert.equal(r.headers.get('retry-after'), '1');

    const c = await chat(gw, { model: 'soft', messages: USER });
    assert.equal(c.status, 200, c.text);
    assert.equal(c.json.choices[0].message.content, 'We are busy, try again in a minute.');
    const line = await gw.logFor(c.headers.get('x-request-id'));
    assert.equal(line.reason, 'canned_reply');
    assert.equal(line.attempts, 2);
    const s = await sse(`${gw.url}/v1/chat/completions`, { model: 'soft', messages: USER, stream: true });
    assert.equal(s.status, 200);
    assert.ok(s.done);
    assert.equal(assembled(s.events), 'We are busy, try again in a minute.');
    const a = await request(`${gw.url}/v1/messages`, {
      method: 'POST',
      headers: { 'x-api-key': KEY, 'anthropic-version': '2023-06-01' },
      body: { model: 'soft', max_tokens: 10, messages: USER },
    });
    assert.equal(a.status, 200, a.text);
    assert.equal(a.json.type, 'message');
    assert.equal(a.json.content[0].text, 'We are busy, try again in a minute.');
    assert.equal(await gw.metric('sluice_route_canned_replies_total', { model: 'soft' }), 3);
  });
});

describe('health probes', () => {
  test('a backend whose port is open but whose inference hangs is caught by the probe, and comes back', async () => {
    const [hung, good] = await Promise.all([sim({ 'hang-rate': 1 }), sim()]);
    const gw = await gateway({
      routing: { health: { interval: '200ms', timeout: '300ms', unhealthy_after: 2, healthy_after: 1 } },
      models: [{ alias: 'h', balance: 'round_robin', backends: [backend(hung), backend(good)] }],
    });
    const name = `127.0.0.1:${hung.port}`;
    await waitFor(async () => (await infra(gw)).backends.find((x) => x.name === name).state === 'unhealthy', {
      timeout: 10000,
      what: 'the hung backend to be marked unhealthy',
    });
    const b = (await infra(gw)).backends.find((x) => x.name === name);
    assert.ok(b.health.probes_failed >= 2);
    assert.match(b.health.last_probe_error, /.+/);
    const rs = await many(6, () => chat(gw, { model: 'h', messages: USER, max_tokens: 1 }));
    for (const r of rs) assert.equal(r.status, 200, r.text);
    const lines = await waitFor(() => {
      const ls = gw.logLines().filter((l) => l.alias === 'h');
      return ls.length === 6 && ls;
    }, { what: 'six log lines' });
    for (const l of lines) assert.equal(l.backend, `127.0.0.1:${good.port}`);
    assert.equal(await gw.metric('sluice_backend_healthy', { backend: name }), 0);
    // Inference works again: one good probe brings it back.
    await hung.configure({ hang_rate: 0 });
    await waitFor(async () => (await infra(gw)).backends.find((x) => x.name === name).state === 'up', {
      timeout: 10000,
      what: 'the backend to be healthy again',
    });
    assert.ok((await gw.metric('sluice_backend_probes_total', { backend: name, result: 'ok' })) >= 1);
  });
});

describe('latency breaker and fallback model', () => {
  test('a backend that turns slow trips the breaker; traffic moves to the lighter model and returns', async () => {
    const [big, light] = await Promise.all([sim(), sim()]);
    const gw = await gateway({
      routing: { health: { eject_after: 0 } },
      models: [
        {
          alias: 'big',
          backends: [backend(big)],
          fallbacks: ['light'],
          breaker: { min_requests: 5, p95_ttft: '300ms', open_for: '1s', half_open_probes: 2, window: '30s' },
        },
        { alias: 'light', backends: [backend(light)] },
      ],
    });
    const ask = () => chat(gw, { model: 'big', messages: USER, max_tokens: 1 });
    for (const r of await many(3, ask)) assert.equal(r.status, 200);
    assert.equal((await big.stats()).requests, 3);
    await big.configure({ ttft_ms: 700 });
    // Slow answers still succeed; once the window's P95 is above 300 ms the breaker opens.
    for (const r of await many(5, ask)) assert.equal(r.status, 200);
    const name = `127.0.0.1:${big.port}`;
    assert.equal((await infra(gw)).backends.find((x) => x.name === name).breaker.state, 'open');
    const before = (await light.stats()).requests;
    const moved = await many(4, ask);
    for (const r of moved) assert.equal(r.status, 200);
    assert.equal((await light.stats()).requests - before, 4);
    const line = await gw.logFor(moved[3].headers.get('x-request-id'));
    assert.equal(line.served_by, 'light');
    assert.equal(line.alias, 'big');
    // Fast again: after open_for the half-open probes succeed and it closes.
    await big.configure({ ttft_ms: 5 });
    await delay(1100);
    await waitFor(
      async () => {
        await ask();
        return (await infra(gw)).backends.find((x) => x.name === name).breaker.state === 'closed';
      },
      { timeout: 10000, what: 'the breaker to close again' },
    );
    const bigBefore = (await big.stats()).requests;
    await many(3, ask);
    assert.equal((await big.stats()).requests - bigBefore, 3, 'traffic is back on the big model');
    const m = await gw.metrics();
    assert.equal(metricValue(m, 'sluice_breaker_transitions_total', { scope: 'backend', name, to: 'closed' }), 1);
    assert.ok(metricValue(m, 'sluice_route_fallbacks_total', { model: 'big' }) >= 4);
  });
});

describe('canary', () => {
  test('weights, header override, versioned aliases, and automatic rollback', async () => {
    const [stable, canary] = await Promise.all([sim(), sim()]);
    const gw = await gateway({
      routing: { health: { eject_after: 0 }, breaker: { enabled: false } },
      models: [
        {
          alias: 'chat',
          backends: [backend(stable)],
          canary: { alias: 'chat-v2', weight: 25, min_requests: 10, max_error_rate_increase: 0.1, max_ttft_ratio: 0 },
        },
        { alias: 'chat-v1', backends: [backend(stable)] },
        { alias: 'chat-v2', backends: [backend(canary)] },
      ],
    });
    const ask = (headers = {}) => chat(gw, { model: 'chat', messages: USER, max_tokens: 1 }, { headers });
    const rs = await many(200, () => ask());
    for (const r of rs) assert.equal(r.status, 200);
    const c = (await canary.stats()).requests;
    const s = (await stable.stats()).requests;
    assert.equal(c + s, 200);
    // 25 % of 200 is 50; binomial standard deviation about 6: a wide band still tells 25 % from 0 or 50 %.
    assert.ok(c >= 25 && c <= 75, `canary got ${c} of 200`);

    const forced = await ask({ 'x-canary': 'true' });
    assert.equal((await gw.logFor(forced.headers.get('x-request-id'))).served_by, 'chat-v2');
    const kept = await ask({ 'x-canary': 'false' });
    assert.equal((await gw.logFor(kept.headers.get('x-request-id'))).served_by, undefined);
    const direct = await chat(gw, { model: 'chat-v1', messages: USER, max_tokens: 1 });
    assert.equal(direct.status, 200);

    // The canary breaks: its failures are retried on stable (clients see 200), and after
    // min_requests the judge rolls back: everything goes to stable.
    // (About 50 good canary answers are in its window: 20 failures make its error rate
    // 0.29 or more against stable's 0.)
    await canary.configure({ error_rate_500: 1 });
    for (const r of await many(20, () => ask({ 'x-canary': 'true' }))) assert.equal(r.status, 200);
    const st = (await infra(gw)).routes.find((r) => r.model === 'chat');
    assert.equal(st.canary.active, false);
    assert.match(st.canary.rollback_reason, /canary error rate/);
    const m = await gw.metrics();
    assert.equal(metricValue(m, 'sluice_canary_rollbacks_total', { model: 'chat' }), 1);
    assert.equal(metricValue(m, 'sluice_canary_active', { model: 'chat' }), 0);
    const after = (await canary.stats()).requests;
    for (const r of await many(5, () => ask({ 'x-canary': 'true' }))) assert.equal(r.status, 200);
    assert.equal((await canary.stats()).requests, after, 'no traffic reaches a rolled-back canary');
  });
});

describe('sticky canary', () => {
  test('sticky by key: each key stays on one side; by user: each user does', async () => {
    const [stable, canary] = await Promise.all([sim(), sim()]);
    const KEYS = ['k-a', 'k-b', 'k-c', 'k-d'].map((name, i) => ({ name, key: `sk-sticky-${i}-0000000000000000`, tenant: 't' }));
    const gw = await gateway({
      keys: keysAll(KEYS),
      routing: { health: { eject_after: 0 }, breaker: { enabled: false } },
      models: [
        { alias: 'byk', backends: [backend(stable)], canary: { alias: 'byk-v2', weight: 50, sticky: 'key' } },
        { alias: 'byu', backends: [backend(stable)], canary: { alias: 'byu-v2', weight: 50, sticky: 'user' } },
        { alias: 'byk-v2', backends: [backend(canary)] },
        { alias: 'byu-v2', backends: [backend(canary)] },
      ],
    });
    // Per-request draws at 50 % would put 8 requests on one side with probability 2^-7.
    const sides = async (model, who) => {
      const seen = new Set();
      for (let i = 0; i < 8; i++) {
        const body = { model, messages: USER, max_tokens: 1, ...(who.user ? { user: who.user } : {}) };
        const r = await chat(gw, body, { key: who.key ?? KEY });
        assert.equal(r.status, 200, r.text);
        seen.add((await gw.logFor(r.headers.get('x-request-id'))).served_by ?? 'stable');
      }
      return [...seen];
    };
    for (const k of KEYS) assert.equal((await sides('byk', { key: k.key })).length, 1, `key ${k.name} moved between sides`);
    for (const user of ['u1', 'u2', 'u3', 'u4']) {
      assert.equal((await sides('byu', { user })).length, 1, `user ${user} moved between sides`);
    }
  });
});

describe('configuration reload', () => {
  test('SIGHUP swaps the routes without dropping a request; a broken file is refused', async () => {
    const [a, b] = await Promise.all([sim({ 'inter-token': '20ms' }), sim()]);
    const gw = await gateway({ models: [{ alias: 'm', backends: [backend(a)] }] });
    // A stream that runs across the reload, and steady traffic.
    const long = sse(`${gw.url}/v1/chat/completions`, { model: 'm', messages: USER, max_tokens: 50, stream: true });
    let stop = false;
    const statuses = [];
    const traffic = (async () => {
      while (!stop) statuses.push((await chat(gw, { model: 'm', messages: USER, max_tokens: 1 })).status);
    })();
    await delay(200);
    const cfg = fs.readFileSync(gw.configPath, 'utf8').replace(`${a.url}/v1`, `${b.url}/v1`);
    assert.notEqual(cfg, gw.yaml);
    fs.writeFileSync(gw.configPath, cfg);
    gw.child.kill('SIGHUP');
    await waitFor(async () => (await infra(gw)).table_version === 2, { what: 'routing table version 2' });
    const bBefore = (await b.stats()).requests;
    await delay(200);
    stop = true;
    await traffic;
    const s = await long;
    assert.equal(s.status, 200);
    assert.ok(s.done, 'the stream started before the reload finished on the old backend');
    assert.ok(statuses.length > 5);
    assert.deepEqual([...new Set(statuses)], [200]);
    assert.ok((await b.stats()).requests > bBefore, 'new requests go to the new backend');

    // A broken file: refused with its reason; the running table stays.
    fs.writeFileSync(gw.configPath, cfg.replace(/provider: "?openai"?/, 'provider: nonsense'));
    gw.child.kill('SIGHUP');
    await waitFor(async () => (await infra(gw)).reloads.failed === 1, { what: 'the failed reload to be counted' });
    const st = await infra(gw);
    assert.equal(st.table_version, 2);
    assert.match(st.reloads.last_error, /models\[0\]\.backends\[0\]\.provider: unknown provider 'nonsense'/);
    assert.equal((await chat(gw, { model: 'm', messages: USER, max_tokens: 1 })).status, 200);
    const m = await gw.metrics();
    assert.equal(metricValue(m, 'sluice_config_reloads_total', { result: 'ok' }), 1);
    assert.equal(metricValue(m, 'sluice_config_reloads_total', { result: 'failed' }), 1);
  });
});
