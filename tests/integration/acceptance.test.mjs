// The infrastructure acceptance suite (in the spirit of the articles' 21-check script):
// two gateway instances on one real redis-server, one real PostgreSQL (the history), one
// Kafka cluster (librdkafka's mock cluster, real Kafka protocol) and one simulator. The
// checks run in order: the shared state works, then each dependency is taken down under
// steady traffic and brought back. Every request must still be answered 200, the failure
// must show in /infra and /metrics, recovery needs no restart, and nothing accepted is
// lost: every history row lands, every event is on the topic or in the fallback file.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { execFile } from 'node:child_process';
import { after, before, describe, test } from 'node:test';

import {
  chat,
  metricValue,
  rawRequest,
  request,
  sse,
  startGateway,
  startKafka,
  startPostgres,
  startRedis,
  startSim,
  USER,
  waitFor,
} from './lib.mjs';

const ADMIN = 'sk-admin-9999888877776666';
const APP = 'sk-app-1111222233334444';
const FREE = 'sk-free-5555666677778888';
const BODY = { model: 'demo', messages: USER, max_tokens: 3 };

async function json(gw, path, key) {
  const r = key ? await request(`${gw.url}${path}`, { key }) : await rawRequest({ port: gw.port, path });
  return { status: r.status, body: r.json ?? JSON.parse(r.body) };
}

const infra = async (gw) => gw.infra();

// Steady traffic: `n` requests spread over both instances, every status collected, with
// the request ids (to find them in the history and on the topic).
async function traffic(gws, n, key = APP) {
  const out = [];
  for (let i = 0; i < n; i++) {
    const r = await chat(gws[i % gws.length], BODY, { key });
    out.push({ status: r.status, id: r.headers.get('x-request-id') });
  }
  return out;
}

describe('acceptance: shared state, history, events and degradation drills', () => {
  let sim, redis, pg, kafka;
  const gws = [];
  const sent = []; // every request id sent through the gateways, for the no-loss checks
  let passed = 0;

  function config(name, extra = {}) {
    return {
      instance: name,
      keys: [
        { name: 'admin', key: ADMIN, tenant: 'ops', tier: 'premium', admin: true },
        { name: 'app', key: APP, tenant: 'acme', tier: 'standard' },
        { name: 'free', key: FREE, tenant: 'acme', tier: 'free' },
      ],
      models: [{ alias: 'demo', provider: 'openai', base_url: `${sim.url}/v1`, model: 'sluice-sim' }],
      redis: { url: redis.url, retry_interval: '500ms', timeout: '250ms' },
      rate_limits: {
        backend: 'auto',
        on_redis_down: 'open',
        requests: [{ scope: 'key', key: 'free', limit: 10, window: '1h' }],
      },
      history: { url: pg.url, batch_rows: 20, flush_interval: '200ms', retry_interval: '300ms', connect_timeout: '1s' },
      events: { brokers: kafka.bootstrap, topic: kafka.topic, linger: '5ms', delivery_timeout: '60s' },
      ...extra,
    };
  }

  before(async () => {
    [sim, redis, pg, kafka] = await Promise.all([
      startSim({ ttft: '2ms', 'inter-token': '1ms' }),
      startRedis(),
      startPostgres(),
      startKafka(),
    ]);
    gws.push(await startGateway(config('gw-a')), await startGateway(config('gw-b')));
  });
  after(async () => {
    await Promise.all(gws.map((g) => g.stop()));
    await Promise.all([sim?.stop(), redis?.stop(), pg?.stop(), kafka?.stop()]);
    process.stderr.write(`acceptance: ${passed} checks passed\n`);
  });

  const check = (name, fn) =>
    test(name, async () => {
      await fn();
      passed++;
    });

  check('01 both instances are healthy and ready', async () => {
    for (const gw of gws) {
      assert.equal((await rawRequest({ port: gw.port, path: '/health' })).status, 200);
      assert.equal((await rawRequest({ port: gw.port, path: '/ready' })).status, 200);
    }
  });

  check('02 /infra shows every dependency up with its active backend', async () => {
    for (const gw of gws) {
      await waitFor(async () => {
        const i = await infra(gw);
        return i.rate_limiter.active === 'redis' && i.history.up && i.events.up;
      }, { timeout: 10000, what: `${gw.url} to report Redis, PostgreSQL and Kafka up` });
      const i = await infra(gw);
      assert.equal(i.history.backend, 'postgres');
      assert.match(i.history.target, /^postgresql:\/\/postgres@127\.0\.0\.1:\d+\/sluice$/);
      assert.equal(i.events.configured, 'kafka');
      assert.equal(i.history.schema_version >= 1, true);
    }
  });

  check('03 one quota across both instances: 6 requests to each give 10 x 200 and 2 x 429', async () => {
    const statuses = [];
    for (const gw of gws) {
      for (let i = 0; i < 6; i++) {
        const r = await chat(gw, BODY, { key: FREE });
        statuses.push(r.status);
        sent.push(r.headers.get('x-request-id'));
      }
    }
    assert.equal(statuses.filter((s) => s === 200).length, 10, statuses.join(','));
    assert.equal(statuses.filter((s) => s === 429).length, 2, statuses.join(','));
  });

  check('04 failures of each kind are answered and recorded (auth, unknown model, upstream error)', async () => {
    const noKey = await request(`${gws[0].url}/v1/chat/completions`, { method: 'POST', body: BODY, key: '' });
    assert.equal(noKey.status, 401);
    sent.push(noKey.headers.get('x-request-id'));
    const bad = await chat(gws[1], { ...BODY, model: 'nope' }, { key: APP });
    assert.equal(bad.status, 404);
    sent.push(bad.headers.get('x-request-id'));
    await sim.configure({ error_rate_500: 1 });
    try {
      const failed = await chat(gws[0], BODY, { key: APP });
      assert.equal(failed.status, 502);
      sent.push(failed.headers.get('x-request-id'));
    } finally {
      await sim.configure({ error_rate_500: 0 });
    }
    const streamed = await sse(`${gws[1].url}/v1/chat/completions`, { ...BODY, stream: true }, { key: APP });
    assert.equal(streamed.status, 200);
    sent.push(streamed.headers.get('x-request-id'));
  });

  check('05 every request so far is a row in PostgreSQL, with its instance', async () => {
    const ids = sent.map((id) => `'${id}'`).join(',');
    await waitFor(async () => Number(await pg.query(`SELECT count(*) FROM requests WHERE request_id IN (${ids})`)) === sent.length, {
      timeout: 10000,
      what: `${sent.length} history rows`,
    });
    const instances = (await pg.query(`SELECT DISTINCT instance FROM requests WHERE request_id IN (${ids}) ORDER BY 1`)).trim();
    assert.equal(instances, 'gw-a\ngw-b');
  });

  check('06 /history: a key sees only its own rows, an admin sees everyone, filters and paging work', async () => {
    const own = await json(gws[0], '/history?limit=1000', FREE);
    assert.equal(own.status, 200);
    assert.ok(own.body.data.length >= 12);
    assert.ok(own.body.data.every((r) => r.key_name === 'free'));
    const other = await json(gws[0], '/history?key=app', FREE);
    assert.equal(other.status, 403);
    const all = await json(gws[1], '/history?limit=1000', ADMIN);
    assert.ok(new Set(all.body.data.map((r) => r.key_name)).size >= 2);
    const limited = await json(gws[1], '/history?key=free&status=429', ADMIN);
    assert.equal(limited.body.data.length, 2);
    assert.ok(limited.body.data.every((r) => r.status === 429 && r.reason === 'rate_limit_exceeded'));
    const page1 = await json(gws[1], '/history?key=free&limit=5', ADMIN);
    assert.equal(page1.body.data.length, 5);
    assert.equal(page1.body.has_more, true);
    const page2 = await json(gws[1], `/history?key=free&limit=5&before_id=${page1.body.next_before_id}`, ADMIN);
    assert.ok(page2.body.data.every((r) => r.id < page1.body.data[4].id));
    const badQuery = await json(gws[1], '/history?since=yesterday', ADMIN);
    assert.equal(badQuery.status, 400);
    assert.match(badQuery.body.error.message, /since/);
  });

  check('07 /history/stats: count, mean, p50 and p95 of wall time and TTFT by model', async () => {
    const s = await json(gws[0], '/history/stats?window=1h&group_by=model', ADMIN);
    assert.equal(s.status, 200);
    // Grouped by the model the upstream served (the history keeps the alias too).
    const demo = s.body.groups.find((g) => g.key === 'sluice-sim');
    assert.ok(demo, JSON.stringify(s.body));
    assert.ok(demo.count >= 13);
    assert.ok(demo.wall_ms.p50 > 0 && demo.wall_ms.p95 >= demo.wall_ms.p50);
    assert.ok(demo.ttft_ms.p50 > 0);
  });

  check('08 Kafka holds all four event types, in the envelope, one per request; queries of the history are neither', async () => {
    // One request through each instance after the /history queries of 06 and 07: once its
    // row and its event are in, theirs would be too (each instance records in order).
    const markers = [];
    for (const gw of gws) {
      const r = await chat(gw, BODY, { key: APP });
      assert.equal(r.status, 200);
      markers.push(r.headers.get('x-request-id'));
      sent.push(r.headers.get('x-request-id'));
    }
    const marked = markers.map((id) => `'${id}'`).join(',');
    await waitFor(async () => Number(await pg.query(`SELECT count(*) FROM requests WHERE request_id IN (${marked})`)) === 2, {
      timeout: 10000,
      what: 'the rows of the requests sent after the /history queries',
    });
    assert.equal(Number(await pg.query(`SELECT count(*) FROM requests WHERE path LIKE '/history%'`)), 0);
    let events;
    await waitFor(async () => {
      events = await kafka.messages();
      const ids = new Set(events.map((e) => e.data.request_id));
      return sent.every((id) => ids.has(id));
    }, { timeout: 15000, what: 'every request to have its event on the topic' });
    const types = new Set(events.map((e) => e.event));
    for (const t of ['request.completed', 'request.rate_limited', 'request.auth_failed', 'request.error']) {
      assert.ok(types.has(t), `no ${t} event`);
    }
    const e = events.find((x) => x.event === 'request.rate_limited');
    assert.ok(e.id && e.time && e.unix_ms && e.host);
    assert.ok(['gw-a', 'gw-b'].includes(e.instance));
    assert.equal(e.data.status, 429);
    const ids = events.map((x) => x.data.request_id).filter((id) => sent.includes(id));
    assert.equal(ids.length, new Set(ids).size, 'an event was delivered twice');
    assert.deepEqual(events.filter((x) => x.data.path.startsWith('/history')).map((x) => x.data.path), []);
  });

  check('09 /metrics passes promtool and counts requests by model, status and reason', async () => {
    const text = await gws[1].metrics(); // (the instance that refused two requests in check 03)
    const out = await new Promise((resolve) => {
      const p = execFile('promtool', ['check', 'metrics'], (err, stdout, stderr) => resolve({ err, stdout, stderr }));
      p.stdin.end(text);
    });
    assert.equal(out.err, null, `${out.stdout}${out.stderr}`);
    assert.ok(metricValue(text, 'sluice_requests_total', { model: 'demo', tier: 'free', status: '429', reason: 'rate_limit_exceeded', stream: 'false' }) >= 1);
    assert.equal(metricValue(text, 'sluice_history_backend_up', { backend: 'postgres' }), 1);
    assert.equal(metricValue(text, 'sluice_events_up'), 1);
    assert.equal(metricValue(text, 'sluice_redis_up'), 1);
  });

  check('10 Redis down under traffic: every request 200, per-instance limits still apply, /infra and metrics say so', async () => {
    await redis.stop();
    const r = await traffic(gws, 20);
    sent.push(...r.map((x) => x.id));
    assert.deepEqual([...new Set(r.map((x) => x.status))], [200]);
    for (const gw of gws) {
      const i = await infra(gw);
      assert.equal(i.rate_limiter.active, 'memory');
      assert.equal(i.rate_limiter.redis.up, false);
      assert.equal(await gw.metric('sluice_redis_up'), 0);
      assert.equal(await gw.metric('sluice_ratelimit_backend_up'), 0);
    }
    // The free key's limit (10 per hour) is now counted by each instance alone.
    const st = [];
    for (let i = 0; i < 11; i++) st.push((await chat(gws[0], BODY, { key: FREE })).status);
    assert.equal(st.filter((s) => s === 200).length, 10, st.join(','));
    assert.equal(st[10], 429);
  });

  check('11 Redis back: shared counting resumes within 5 s, no restart', async () => {
    await redis.start();
    // (The bound is the issue's: with retry_interval 500 ms it is far from the expected time.)
    await waitFor(async () => (await Promise.all(gws.map(infra))).every((i) => i.rate_limiter.active === 'redis'), {
      timeout: 5000,
      interval: 100,
      what: 'both instances to count in Redis again',
    });
    const r = await chat(gws[1], BODY, { key: FREE });
    sent.push(r.headers.get('x-request-id'));
    assert.equal(r.status, 200);
    assert.match(await redis.raw('KEYS', 'sluice:*'), /^sluice:\{t:acme\}:k:free:/m);
  });

  check('12 PostgreSQL down under traffic: every request 200; history down in /infra and metrics', async () => {
    await pg.stop();
    const r = await traffic(gws, 30);
    sent.push(...r.map((x) => x.id));
    assert.deepEqual([...new Set(r.map((x) => x.status))], [200]);
    for (const gw of gws) {
      await waitFor(async () => (await infra(gw)).history.up === false, { timeout: 5000, what: 'history to show down' });
      const i = await infra(gw);
      assert.ok(i.history.write_errors >= 1 && i.history.last_error.length > 0, JSON.stringify(i.history));
      assert.ok(!i.history.last_error.includes('password'));
      const m = await gw.metrics();
      assert.equal(metricValue(m, 'sluice_history_backend_up', { backend: 'postgres' }), 0);
      assert.ok(metricValue(m, 'sluice_history_queue_rows') >= 1);
    }
    const q = await json(gws[0], '/history?limit=1', ADMIN);
    assert.equal(q.status, 503);
    assert.equal(q.body.error.code, 'history_unavailable');
  });

  check('13 PostgreSQL back: the rows queued during the outage all land, no restart', async () => {
    await pg.start();
    const ids = sent.map((id) => `'${id}'`).join(',');
    await waitFor(async () => Number(await pg.query(`SELECT count(*) FROM requests WHERE request_id IN (${ids})`)) === sent.length, {
      timeout: 15000,
      interval: 200,
      what: `all ${sent.length} history rows after the outage`,
    });
    for (const gw of gws) {
      const i = await infra(gw);
      assert.equal(i.history.up, true);
      assert.equal(i.history.dropped, 0);
      assert.ok(i.history.reconnects >= 1);
    }
  });

  check('14 Kafka down under traffic: every request 200; events down in /infra and metrics', async () => {
    await kafka.down();
    const r = await traffic(gws, 30);
    sent.push(...r.map((x) => x.id));
    assert.deepEqual([...new Set(r.map((x) => x.status))], [200]);
    for (const gw of gws) {
      await waitFor(async () => (await infra(gw)).events.up === false, { timeout: 15000, what: 'events to show down' });
      assert.equal(await gw.metric('sluice_events_up'), 0);
    }
  });

  check('15 Kafka back: reconnects within 10 s; every event is on the topic or in the fallback file, none twice', async () => {
    await kafka.up();
    await waitFor(async () => (await Promise.all(gws.map(infra))).every((i) => i.events.up && i.events.queued === 0), {
      timeout: 10000,
      interval: 200,
      what: 'both producers to reconnect and deliver what they queued',
    });
    const onTopic = new Map();
    for (const e of await kafka.messages()) onTopic.set(e.data.request_id, (onTopic.get(e.data.request_id) ?? 0) + 1);
    const inFile = new Set();
    for (const gw of gws) {
      const f = (await infra(gw)).events.fallback_file;
      if (fs.existsSync(f)) {
        for (const line of fs.readFileSync(f, 'utf8').split('\n').filter(Boolean)) inFile.add(JSON.parse(line).event.data.request_id);
      }
    }
    const missing = sent.filter((id) => !onTopic.has(id) && !inFile.has(id));
    assert.deepEqual(missing, [], `${missing.length} events lost`);
    const twice = sent.filter((id) => onTopic.get(id) > 1);
    assert.deepEqual(twice, [], 'events delivered twice');
  });

  check('16 everything down at once: every request still 200; /ready stays 200', async () => {
    await Promise.all([redis.stop(), pg.stop(), kafka.down()]);
    try {
      const r = await traffic(gws, 20);
      sent.push(...r.map((x) => x.id));
      assert.deepEqual([...new Set(r.map((x) => x.status))], [200]);
      for (const gw of gws) assert.equal((await rawRequest({ port: gw.port, path: '/ready' })).status, 200);
    } finally {
      await Promise.all([redis.start(), pg.start(), kafka.up()]);
    }
  });

  check('17 ...and all of it recovers by itself, nothing lost', async () => {
    await waitFor(async () => (await Promise.all(gws.map(infra))).every((i) => i.rate_limiter.active === 'redis' && i.history.up && i.events.up && i.events.queued === 0 && i.history.queued === 0), {
      timeout: 15000,
      interval: 200,
      what: 'Redis, PostgreSQL and Kafka to be in use again',
    });
    const ids = sent.map((id) => `'${id}'`).join(',');
    assert.equal(Number(await pg.query(`SELECT count(*) FROM requests WHERE request_id IN (${ids})`)), sent.length);
  });

  check('18 the access log, the history and the events hold no secret', async () => {
    const secrets = [ADMIN, APP, FREE];
    const texts = [...gws.map((g) => g.logText()), await pg.query('SELECT row_to_json(r) FROM requests r'),
      JSON.stringify(await kafka.messages())];
    for (const t of texts) for (const s of secrets) assert.ok(!t.includes(s), 'a key leaked');
  });
});
