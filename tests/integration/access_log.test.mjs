// The access log: one JSON line per request, with the documented fields, and never a secret.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import {
  BAD_KEY,
  KEY,
  KEY_LIMITED,
  USER,
  chat,
  request,
  sse,
  startGateway,
  startRecorder,
  waitFor,
} from './lib.mjs';

const UPSTREAM_SECRET = 'sk-upstream-secret-4242abcd';
const FIELDS = [
  'time',
  'request_id',
  'instance',
  'key_id',
  'tenant',
  'tier',
  'alias',
  'model',
  'backend',
  'status',
  'reason',
  'stream',
  'wall_ms',
  'ttft_ms',
  'tokens_per_s',
  'prompt_tokens',
  'completion_tokens',
];

let gw;
let rec;
let tStart;
const sent = []; // request ids of every request that must be logged

before(async () => {
  tStart = Date.now();
  rec = await startRecorder();
  gw = await startGateway({
    instance: 'it-log',
    keys: [
      { name: 'test-app', key: KEY, tenant: 'acme', tier: 'gold', models: ['*'] },
      { name: 'limited', key: KEY_LIMITED, tenant: 'beta', models: ['demo'] },
    ],
    models: [
      { alias: 'demo', provider: 'simulated', model: 'demo-real', sim: { ttft: '30ms', inter_token: '10ms', jitter: 0 } },
      { alias: 'rec', provider: 'openai', base_url: `${rec.url}/v1`, model: 'rec-real', api_key: UPSTREAM_SECRET },
    ],
  });
});

after(async () => {
  await gw?.stop();
  await rec?.close();
});

function rid(name) {
  const id = `log-${name}-${Math.random().toString(16).slice(2, 10)}`;
  sent.push(id);
  return { 'x-request-id': id };
}

function assertCommon(line) {
  for (const f of FIELDS) assert.ok(f in line, `field ${f} missing in ${JSON.stringify(line)}`);
  assert.equal(line.instance, 'it-log');
  const t = Date.parse(line.time);
  assert.match(line.time, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  assert.ok(t >= tStart - 1000 && t <= Date.now() + 1000, `time ${line.time} outside the test run`);
  assert.equal(typeof line.wall_ms, 'number');
  assert.ok(line.wall_ms >= 0);
}

describe('access log lines', () => {
  test('non-streamed completion: every field', async () => {
    const h = rid('plain');
    const r = await chat(gw, { model: 'demo', messages: USER, max_tokens: 4 }, { headers: h });
    assert.equal(r.status, 200, r.text);
    const line = await gw.logFor(h['x-request-id']);
    assertCommon(line);
    assert.equal(line.request_id, h['x-request-id']);
    assert.equal(line.method, 'POST');
    assert.equal(line.path, '/v1/chat/completions');
    assert.equal(line.key_id, 'sk-test-***cdef');
    assert.ok(line.key_id.startsWith('sk-test-***'));
    assert.equal(line.key_name, 'test-app');
    assert.equal(line.tenant, 'acme');
    assert.equal(line.tier, 'gold');
    assert.equal(line.alias, 'demo');
    assert.equal(line.model, 'demo-real');
    assert.equal(line.provider, 'simulated');
    assert.equal(line.backend, 'simulated:demo');  // the backend's name (external ones default to host:port)
    assert.equal(line.status, 200);
    assert.equal(line.reason, 'ok');
    assert.equal(line.upstream_status, 200);
    assert.equal(line.stream, false);
    assert.equal(line.client_cancelled, false);
    assert.equal(line.ttft_ms, null, 'no TTFT for a non-streamed answer');
    assert.equal(typeof line.tokens_per_s, 'number');
    assert.ok(line.tokens_per_s > 0);
    assert.equal(line.prompt_tokens, r.json.usage.prompt_tokens);
    assert.equal(line.completion_tokens, 4);
    assert.ok(line.wall_ms > 0);
  });

  test('streamed completion: ttft_ms and tokens_per_s are numbers', async () => {
    const h = rid('stream');
    const r = await sse(`${gw.url}/v1/chat/completions`, { model: 'demo', messages: USER, stream: true, max_tokens: 5 }, { headers: h });
    assert.equal(r.status, 200);
    assert.ok(r.done);
    const line = await gw.logFor(h['x-request-id']);
    assertCommon(line);
    assert.equal(line.stream, true);
    assert.equal(line.status, 200);
    assert.equal(line.reason, 'ok');
    assert.equal(typeof line.ttft_ms, 'number');
    assert.ok(line.ttft_ms > 0 && line.ttft_ms <= line.wall_ms, `ttft ${line.ttft_ms} wall ${line.wall_ms}`);
    assert.equal(typeof line.tokens_per_s, 'number');
    assert.ok(line.tokens_per_s > 0);
    assert.equal(line.completion_tokens, 5);
    assert.equal(typeof line.prompt_tokens, 'number');
    assert.ok(line.prompt_tokens >= 1);
  });

  test('an OpenAI-provider route logs its provider, real model and backend', async () => {
    const h = rid('rec');
    const r = await chat(gw, { model: 'rec', messages: USER }, { headers: h });
    assert.equal(r.status, 200, r.text);
    const line = await gw.logFor(h['x-request-id']);
    assertCommon(line);
    assert.equal(line.provider, 'openai');
    assert.equal(line.model, 'rec-real');
    assert.equal(line.backend, `127.0.0.1:${rec.port}`);
    assert.equal(line.prompt_tokens, 3);
    assert.equal(line.completion_tokens, 1);
  });

  test('rejected requests are logged with their status and reason', async () => {
    const cases = [
      { name: 'nokey', opts: { key: null }, body: { model: 'demo', messages: USER }, status: 401, reason: 'missing_api_key' },
      { name: 'badkey', opts: { key: BAD_KEY }, body: { model: 'demo', messages: USER }, status: 401, reason: 'invalid_api_key' },
      { name: 'nomodel', opts: {}, body: { model: 'nope', messages: USER }, status: 404, reason: 'model_not_found' },
      { name: 'forbidden', opts: { key: KEY_LIMITED }, body: { model: 'rec', messages: USER }, status: 403, reason: 'model_not_allowed' },
      { name: 'badopt', opts: {}, body: { model: 'demo', messages: USER, options: { num_ctx: 1 } }, status: 400, reason: 'option_out_of_range' },
    ];
    for (const c of cases) {
      const h = rid(c.name);
      const r = await chat(gw, c.body, { ...c.opts, headers: h });
      assert.equal(r.status, c.status, `${c.name}: ${r.text}`);
      const line = await gw.logFor(h['x-request-id']);
      assertCommon(line);
      assert.equal(line.status, c.status, c.name);
      assert.equal(line.reason, c.reason, c.name);
      assert.equal(line.stream, false);
    }
    const forbidden = gw.logLines().find((l) => l.request_id.startsWith('log-forbidden-'));
    assert.equal(forbidden.tenant, 'beta');
    assert.equal(forbidden.key_name, 'limited');
    assert.equal(forbidden.alias, 'rec');
    const nokey = gw.logLines().find((l) => l.request_id.startsWith('log-nokey-'));
    assert.equal(nokey.key_id, '');
    const badkey = gw.logLines().find((l) => l.request_id.startsWith('log-badkey-'));
    assert.ok(badkey.key_id.includes('***'), `masked: ${badkey.key_id}`);
    assert.equal(badkey.tenant, '', 'an unknown key has no tenant');
  });

  test('GET /v1/models and unknown paths are logged; probes are not', async () => {
    const h1 = rid('models');
    assert.equal((await request(`${gw.url}/v1/models`, { key: KEY, headers: h1 })).status, 200);
    const h2 = rid('nopath');
    assert.equal((await request(`${gw.url}/nowhere`, { headers: h2 })).status, 404);
    const probe = { 'x-request-id': 'log-probe-health' };
    assert.equal((await request(`${gw.url}/health`, { headers: probe })).status, 200);
    assert.equal((await request(`${gw.url}/ready`, { headers: { 'x-request-id': 'log-probe-ready' } })).status, 200);
    const models = await gw.logFor(h1['x-request-id']);
    assert.equal(models.method, 'GET');
    assert.equal(models.path, '/v1/models');
    assert.equal(models.status, 200);
    const nopath = await gw.logFor(h2['x-request-id']);
    assert.equal(nopath.status, 404);
    assert.equal(nopath.reason, 'not_found');
    const lines = gw.logLines();
    assert.ok(!lines.some((l) => l.request_id.startsWith('log-probe-')), 'probes are not logged');
  });

  // Records wait in a bounded queue: a client's long path (and the 404 message that
  // repeats it) is kept to its first 1024 bytes.
  test('a long path is logged cut short, and so is the error that repeats it', async () => {
    const h = rid('longpath');
    const long = `/x${'a'.repeat(8000)}`;
    assert.equal((await request(`${gw.url}${long}`, { headers: h })).status, 404);
    const line = await gw.logFor(h['x-request-id']);
    assert.equal(line.path, `${long.slice(0, 1024)}...`);
    assert.ok(line.error.startsWith('no route for GET /xaaa'), line.error.slice(0, 40));
    assert.equal(line.error.length, 1027);
    assert.ok(line.error.endsWith('...'));
  });
});

describe('the log as a whole', () => {
  test('exactly one line per request, each a JSON object with every field', async () => {
    const lines = await waitFor(
      () => {
        const l = gw.logLines();
        return sent.every((id) => l.some((x) => x.request_id === id)) ? l : null;
      },
      { what: 'every request in the access log' },
    );
    for (const id of sent) {
      assert.equal(lines.filter((l) => l.request_id === id).length, 1, `lines for ${id}`);
    }
    // Nothing else was sent to this gateway, so nothing else is logged.
    assert.equal(lines.length, sent.length, `${lines.length} lines for ${sent.length} requests`);
    for (const l of lines) for (const f of FIELDS) assert.ok(f in l, `field ${f} missing in ${JSON.stringify(l)}`);
    // The raw text: one object per line, newline-terminated.
    const text = gw.logText();
    assert.ok(text.endsWith('\n'));
    for (const raw of text.trimEnd().split('\n')) assert.match(raw, /^\{.*\}$/);
  });

  test('no secret is ever written: client keys, unknown keys, provider credentials', () => {
    const text = gw.logText();
    assert.ok(text.length > 0);
    for (const secret of [KEY, KEY_LIMITED, BAD_KEY, UPSTREAM_SECRET]) {
      assert.ok(!text.includes(secret), `the access log contains the secret ${secret.slice(0, 8)}...`);
      // Not even the part the mask hides.
      assert.ok(!text.includes(secret.slice(-12)), `the access log contains the tail of ${secret.slice(0, 8)}...`);
    }
  });

  test('no secret in the gateway output either (banner, errors)', () => {
    const out = gw.output.stderr + gw.output.stdout;
    assert.ok(out.includes('sluice listening on'));
    for (const secret of [KEY, KEY_LIMITED, UPSTREAM_SECRET]) {
      assert.ok(!out.includes(secret), `the gateway output contains the secret ${secret.slice(0, 8)}...`);
    }
  });
});

describe('client address', () => {
  const send = (g, headers, id) =>
    request(`${g.url}/v1/chat/completions`, {
      method: 'POST',
      key: KEY,
      headers: { ...headers, 'x-request-id': id },
      body: { model: 'demo', messages: USER, max_tokens: 2 },
    });
  const config = (extra) => ({
    instance: 'it-client',
    keys: [{ name: 'test-app', key: KEY, tenant: 'acme', models: ['*'] }],
    models: [{ alias: 'demo', provider: 'simulated', sim: { ttft: '1ms', inter_token: '1ms', jitter: 0 } }],
    ...extra,
  });

  test('from a trusted proxy, X-Forwarded-For names the client in the log and the history', async () => {
    const g = await startGateway(config({ trusted_proxies: ['10.0.0.0/8', '127.0.0.1'] }));
    try {
      // The rightmost address a trusted proxy did not add is the client; what the client
      // wrote further left is not believed.
      assert.equal((await send(g, { 'x-forwarded-for': '198.51.100.9, 203.0.113.7, 10.1.2.3' }, 'xff-1')).status, 200);
      assert.equal((await send(g, {}, 'xff-2')).status, 200);
      assert.equal((await send(g, { 'x-forwarded-for': 'not-an-address' }, 'xff-3')).status, 200);
      assert.equal((await g.logFor('xff-1')).client, '203.0.113.7');
      assert.equal((await g.logFor('xff-2')).client, '127.0.0.1');
      assert.equal((await g.logFor('xff-3')).client, '127.0.0.1');
      const rows = await waitFor(async () => {
        const r = await request(`${g.url}/history?limit=10`, { key: KEY });
        const found = r.json?.data;
        return Array.isArray(found) && found.length >= 3 && found;
      }, { what: 'the history rows' });
      assert.equal(rows.find((r) => r.request_id === 'xff-1')?.client, '203.0.113.7');
      assert.equal(rows.find((r) => r.request_id === 'xff-2')?.client, '127.0.0.1');
    } finally {
      await g.stop();
    }
  });

  test('without trusted proxies the header is ignored', async () => {
    const g = await startGateway(config({}));
    try {
      assert.equal((await send(g, { 'x-forwarded-for': '203.0.113.7' }, 'xff-4')).status, 200);
      assert.equal((await g.logFor('xff-4')).client, '127.0.0.1');
    } finally {
      await g.stop();
    }
  });

  test('a bad network is refused at start, naming it', async () => {
    await assert.rejects(startGateway(config({ trusted_proxies: ['10.0.0.0/33'] })), /trusted_proxies\[0\][^\n]*prefix length \(0 to 32\)/);
    await assert.rejects(startGateway(config({ trusted_proxies: ['lb.internal'] })), /trusted_proxies\[0\][^\n]*not an IP address/);
  });
});
