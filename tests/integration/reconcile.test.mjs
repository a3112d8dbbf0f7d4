// GET /admin/usage/reconcile: per token limit, counter and period, the tokens the request
// history was charged next to what the limiter holds. With Redis: both sides agree after
// streamed and non-streamed requests of two keys; a change made to the Redis counter shows
// as its difference; the limiter's side is null (with the error) while Redis is down.
// With the memory backend the limiter's side is this instance's. The history in SQLite
// and in PostgreSQL. Who may read it, and bad parameters.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { rawRequest, request, sse, startGateway, startPostgres, startRecorder, startRedis, waitFor, writeOpenAiAnswer } from './lib.mjs';

const ADMIN = 'sk-admin-1111222233334444';
const APP = 'sk-app-5555666677778888';
const WEB = 'sk-web-9999000011112222';
const IDLE = 'sk-idle-3333444455556666';

// An upstream that charges what the prompt asks for: "p=<prompt> c=<completion>", as its
// usage, in a plain answer or in the stream's usage chunk.
function chargeAsAsked(req, res, json) {
  if (!req.url.endsWith('/chat/completions')) return false;
  const m = /p=(\d+) c=(\d+)/.exec(json?.messages?.[0]?.content ?? '');
  const usage = { prompt_tokens: Number(m[1]), completion_tokens: Number(m[2]) };
  usage.total_tokens = usage.prompt_tokens + usage.completion_tokens;
  writeOpenAiAnswer(res, json, { id: 'chatcmpl-r', content: 'hi', usage });
  return true;
}

function config(up, rateLimits, history = {}) {
  return {
    keys: [
      { name: 'ops', key: ADMIN, tenant: 'ops', tier: 'gold', models: ['*'], admin: true },
      { name: 'app', key: APP, tenant: 'acme', tier: 'gold', models: ['*'] },
      { name: 'web', key: WEB, tenant: 'acme', tier: 'free', models: ['gpt'] },
      { name: 'idle', key: IDLE, tenant: 'beta', tier: 'free', models: ['gpt'] },
    ],
    models: [{ alias: 'gpt', provider: 'openai', base_url: `${up.url}/v1`, model: 'gpt-4' }],
    history: { flush_interval: '100ms', ...history },
    rate_limits: {
      reserve_output_tokens: 50,
      // Periods of a day and a month: a test does not straddle their boundary (a minute's
      // would now and then).
      tokens: [
        { scope: 'key', limit: 100000, per: 'day' },
        { scope: 'tenant', limit: 1000000, per: 'month', lease: 0 },
        // Counted by the alias the client asked for (gpt), not the upstream's model (gpt-4).
        { scope: 'tenant_model', model: 'gpt', limit: 100000, per: 'day' },
      ],
      ...rateLimits,
    },
  };
}

// The traffic: app 3 plain + 2 streamed, web 2 plain + 1 streamed. Returns what each key
// was charged by the upstream.
async function traffic(gw) {
  const sent = { app: 0, web: 0 };
  const one = async (name, key, p, c, stream) => {
    const body = { model: 'gpt', messages: [{ role: 'user', content: `p=${p} c=${c}` }], max_tokens: 40 };
    if (stream) {
      const r = await sse(`${gw.url}/v1/chat/completions`, { ...body, stream: true }, { key });
      assert.equal(r.status, 200, r.raw);
      assert.ok(r.done, 'the stream ended with [DONE]');
    } else {
      const r = await request(`${gw.url}/v1/chat/completions`, { method: 'POST', key, body });
      assert.equal(r.status, 200, r.text);
    }
    sent[name] += p + c;
  };
  await Promise.all([
    one('app', APP, 11, 5, false),
    one('app', APP, 12, 7, false),
    one('app', APP, 13, 2, false),
    one('app', APP, 21, 9, true),
    one('app', APP, 8, 30, true),
    one('web', WEB, 17, 3, false),
    one('web', WEB, 5, 5, false),
    one('web', WEB, 6, 19, true),
  ]);
  return sent;
}

async function report(gw, query = '', { key = ADMIN, admin = false } = {}) {
  const r = admin
    ? await rawRequest({ port: gw.adminPort, path: `/admin/usage/reconcile${query}` })
    : await request(`${gw.url}/admin/usage/reconcile${query}`, { key });
  const text = r.text ?? r.body;
  let json;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: r.status, json, text };
}

const row = (rep, limit, field, value) => rep.rows.find((r) => r.limit === limit && r.counter[field] === value);

// Waits until the history has every request and the limiter has settled them all.
async function settled(gw, sent, query = '') {
  const want = sent.app + sent.web;
  return waitFor(
    async () => {
      const r = await report(gw, query);
      assert.equal(r.status, 200, r.text);
      const acme = row(r.json, 'tokens[1]', 'tenant', 'acme');
      return acme && acme.history.tokens === want && acme.history.requests === 8 && acme.limiter?.reserved === 0 ? r.json : null;
    },
    { timeout: 10000, what: `the history and the limiter to hold the ${want} tokens charged` },
  );
}

describe('reconcile: Redis and a SQLite history', () => {
  let up, redis, gw, sent;
  before(async () => {
    [up, redis] = await Promise.all([startRecorder(chargeAsAsked), startRedis()]);
    gw = await startGateway({ ...config(up, { backend: 'redis' }), redis: { url: redis.url, timeout: '250ms', retry_interval: '200ms' } });
    sent = await traffic(gw);
  });
  after(async () => {
    await gw?.stop();
    await Promise.all([up?.close(), redis?.stop()]);
  });

  test('the history and the Redis ledger agree, per key and per tenant', async () => {
    const rep = await settled(gw, sent);
    assert.equal(rep.limiter.backend, 'redis');
    assert.equal(rep.limiter.error, null);
    assert.equal(rep.period, 'current');
    assert.equal(rep.disagreements, 0, JSON.stringify(rep.rows));
    const app = row(rep, 'tokens[0]', 'key', 'app');
    const web = row(rep, 'tokens[0]', 'key', 'web');
    assert.deepEqual(app.history, { tokens: sent.app, requests: 5 });
    assert.deepEqual(web.history, { tokens: sent.web, requests: 3 });
    for (const r of [app, web]) {
      assert.equal(r.limiter.used, r.history.tokens, JSON.stringify(r));
      assert.equal(r.limiter.source, 'redis');
      assert.equal(r.limiter.present, true);
      assert.equal(r.difference, 0);
      assert.equal(r.scope, 'key');
      assert.equal(r.counter.tenant, 'acme');
    }
    // The ledger key is the quota hash admission counts in: its used is what the row says.
    assert.equal(Number(await redis.raw('HGET', app.ledger_key, 'used')), sent.app);
    // A configured key without traffic has its counter too, never written.
    const idle = row(rep, 'tokens[0]', 'key', 'idle');
    assert.deepEqual(idle.history, { tokens: 0, requests: 0 });
    assert.deepEqual(idle.limiter, { used: 0, reserved: 0, present: false, source: 'redis' });
    // The tenant's counter holds both keys; its period is the calendar month.
    const acme = row(rep, 'tokens[1]', 'tenant', 'acme');
    assert.equal(acme.limiter.used, sent.app + sent.web);
    assert.equal(acme.per, 'month');
    const acmeGpt = rep.rows.find((r) => r.limit === 'tokens[2]' && r.counter.tenant === 'acme');
    assert.deepEqual(acmeGpt.counter, { tenant: 'acme', model: 'gpt' });
    assert.deepEqual(acmeGpt.history, { tokens: sent.app + sent.web, requests: 8 });
    assert.equal(acmeGpt.limiter.used, sent.app + sent.web);
    const now = new Date();
    assert.equal(acme.period.start, new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1)).toISOString());
    assert.equal(app.period.end_ms - app.period.start_ms, 86400000);
    assert.ok(app.period.start_ms <= Date.now() && Date.now() < app.period.end_ms);
    assert.ok(rep.notes.length >= 4);
  });

  test('a counter changed in Redis shows as its difference', async () => {
    const before = await settled(gw, sent);
    const app = row(before, 'tokens[0]', 'key', 'app');
    await redis.raw('HINCRBY', app.ledger_key, 'used', 7);
    try {
      const rep = (await report(gw)).json;
      const changed = row(rep, 'tokens[0]', 'key', 'app');
      assert.equal(changed.difference, 7);
      assert.equal(changed.limiter.used, sent.app + 7);
      assert.equal(changed.history.tokens, sent.app);
      assert.equal(row(rep, 'tokens[0]', 'key', 'web').difference, 0);
      assert.equal(rep.disagreements, 1);
    } finally {
      await redis.raw('HINCRBY', app.ledger_key, 'used', -7);
    }
    assert.equal((await report(gw)).json.disagreements, 0);
  });

  test('filters: the counters of a key or a tenant, each counter whole', async () => {
    await settled(gw, sent);
    const web = (await report(gw, '?key=web')).json;
    assert.deepEqual(web.filters, { key: 'web', tenant: null });
    assert.deepEqual(
      web.rows.map((r) => [r.limit, r.counter]),
      [
        ['tokens[0]', { key: 'web', tenant: 'acme' }],
        ['tokens[1]', { tenant: 'acme' }],
        ['tokens[2]', { tenant: 'acme', model: 'gpt' }],
      ],
    );
    // The tenant's counter is reported whole: app's requests are in it too.
    assert.equal(web.rows[1].history.tokens, sent.app + sent.web);
    const beta = (await report(gw, '?tenant=beta')).json;
    assert.deepEqual(
      beta.rows.map((r) => [r.limit, r.counter]),
      [
        ['tokens[0]', { key: 'idle', tenant: 'beta' }],
        ['tokens[1]', { tenant: 'beta' }],
        ['tokens[2]', { tenant: 'beta', model: 'gpt' }],
      ],
    );
  });

  test('periods: previous, and the one holding a given time', async () => {
    await settled(gw, sent);
    const prev = (await report(gw, '?period=previous')).json;
    assert.equal(prev.period, 'previous');
    const app = row(prev, 'tokens[0]', 'key', 'app');
    assert.equal(app.period.end_ms - app.period.start_ms, 86400000);
    assert.ok(app.period.end_ms <= Date.now());
    assert.deepEqual(app.history, { tokens: 0, requests: 0 });
    assert.equal(app.limiter.present, false);
    const iso = new Date().toISOString();
    const at = (await report(gw, `?at=${encodeURIComponent(iso)}`)).json;
    assert.equal(row(at, 'tokens[0]', 'key', 'app').history.tokens, sent.app);
    const secs = Math.floor(Date.now() / 1000);
    const atSecs = (await report(gw, `?at=${secs}&period=current`)).json;
    assert.equal(row(atSecs, 'tokens[0]', 'key', 'app').limiter.used, sent.app);
  });

  test('who may read it: an admin key on the main listener, anyone on the admin listener', async () => {
    const none = await rawRequest({ port: gw.port, path: '/admin/usage/reconcile' });
    assert.equal(none.status, 401, none.body);
    const other = await report(gw, '', { key: APP });
    assert.equal(other.status, 403, other.text);
    assert.match(other.json.error.message, /admin key/);
    const admin = await report(gw, '', { admin: true });
    assert.equal(admin.status, 200, admin.text);
    assert.ok(row(admin.json, 'tokens[0]', 'key', 'app'));
    const post = await request(`${gw.url}/admin/usage/reconcile`, { method: 'POST', key: ADMIN, body: {} });
    assert.equal(post.status, 405);
  });

  test('bad parameters: 400 naming the parameter', async () => {
    const cases = [
      ['?period=yesterday', /^period: /],
      ['?at=soon', /^at: /],
      ['?at=2026-13-01', /^at: /],
      ['?key=nobody', /^key: no configured key/],
      ['?tenant=nobody', /^tenant: no configured key/],
      ['?window=1h', /unknown parameter "window"/],
      ['?key=app&key=web', /key is given twice/],
    ];
    for (const [q, message] of cases) {
      const r = await report(gw, q);
      assert.equal(r.status, 400, `${q}: ${r.text}`);
      assert.match(r.json.error.message, message, q);
    }
  });

  test('Redis down: the limiter side is null with the error, the history side stands', async () => {
    await settled(gw, sent);
    await redis.stop();
    try {
      const rep = await waitFor(
        async () => {
          const r = (await report(gw)).json;
          return r.limiter.error ? r : null;
        },
        { timeout: 5000, what: 'the report to say Redis is unreachable' },
      );
      assert.match(rep.limiter.error, /Redis/);
      assert.equal(rep.disagreements, null);
      const app = row(rep, 'tokens[0]', 'key', 'app');
      assert.equal(app.limiter, null);
      assert.equal(app.difference, null);
      assert.equal(app.history.tokens, sent.app);
      assert.ok(rep.notes.some((n) => n.includes('could not be read')));
    } finally {
      await redis.start();
    }
  });
});

describe('reconcile: the memory backend', () => {
  let up, gw, sent;
  before(async () => {
    up = await startRecorder(chargeAsAsked);
    // (public_status opens /metrics and /infra, not this report.)
    gw = await startGateway({ ...config(up, { backend: 'memory' }), admin: { public_status: true } });
    sent = await traffic(gw);
  });
  after(async () => {
    await gw?.stop();
    await up?.close();
  });

  test("the limiter's side is this instance's memory", async () => {
    const rep = await settled(gw, sent);
    assert.equal(rep.limiter.backend, 'memory');
    assert.equal(rep.limiter.counts, 'this instance only');
    assert.ok(rep.notes.some((n) => n.includes('this instance')));
    const app = row(rep, 'tokens[0]', 'key', 'app');
    assert.deepEqual(app.limiter, { used: sent.app, reserved: 0, present: true, source: 'memory' });
    assert.equal(app.difference, 0);
    assert.equal(rep.disagreements, 0);
  });

  test('admin.public_status does not open it', async () => {
    assert.equal((await rawRequest({ port: gw.port, path: '/infra' })).status, 200);
    const r = await rawRequest({ port: gw.port, path: '/admin/usage/reconcile' });
    assert.equal(r.status, 401, r.body);
    assert.equal((await report(gw, '', { key: APP })).status, 403);
  });
});

describe('reconcile: a PostgreSQL history', () => {
  let up, redis, pg, gw, sent;
  before(async () => {
    [up, redis, pg] = await Promise.all([startRecorder(chargeAsAsked), startRedis(), startPostgres()]);
    gw = await startGateway({
      ...config(up, { backend: 'redis' }, { url: pg.url }),
      redis: { url: redis.url },
    });
    sent = await traffic(gw);
  });
  after(async () => {
    await gw?.stop();
    await Promise.all([up?.close(), redis?.stop(), pg?.stop()]);
  });

  test('the history in PostgreSQL and the Redis ledger agree', async () => {
    const rep = await settled(gw, sent);
    assert.equal(rep.history.backend, 'postgres');
    assert.equal(rep.disagreements, 0, JSON.stringify(rep.rows));
    assert.deepEqual(row(rep, 'tokens[0]', 'key', 'app').history, { tokens: sent.app, requests: 5 });
    assert.equal(row(rep, 'tokens[0]', 'key', 'web').limiter.used, sent.web);
    // The same sums as the rows themselves.
    const total = await pg.query("SELECT SUM(prompt_tokens + completion_tokens) FROM requests WHERE key_name IN ('app', 'web')");
    assert.equal(Number(total.trim()), sent.app + sent.web);
  });

  test('the database down: 503 history_unavailable', async () => {
    await pg.stop();
    const r = await report(gw);
    assert.equal(r.status, 503, r.text);
    assert.equal(r.json.error.code, 'history_unavailable');
  });
});
