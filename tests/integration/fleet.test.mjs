// The cluster acceptance suite: three instances made by deploy/cluster.sh behind a real
// nginx (deploy/nginx/sluice.conf), sharing one redis-server, one PostgreSQL and one
// simulator, scraped by a real Prometheus; then the drills an operator runs (kill -9, a
// rolling restart, scaling out and in, a stop without unlisting) under load.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { promisify } from 'node:util';

import {
  BIN,
  REPO,
  assembled,
  closedPort,
  contentEvents,
  delay,
  rawRequest,
  simText,
  sse,
  startPostgres,
  startRedis,
  startSim,
  tempDir,
  toYaml,
  waitFor,
  withTimeout,
} from './lib.mjs';

const run = promisify(execFile);
const CLUSTER = path.join(REPO, 'deploy', 'cluster.sh');
const PROMETHEUS = process.env.PROMETHEUS || 'prometheus';
const ADMIN = 'sk-fleet-admin-0000000000000000';
const APP = 'sk-fleet-app-11111111111111111';
const FREE = 'sk-fleet-free-2222222222222222';
const BODY = { model: 'demo', messages: [{ role: 'user', content: 'Say something.' }], max_tokens: 4 };
const STREAM_TOKENS = 12;

// A process runs: it exists and is not a zombie (an exited instance waits for init to reap it).
function running(pid) {
  try {
    return fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ').at(-1)[0] !== 'Z';
  } catch {
    return false;
  }
}

describe('fleet: three instances behind nginx', () => {
  let fast, slow, redis, pg, dir, nginxPort, prom;
  let passed = 0;
  const drills = {}; // what one drill's check leaves for the next ones
  const env = () => ({
    ...process.env,
    SLUICE_BIN: BIN,
    SLUICE_CONFIG: path.join(dir, 'sluice.yaml'),
    CLUSTER_DIR: path.join(dir, 'cluster'),
    CLUSTER_NAME: 'fleet',
    NGINX_LISTEN: `127.0.0.1:${nginxPort}`,
    REQUEST_TIMEOUT: '60s',
    WAIT_SECONDS: '30',
  });
  const cluster = async (...args) => {
    const r = await run('bash', [CLUSTER, ...args], { env: env(), timeout: 120000 });
    return r.stdout + r.stderr;
  };
  // The instances cluster.sh runs, from its status: [{name, id, pid, port, admin, ready}].
  const instances = async () =>
    (await cluster('status'))
      .split('\n')
      .map((l) => /^(fleet-(\d+)) pid (\d+) port (\d+) admin (\d+) (ready|not ready)$/.exec(l))
      .filter(Boolean)
      .map((m) => ({ name: m[1], id: Number(m[2]), pid: Number(m[3]), port: Number(m[4]), admin: Number(m[5]), ready: m[6] === 'ready' }));

  // One request on a new connection (each goes through nginx's balancing on its own).
  const post = (port, body = BODY, { key = APP, headers = {}, localAddress } = {}) =>
    rawRequest({
      port,
      localAddress,
      method: 'POST',
      path: '/v1/chat/completions',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
      timeout: 30000,
    });
  const viaNginx = (body, opts) => post(nginxPort, body, opts);
  const stream = (alias = 'slow', tokens = STREAM_TOKENS) =>
    sse(`http://127.0.0.1:${nginxPort}/v1/chat/completions`, { model: alias, messages: BODY.messages, stream: true, max_tokens: tokens }, { key: APP, timeout: 60000 });

  // Steady load through nginx until stop(): `clients` loops of non-streamed requests, and
  // `streams` loops of streams; every outcome kept with when it started and who served it.
  function load({ clients = 3, streams = 2, keepAlive = 0 } = {}) {
    const out = { requests: [], streams: [] };
    let stopped = false;
    const agent = new http.Agent({ keepAlive: true });
    const loops = [
      // Clients that keep their connection to nginx between requests (a new request may
      // be sent the moment the last response ends).
      ...Array.from({ length: keepAlive }, async () => {
        while (!stopped) {
          const t = performance.now();
          const r = await new Promise((resolve) => {
            const req = http.request(
              { host: '127.0.0.1', port: nginxPort, method: 'POST', path: '/v1/chat/completions', agent,
                headers: { authorization: `Bearer ${APP}`, 'content-type': 'application/json' } },
              (res) => {
                res.resume();
                res.on('end', () => resolve({ status: res.statusCode, by: res.headers['x-sluice-instance'] }));
                res.on('error', (e) => resolve({ status: e.code ?? e.message }));
              },
            );
            req.on('error', (e) => resolve({ status: e.code ?? e.message }));
            req.end(JSON.stringify(BODY));
          });
          out.requests.push({ t, keepAlive: true, ...r });
        }
      }),
      ...Array.from({ length: clients }, async () => {
        while (!stopped) {
          const t = performance.now();
          try {
            const r = await viaNginx();
            out.requests.push({ t, status: r.status, by: r.headers['x-sluice-instance'], body: r.body.slice(0, 200) });
          } catch (e) {
            out.requests.push({ t, status: e.code ?? e.message });
          }
          await delay(5);
        }
      }),
      ...Array.from({ length: streams }, async () => {
        while (!stopped) {
          const t = performance.now();
          try {
            const r = await stream();
            out.streams.push({ t, status: r.status, by: r.headers.get('x-sluice-instance'), done: r.done, error: r.error?.message, text: r.events ? assembled(r.events) : r.raw });
          } catch (e) {
            out.streams.push({ t, status: e.code ?? e.message });
          }
        }
      }),
    ];
    return {
      out,
      async stop() {
        stopped = true;
        await Promise.all(loops);
        agent.destroy();
        return out;
      },
    };
  }
  const failed = (rs) => rs.filter((r) => r.status !== 200);
  const cut = (ss) => ss.filter((s) => s.status !== 200 || !s.done || s.text !== simText(STREAM_TOKENS));

  before(async () => {
    dir = tempDir('sluice-fleet-');
    [fast, slow, redis, pg] = await Promise.all([
      startSim({ ttft: '2ms', 'inter-token': '1ms' }),
      startSim({ ttft: '20ms', 'inter-token': '40ms' }),
      startRedis(),
      startPostgres(),
    ]);
    nginxPort = await closedPort();
    fs.writeFileSync(
      path.join(dir, 'sluice.yaml'),
      toYaml({
        workers: 2,
        keys: [
          { name: 'admin', key: ADMIN, tenant: 'ops', admin: true },
          { name: 'app', key: APP, tenant: 'acme' },
          { name: 'free', key: FREE, tenant: 'acme', tier: 'free' },
        ],
        models: [
          { alias: 'demo', provider: 'openai', base_url: `${fast.url}/v1`, model: 'sluice-sim' },
          { alias: 'slow', provider: 'openai', base_url: `${slow.url}/v1`, model: 'sluice-sim' },
        ],
        trusted_proxies: ['127.0.0.1'],
        redis: { url: redis.url },
        rate_limits: { backend: 'redis', requests: [{ scope: 'key', key: 'free', limit: 10, window: '1h' }] },
        history: { url: pg.url, batch_rows: 20, flush_interval: '200ms' },
        timeouts: { drain_delay: '2s', shutdown_grace: '20s' },
      }),
    );
    await cluster('up', '3');
  });

  after(async () => {
    try {
      await cluster('down');
    } catch (e) {
      process.stderr.write(`cluster.sh down: ${e.stderr ?? e.message}\n`);
      // Whatever is left is stopped by its pid file.
      for (const f of [path.join(dir, 'cluster', 'nginx', 'nginx.pid')]) {
        try {
          process.kill(Number(fs.readFileSync(f, 'utf8')), 'SIGKILL');
        } catch {}
      }
    }
    if (prom) prom.kill('SIGKILL');
    await Promise.all([fast?.stop(), slow?.stop(), redis?.stop(), pg?.stop()]);
    process.stderr.write(`fleet: ${passed} checks passed\n`);
  });

  const check = (name, fn) =>
    test(name, async () => {
      await fn();
      passed++;
    });

  // ---- the cluster as cluster.sh made it ------------------------------------------------

  check('01 up 3: three instances ready, each with its own name, ports and pid', async () => {
    const all = await instances();
    assert.equal(all.length, 3);
    assert.deepEqual(all.map((i) => i.name), ['fleet-1', 'fleet-2', 'fleet-3']);
    assert.ok(all.every((i) => i.ready));
    assert.equal(new Set(all.map((i) => i.port)).size, 3);
    assert.equal(new Set(all.map((i) => i.pid)).size, 3);
  });

  check('02 up again is idempotent: the same processes', async () => {
    const before = await instances();
    await cluster('up', '3');
    assert.deepEqual(await instances(), before);
  });

  check('03 each instance answers its probes on its own admin listener, under its name', async () => {
    for (const i of await instances()) {
      const r = await rawRequest({ port: i.admin, path: '/health' });
      assert.equal(r.status, 200);
      assert.equal(r.headers['x-sluice-instance'], i.name);
      assert.equal((await rawRequest({ port: i.admin, path: '/ready' })).status, 200);
    }
  });

  check('04 nginx answers /lb-health itself', async () => {
    const r = await rawRequest({ port: nginxPort, path: '/lb-health' });
    assert.equal(r.status, 200);
    assert.equal(r.body, 'ok\n');
    assert.equal(r.headers['x-sluice-instance'], undefined);
  });

  check('05 /metrics, /infra, /admin and /console are not reachable through nginx', async () => {
    for (const p of ['/metrics', '/infra', '/admin/keys', '/admin/requests', '/console/', '/console']) {
      const r = await rawRequest({ port: nginxPort, path: p, headers: { authorization: `Bearer ${ADMIN}` } });
      assert.equal(r.status, 404, p);
      assert.equal(r.headers['x-sluice-instance'], undefined, p);
    }
  });

  check('06 a completion through nginx, answered by one of the instances', async () => {
    const r = await viaNginx();
    assert.equal(r.status, 200);
    assert.match(r.headers['x-sluice-instance'], /^fleet-[123]$/);
    assert.equal(JSON.parse(r.body).choices[0].message.content, simText(4));
  });

  check('07 a wrong key is refused by whichever instance gets it', async () => {
    const r = await viaNginx(BODY, { key: 'sk-wrong-key-000000000000' });
    assert.equal(r.status, 401);
    assert.equal(JSON.parse(r.body).error.code, 'invalid_api_key');
  });

  check('08 sequential requests are spread over all three instances', async () => {
    const by = {};
    for (let n = 0; n < 30; n++) {
      const r = await viaNginx();
      assert.equal(r.status, 200);
      by[r.headers['x-sluice-instance']] = (by[r.headers['x-sluice-instance']] ?? 0) + 1;
    }
    assert.deepEqual(Object.keys(by).sort(), ['fleet-1', 'fleet-2', 'fleet-3']);
    for (const [name, n] of Object.entries(by)) assert.ok(n >= 5, `${name} served ${n} of 30`);
  });

  check('09 least connections: with two instances busy with streams, new requests go to the third', async () => {
    const started = [];
    const streams = [0, 1].map((i) =>
      sse(`http://127.0.0.1:${nginxPort}/v1/chat/completions`, { model: 'slow', messages: BODY.messages, stream: true, max_tokens: 40 }, {
        key: APP,
        timeout: 60000,
        stopAfter: (events) => {
          // (One read may bring several events: the first content seen, however many.)
          if (!started.includes(i) && contentEvents(events).length >= 1) started.push(i);
          return false;
        },
      }),
    );
    await waitFor(() => started.length === 2, { timeout: 10000, what: 'both streams to start' });
    const busy = new Set();
    const free = [];
    for (let n = 0; n < 6; n++) {
      const r = await viaNginx();
      assert.equal(r.status, 200);
      free.push(r.headers['x-sluice-instance']);
    }
    const done = await Promise.all(streams);
    for (const s of done) busy.add(s.headers.get('x-sluice-instance'));
    assert.equal(busy.size, 2, 'the two streams landed on two instances');
    for (const who of free) assert.ok(!busy.has(who), `a short request went to ${who}, busy with a stream`);
  });

  check('10 a stream through nginx is not buffered: its first token arrives long before its last', async () => {
    const r = await stream('slow', 20);
    assert.equal(r.status, 200);
    assert.ok(r.done);
    const content = contentEvents(r.events);
    assert.equal(content.length, 20);
    // 40 ms between tokens at the simulator: buffered, they would arrive together.
    const spread = content.at(-1).t - content[0].t;
    assert.ok(spread > 19 * 40 * 0.5, `first to last token: ${spread.toFixed(0)} ms (buffered?)`);
    assert.ok(r.chunks.length >= 10, `${r.chunks.length} reads for 20 tokens`);
  });

  check('11 a stream through nginx carries exactly what the model sent', async () => {
    const r = await stream('demo', 30);
    assert.equal(assembled(r.events), simText(30));
    assert.ok(r.done);
  });

  check('12 a client X-Request-Id goes through nginx to the instance and back', async () => {
    const id = `fleet-rid-${Date.now()}`;
    const r = await viaNginx(BODY, { headers: { 'x-request-id': id } });
    assert.equal(r.headers['x-request-id'], id);
  });

  check("13 without one, nginx's request id is the request's id at the instance", async () => {
    const r = await viaNginx();
    assert.match(r.headers['x-request-id'], /^[0-9a-f]{32}$/);
  });

  check("14 the client's address reaches the instance through nginx; one the client claims does not", async () => {
    const id = `fleet-xff-${Date.now()}`;
    // From 127.0.0.2 (nginx is 127.0.0.1, the one trusted proxy), claiming another address.
    const r = await viaNginx(BODY, { localAddress: '127.0.0.2', headers: { 'x-request-id': id, 'x-forwarded-for': '203.0.113.50' } });
    assert.equal(r.status, 200);
    const logPath = path.join(dir, 'cluster', 'instances', r.headers['x-sluice-instance'].split('-')[1], 'access.log');
    const line = await waitFor(
      () => fs.readFileSync(logPath, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l)).find((l) => l.request_id === id),
      { what: 'the access-log line' },
    );
    // nginx, the edge, replaced the header with the client's own address.
    assert.equal(line.client, '127.0.0.2');
    // Straight to an instance from an untrusted address, the header is not believed either.
    const [first] = await instances();
    const d = await post(first.port, BODY, { localAddress: '127.0.0.3', headers: { 'x-request-id': `${id}-d`, 'x-forwarded-for': '203.0.113.50' } });
    assert.equal(d.status, 200);
    const log1 = path.join(dir, 'cluster', 'instances', String(first.id), 'access.log');
    const direct = await waitFor(
      () => fs.readFileSync(log1, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l)).find((l) => l.request_id === `${id}-d`),
      { what: 'the direct request\'s access-log line' },
    );
    assert.equal(direct.client, '127.0.0.3');
  });

  check('15 a rate limit is exact across the fleet: 10 of 15 requests pass, whichever instance counts', async () => {
    const results = [];
    for (let n = 0; n < 15; n++) {
      const r = await viaNginx(BODY, { key: FREE });
      results.push({ status: r.status, by: r.headers['x-sluice-instance'] });
    }
    assert.equal(results.filter((r) => r.status === 200).length, 10);
    assert.equal(results.filter((r) => r.status === 429).length, 5);
    assert.ok(new Set(results.map((r) => r.by)).size >= 2, 'answered by more than one instance');
  });

  check('16 the history of every instance lands in the one PostgreSQL, with its instance name', async () => {
    await waitFor(
      async () => {
        const out = (await pg.query("SELECT instance, count(*) FROM requests WHERE path = '/v1/chat/completions' GROUP BY instance ORDER BY instance"));
        const rows = out.trim().split('\n').filter(Boolean).map((l) => l.split('|'));
        return rows.length === 3 && rows.map((r) => r[0]).join(',') === 'fleet-1,fleet-2,fleet-3';
      },
      { timeout: 10000, what: 'rows of fleet-1, fleet-2 and fleet-3' },
    );
  });

  check("17 history rows keep the client's address (none recorded as the address it claimed)", async () => {
    await waitFor(async () => (await pg.query("SELECT count(*) FROM requests WHERE client IN ('127.0.0.2', '127.0.0.3')")).trim() === '2', {
      timeout: 10000,
      what: 'the rows of check 14',
    });
    assert.equal((await pg.query("SELECT count(*) FROM requests WHERE client = '203.0.113.50'")).trim(), '0');
  });

  check("18 any instance's /history shows the rows every instance wrote", async () => {
    const [first] = await instances();
    const r = await rawRequest({ port: first.port, path: '/history?limit=500', headers: { authorization: `Bearer ${ADMIN}` } });
    assert.equal(r.status, 200);
    const rows = JSON.parse(r.body).data;
    assert.deepEqual([...new Set(rows.map((x) => x.instance))].sort(), ['fleet-1', 'fleet-2', 'fleet-3']);
  });

  check('19 a real Prometheus scrapes every instance', async () => {
    const all = await instances();
    const promPort = await closedPort();
    const promDir = tempDir('sluice-fleet-prom-');
    fs.writeFileSync(
      path.join(promDir, 'prometheus.yml'),
      toYaml({
        global: { scrape_interval: '1s' },
        scrape_configs: [{ job_name: 'sluice', static_configs: [{ targets: all.map((i) => `127.0.0.1:${i.admin}`) }] }],
      }),
    );
    prom = spawn(PROMETHEUS, [`--config.file=${path.join(promDir, 'prometheus.yml')}`, `--storage.tsdb.path=${path.join(promDir, 'data')}`, `--web.listen-address=127.0.0.1:${promPort}`], { stdio: 'ignore' });
    const query = async (q) => {
      const r = await rawRequest({ port: promPort, path: `/api/v1/query?query=${encodeURIComponent(q)}` });
      return r.status === 200 ? JSON.parse(r.body).data.result : [];
    };
    const up = await waitFor(async () => {
      const res = await query('up{job="sluice"}');
      return res.length === 3 && res.every((s) => s.value[1] === '1') && res;
    }, { timeout: 30000, interval: 250, what: 'Prometheus to scrape three instances up' });
    assert.equal(up.length, 3);
    const series = await waitFor(async () => {
      const res = await query('sum by (instance) (sluice_requests_total)');
      return res.length === 3 && res;
    }, { timeout: 15000, interval: 250, what: 'request counts of three instances' });
    assert.ok(series.every((s) => Number(s.value[1]) > 0));
    prom.kill('SIGTERM');
    prom = undefined;
  });

  // ---- drills under load ----------------------------------------------------------------

  check('20 kill -9 under load: requests sent after the death all succeed through the others', async () => {
    const victim = (await instances())[0];
    const l = load({ clients: 3, streams: 3 });
    await waitFor(() => l.out.streams.length >= 3 && l.out.requests.length >= 20, { timeout: 20000, what: 'load to run' });
    // Streams in flight on the victim at the time of the kill.
    process.kill(victim.pid, 'SIGKILL');
    await waitFor(() => !running(victim.pid), { what: 'the instance to die' });
    // Counted from a moment after the death: nginx may still hand a request to a kept-alive
    // connection of the dead instance until its loop has seen that connection close, and it
    // never resends a POST (the inherent race of keep-alive at a crash; docs/deploy.md).
    await delay(500);
    const tDead = performance.now();
    await delay(3000);
    const out = await l.stop();
    const after = out.requests.filter((r) => r.t > tDead);
    assert.ok(after.length >= 20, `${after.length} requests after the kill`);
    assert.deepEqual(failed(after), [], 'requests started after the kill');
    assert.ok(after.every((r) => r.by !== victim.name));
    // Streams started after the death: all whole.
    assert.deepEqual(cut(out.streams.filter((s) => s.t > tDead)), []);
    drills.kill = { victim, out, tDead };
  });

  check('21 kill -9: streams cut on the dead instance end in an error, never as a complete answer', async () => {
    const { victim, out, tDead } = drills.kill;
    const before = out.streams.filter((s) => s.t < tDead);
    for (const s of before.filter((x) => x.by === victim.name && !x.done)) {
      assert.ok(s.error || s.status !== 200, `a cut stream ended without an error: ${JSON.stringify(s)}`);
    }
    // No stream claims completion with a partial text.
    for (const s of before.filter((x) => x.done)) assert.equal(s.text, simText(STREAM_TOKENS));
  });

  check("22 kill -9: the other instances' streams complete", async () => {
    const { victim, out, tDead } = drills.kill;
    const others = out.streams.filter((s) => s.t < tDead && s.by && s.by !== victim.name);
    assert.deepEqual(cut(others), []);
  });

  check('23 after a kill, status shows two, and scale 3 brings a third back', async () => {
    assert.equal((await instances()).length, 2);
    await cluster('scale', '3');
    const all = await instances();
    assert.equal(all.length, 3);
    assert.ok(all.every((i) => i.ready));
    assert.equal(all.at(-1).name, 'fleet-4', 'a new instance, a new name');
  });

  check('24 rolling restart under streams and requests, keep-alive clients among them: no request fails', async () => {
    const before = await instances();
    const master = Number(fs.readFileSync(path.join(dir, 'cluster', 'nginx', 'nginx.pid'), 'utf8'));
    const workers = execFileSync('ps', ['-o', 'pid=', '--ppid', String(master)], { encoding: 'utf8' });
    const l = load({ clients: 3, streams: 3, keepAlive: 2 });
    await waitFor(() => l.out.streams.length >= 2, { timeout: 20000, what: 'load to run' });
    await cluster('restart');
    await delay(500);
    const out = await l.stop();
    assert.ok(out.requests.length >= 50, `${out.requests.length} requests`);
    assert.ok(out.requests.filter((r) => r.keepAlive).length >= 20);
    assert.deepEqual(failed(out.requests), []);
    // In place: nginx was not reloaded (a reload closes its clients' keep-alive connections
    // as their responses end, and a request sent at that moment meets a reset).
    assert.equal(execFileSync('ps', ['-o', 'pid=', '--ppid', String(master)], { encoding: 'utf8' }), workers);
    drills.restart = { before, out };
  });

  check('25 rolling restart: no stream cut', async () => {
    const { out } = drills.restart;
    assert.ok(out.streams.length >= 6, `${out.streams.length} streams`);
    assert.deepEqual(cut(out.streams), []);
  });

  check('26 rolling restart: every instance was replaced, and served along the way', async () => {
    const { before, out } = drills.restart;
    const now = await instances();
    assert.equal(now.length, 3);
    for (const i of now) assert.ok(!before.some((b) => b.pid === i.pid || b.name === i.name));
    const servers = new Set(out.requests.map((r) => r.by));
    for (const i of [...before, ...now]) assert.ok(servers.has(i.name), `${i.name} served nothing during the restart`);
  });

  check('27 scale 3 → 5 under load: no request fails, and the new instances serve', async () => {
    const l = load({ clients: 3, streams: 2 });
    await waitFor(() => l.out.requests.length >= 10, { timeout: 20000, what: 'load to run' });
    await cluster('scale', '5');
    const now = await instances();
    assert.equal(now.length, 5);
    const mark = l.out.requests.length;
    await waitFor(() => new Set(l.out.requests.slice(mark).map((r) => r.by)).size === 5, { timeout: 20000, what: 'all five to serve' });
    const out = await l.stop();
    assert.deepEqual(failed(out.requests), []);
    assert.deepEqual(cut(out.streams), []);
  });

  check('28 scale 5 → 3 under load: no request fails, no stream is cut', async () => {
    const l = load({ clients: 3, streams: 4 });
    await waitFor(() => l.out.streams.length >= 2, { timeout: 20000, what: 'load to run' });
    await cluster('scale', '3');
    const out = await l.stop();
    assert.equal((await instances()).length, 3);
    assert.deepEqual(failed(out.requests), []);
    assert.deepEqual(cut(out.streams), []);
  });

  check('29 the instances scaled in drained and exited 0', async () => {
    const base = path.join(dir, 'cluster', 'instances');
    const running = new Set((await instances()).map((i) => String(i.id)));
    const gone = fs.readdirSync(base).filter((id) => !running.has(id));
    assert.ok(gone.length >= 5);
    for (const id of gone.filter((x) => x !== '1')) {  // fleet-1 was killed
      assert.match(fs.readFileSync(path.join(base, id, 'err.log'), 'utf8'), /sluice: stopped/, `fleet-${id}`);
    }
  });

  check('30 SIGTERM to a listed instance: /ready says draining while it still serves new connections', async () => {
    const [victim] = await instances();
    process.kill(victim.pid, 'SIGTERM');
    const r = await waitFor(async () => {
      const x = await rawRequest({ port: victim.admin, path: '/ready' });
      return x.status === 503 && x;
    }, { timeout: 2000, interval: 20, what: '/ready to say draining' });
    assert.equal(JSON.parse(r.body).status, 'draining');
    const direct = await post(victim.port);
    assert.equal(direct.status, 200);
    assert.equal(direct.headers.connection, 'close');
    drills.term = victim;
  });

  check('31 ... and once it stops listening, nginx sends its requests to the others: none fails', async () => {
    const victim = drills.term;
    const l = load({ clients: 3, streams: 1 });
    await waitFor(() => !running(victim.pid), { timeout: 30000, what: 'the instance to exit' });
    await delay(1000);
    const out = await l.stop();
    assert.deepEqual(failed(out.requests), []);
    assert.deepEqual(cut(out.streams), []);
  });

  check('32 scale heals the list: the stopped instance is replaced and unlisted', async () => {
    await cluster('scale', '3');
    const all = await instances();
    assert.equal(all.length, 3);
    const listed = fs.readFileSync(path.join(dir, 'cluster', 'nginx', 'upstreams.conf'), 'utf8');
    assert.equal(listed.trim().split('\n').length, 3);
    for (const i of all) assert.ok(listed.includes(`127.0.0.1:${i.port} `), `${i.name} listed`);
  });

  check('33 the limit stayed exact through every change: the free key is still refused everywhere', async () => {
    for (const i of await instances()) {
      const r = await post(i.port, BODY, { key: FREE });
      assert.equal(r.status, 429, i.name);
    }
  });

  check('34 no request of the drills was answered twice: one history row per request id', async () => {
    await delay(500);
    const dup = (await pg.query("SELECT count(*) FROM (SELECT request_id FROM requests GROUP BY request_id HAVING count(*) > 1) d")).trim();
    assert.equal(dup, '0');
  });

  check('35 an instance that cannot start leaves nothing behind: scale and restart fail, the fleet is as it was', async () => {
    const before = await instances();
    const bad = path.join(dir, 'bad.yaml');
    fs.writeFileSync(bad, 'models: []\n');
    await assert.rejects(
      run('bash', [CLUSTER, 'scale', '4'], { env: { ...env(), SLUICE_CONFIG: bad }, timeout: 60000 }),
      (e) => /did not start/.test(e.stderr) && /scale: stopped at 3 instances/.test(e.stderr),
    );
    assert.deepEqual(await instances(), before);
    // A restart onto it replaces nothing: the new process is tried on ports of its own first.
    await assert.rejects(
      run('bash', [CLUSTER, 'restart'], { env: { ...env(), SLUICE_CONFIG: bad }, timeout: 60000 }),
      (e) => /restart: the new process does not get ready; nothing was replaced/.test(e.stderr),
    );
    assert.deepEqual(await instances(), before);
    // Its id is not reused: the next instance gets a new one.
    await cluster('scale', '4');
    const now = await instances();
    assert.equal(now.length, 4);
    assert.ok(now.at(-1).id > before.at(-1).id + 1, `ids ${now.map((i) => i.id)}`);
  });

  check('36 down: every instance and nginx stop; nothing listens any more', async () => {
    const all = await instances();
    await withTimeout(cluster('down'), 60000, 'cluster.sh down');
    assert.match(await cluster('status'), /nginx +not running/);
    assert.deepEqual(await instances(), []);
    for (const i of all) assert.ok(!running(i.pid), `${i.name} (pid ${i.pid}) still runs`);
    await assert.rejects(rawRequest({ port: nginxPort, path: '/lb-health' }), { code: 'ECONNREFUSED' });
  });
});
