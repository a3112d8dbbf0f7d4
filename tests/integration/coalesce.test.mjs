// In-flight coalescing (models[].cache.coalesce, docs/cache.md "Coalescing"): identical
// requests arriving while the first is generated share its one upstream generation. Each
// gets the whole answer under its own id, streamed from the start then as it comes, or
// whole; the leader's client leaving does not end the generation while another reads; the
// last one leaving does; each is charged what it got; the records say who was coalesced.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { assembled, delay, KEY, request, sse, startGateway, startSim, waitFor } from './lib.mjs';

let sim, gw;
let counter = 0;
const prompt = () => `Coalesce me, number ${++counter} at ${Date.now()}.`;

before(async () => {
  // About 40 ms a token: a 30-token answer takes over a second, time for others to join.
  sim = await startSim({ ttft: '100ms', 'inter-token': '40ms' });
  gw = await startGateway({
    keys: [{ name: 'app', key: KEY, tenant: 'acme', models: ['*'] }],
    models: [
      { alias: 'co', provider: 'openai', base_url: `${sim.url}/v1`, cache: { enabled: false, coalesce: true } },
      { alias: 'both', provider: 'openai', base_url: `${sim.url}/v1`, cache: { coalesce: true } },
    ],
  });
});
after(async () => {
  await Promise.all([gw?.stop(), sim?.stop()]);
});

const stats = () => sim.stats();
const body = (text, extra = {}) => ({ model: 'co', temperature: 0, max_tokens: 30, messages: [{ role: 'user', content: text }], ...extra });
const stream = (b, opts) => sse(`${gw.url}/v1/chat/completions`, { ...b, stream: true }, opts);
const whole = (b) => request(`${gw.url}/v1/chat/completions`, { method: 'POST', key: KEY, body: b });

describe('in-flight coalescing', () => {
  test('identical streamed requests share one generation; each gets all of it under its own id', async () => {
    const b = body(prompt());
    const before = (await stats()).requests;
    const leader = stream(b);
    await delay(300); // the leader is generating
    const followers = await Promise.all([stream(b), stream(b), stream(b)]);
    const lead = await leader;
    assert.equal((await stats()).requests, before + 1, 'one upstream generation');
    const text = assembled(lead.events);
    assert.ok(text.split(' ').length >= 20, text);
    assert.equal(lead.headers.get('x-sluice-cache'), 'miss');
    const ids = new Set([lead.events[0].json.id]);
    for (const f of followers) {
      assert.equal(f.status, 200);
      assert.equal(f.headers.get('x-sluice-cache'), 'coalesced');
      assert.equal(assembled(f.events), text, 'the whole answer, from the start');
      assert.equal(f.events.at(-1).data, '[DONE]');
      const rid = f.headers.get('x-request-id');
      assert.ok(f.events.filter((e) => e.json).every((e) => e.json.id === `chatcmpl-${rid}`), 'its own id on every chunk');
      ids.add(f.events[0].json.id);
      const line = await gw.logFor(rid);
      assert.equal(line.cache, 'coalesced');
      assert.equal(line.status, 200);
      assert.ok(line.completion_tokens >= 20, 'charged what it got');
      assert.ok(line.saved_tokens > line.completion_tokens);
    }
    assert.equal(ids.size, 4);
    const infra = await gw.infra();
    assert.ok(infra.cache.coalesced >= 3);
    assert.equal(infra.cache.in_flight, 0, 'the flight landed');
  });

  test('a whole request joins a streamed generation, and a streamed one a whole generation', async () => {
    let b = body(prompt());
    let before = (await stats()).requests;
    const leader = stream(b);
    await delay(300);
    const w = await whole(b);
    const lead = await leader;
    assert.equal(w.status, 200, w.text);
    assert.equal(w.headers.get('x-sluice-cache'), 'coalesced');
    assert.equal(w.json.choices[0].message.content, assembled(lead.events));
    assert.equal(w.json.id, `chatcmpl-${w.headers.get('x-request-id')}`);
    assert.ok(w.json.usage.completion_tokens >= 20);
    assert.equal((await stats()).requests, before + 1);

    b = body(prompt());
    before = (await stats()).requests;
    const wl = whole(b);
    await delay(300);
    const s = await stream(b);
    const w2 = await wl;
    assert.equal(s.headers.get('x-sluice-cache'), 'coalesced');
    assert.equal(assembled(s.events), w2.json.choices[0].message.content);
    assert.equal((await stats()).requests, before + 1);
  });

  test('the leader leaving does not end the generation while another reads; the last one leaving does', async () => {
    let b = body(prompt());
    let s0 = await stats();
    const leader = stream(b, { stopAfter: (ev) => ev.length >= 8 });
    await delay(150);
    const follower = await stream(b);
    const lead = await leader;
    assert.ok(lead.aborted, 'the leader left early');
    assert.equal(follower.headers.get('x-sluice-cache'), 'coalesced');
    assert.ok(assembled(follower.events).split(' ').length >= 20, 'the follower got the whole answer');
    assert.equal(follower.events.at(-1).data, '[DONE]');
    const s1 = await stats();
    assert.equal(s1.requests, s0.requests + 1);
    assert.equal(s1.cancelled, s0.cancelled, 'the generation was not cancelled');
    const leadLine = await gw.logFor(lead.headers.get('x-request-id'));
    assert.equal(leadLine.client_cancelled, true);

    // Both leave: the upstream is cancelled.
    b = body(prompt(), { max_tokens: 200 });
    s0 = await stats();
    const l2 = stream(b, { stopAfter: (ev) => ev.length >= 6 });
    await delay(150);
    const f2 = await stream(b, { stopAfter: (ev) => ev.length >= 12 });
    await l2;
    assert.ok(f2.aborted);
    await waitFor(async () => (await stats()).cancelled === s0.cancelled + 1, { what: 'the upstream request cancelled' });
    const fLine = await gw.logFor(f2.headers.get('x-request-id'));
    assert.equal(fLine.cache, 'coalesced');
    assert.equal(fLine.client_cancelled, true);
    assert.ok(fLine.completion_tokens > 0 && fLine.completion_tokens < 200, 'charged what it read');
  });

  test('when the shared generation fails before anything came, each request generates its own', async () => {
    const b = body(prompt());
    await sim.configure({ error_rate_500: 1 });
    try {
      const s0 = await stats();
      const all = await Promise.all([whole(b), whole(b), whole(b)]);
      for (const r of all) assert.ok(r.status >= 500, r.text);
      assert.ok((await stats()).requests > s0.requests);
    } finally {
      await sim.configure({ error_rate_500: 0 });
    }
    const ok = await whole(b);
    assert.equal(ok.status, 200);
    assert.equal((await gw.infra()).cache.in_flight, 0);
  });

  test('with the cache on too, a generation shared in flight is then kept', async () => {
    const b = { ...body(prompt()), model: 'both' };
    const s0 = await stats();
    const [a, c] = await Promise.all([whole(b), (async () => (await delay(200), whole(b)))()]);
    assert.equal(a.headers.get('x-sluice-cache'), 'miss');
    assert.equal(c.headers.get('x-sluice-cache'), 'coalesced');
    await delay(50);
    const later = await whole(b);
    assert.equal(later.headers.get('x-sluice-cache'), 'hit');
    assert.equal(later.json.choices[0].message.content, a.json.choices[0].message.content);
    assert.equal((await stats()).requests, s0.requests + 1);
  });
});

// Review findings: a failed shared generation, followers that leave while nothing comes,
// a follower's usage when the leader did not ask for it.
describe('in-flight coalescing: failures and departures', () => {
  let sim2, gw2;
  before(async () => {
    sim2 = await startSim({ ttft: '100ms', 'inter-token': '40ms' });
    gw2 = await startGateway({
      keys: [{ name: 'app', key: KEY, tenant: 'acme', models: ['*'] }],
      timeouts: { first_token: '6s', heartbeat: '500ms' },
      models: [{ alias: 'co', provider: 'openai', base_url: `${sim2.url}/v1`, retries: 0, cache: { enabled: false, coalesce: true } }],
    });
  });
  after(async () => {
    await Promise.all([gw2?.stop(), sim2?.stop()]);
  });
  const b2 = (text, extra = {}) => ({ model: 'co', temperature: 0, max_tokens: 30, messages: [{ role: 'user', content: text }], ...extra });

  test('whole followers of a generation that fails mid-stream get an error, and the gateway stays up', async () => {
    await sim2.configure({ abort_rate: 1 });
    try {
      for (let i = 0; i < 8; i++) {
        const b = b2(prompt());
        const leader = sse(`${gw2.url}/v1/chat/completions`, { ...b, stream: true });
        await delay(250);
        const w = await request(`${gw2.url}/v1/chat/completions`, { method: 'POST', key: KEY, body: b });
        await leader;
        assert.ok(w.status >= 500 || w.status === 200, w.text);
      }
    } finally {
      await sim2.configure({ abort_rate: 0 });
    }
    const ok = await request(`${gw2.url}/v1/chat/completions`, { method: 'POST', key: KEY, body: b2(prompt()) });
    assert.equal(ok.status, 200, 'still serving');
  });

  test('when every client left while the upstream is silent, the generation is cancelled before its first token', async () => {
    await sim2.configure({ hang_rate: 1 });
    try {
      const b = b2(prompt());
      const s0 = await sim2.stats();
      const t0 = Date.now();
      const ac1 = new AbortController();
      const ac2 = new AbortController();
      const leader = request(`${gw2.url}/v1/chat/completions`, { method: 'POST', key: KEY, body: { ...b, stream: true }, signal: ac1.signal }).catch(() => null);
      await delay(200);
      const follower = request(`${gw2.url}/v1/chat/completions`, { method: 'POST', key: KEY, body: b, signal: ac2.signal }).catch(() => null);
      await delay(300);
      ac1.abort();
      await delay(300);
      ac2.abort();
      await Promise.all([leader, follower]);
      await waitFor(async () => (await sim2.stats()).cancelled > s0.cancelled, { timeout: 5000, what: 'the upstream cancelled' });
      assert.ok(Date.now() - t0 < 5000, 'well before timeouts.first_token (6 s)');
      // Everything is given back: the flight, the requests and streams gauges.
      await waitFor(
        async () => {
          const j = await gw2.infra();
          return j.cache.in_flight === 0 && j.requests.live === 0 && j.requests.streams === 0;
        },
        { what: 'the flight landed and the gauges back to 0' },
      );
    } finally {
      await sim2.configure({ hang_rate: 0 });
    }
  });

  test('a follower gets the usage it asked for even when the leader did not ask for it', async () => {
    const b = b2(prompt());
    const leader = sse(`${gw2.url}/v1/chat/completions`, { ...b, stream: true });
    await delay(250);
    const f = await sse(`${gw2.url}/v1/chat/completions`, { ...b, stream: true, stream_options: { include_usage: true } });
    const l = await leader;
    assert.equal(f.headers.get('x-sluice-cache'), 'coalesced');
    assert.ok(!l.events.some((e) => e.json?.usage), 'the leader did not ask');
    const usage = f.events.map((e) => e.json).find((j) => j?.usage)?.usage;
    assert.ok(usage && usage.prompt_tokens > 0 && usage.completion_tokens > 0, JSON.stringify(f.events.slice(-3)));
    assert.equal(f.events.at(-1).data, '[DONE]');
  });
});
