// Keys managed at runtime (docs/admin.md): /admin/keys on the key store in the history's
// database. A created key works at once on its instance and within key_store.poll on every
// other instance sharing the database; disabled, expired, rotated (after its grace) and
// deleted keys are refused; the file's keys are read-only; the database holds digests,
// never a secret; while the database is down the keys in force keep working.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { KEY, chat, rawRequest, request, startGateway, startPostgres, startRedis, USER, waitFor } from './lib.mjs';

const ADMIN = 'sk-admin-0000000000000000';
const SECRET = 'fleet-hmac-key-0123456789';
const ask = { model: 'demo', messages: USER, max_tokens: 1 };

function config(extra = {}) {
  return {
    keys: [
      { name: 'admin', key: ADMIN, tenant: 'ops', admin: true },
      { name: 'app', key: KEY, tenant: 'acme' },
    ],
    key_store: { enabled: true, secret: SECRET, poll: '200ms' },
    models: [
      { alias: 'demo', provider: 'simulated', sim: { ttft: '1ms', inter_token: '1ms', jitter: 0 } },
      { alias: 'other', provider: 'simulated', sim: { ttft: '1ms', inter_token: '1ms', jitter: 0 } },
      { alias: 'slow', provider: 'simulated', sim: { ttft: '3s', inter_token: '1ms', jitter: 0 } },
    ],
    history: { flush_interval: '100ms' },
    ...extra,
  };
}

const admin = (gw, method, p = '', body, key = ADMIN) =>
  request(`${gw.url}/admin/keys${p}`, { method, key, body });

describe('the key store on one instance (SQLite)', () => {
  let gw;
  before(async () => {
    gw = await startGateway(config());
  });
  after(async () => {
    await gw?.stop();
  });

  test('a created key works at once; its secret is shown once and the database keeps only its digest', async () => {
    const r = await admin(gw, 'POST', '', { name: 'team-a', tenant: 'acme', tier: 'gold', models: ['demo'] });
    assert.equal(r.status, 201, r.text);
    const secret = r.json.secret;
    assert.match(secret, /^sk-[a-z2-7]{52}$/);
    assert.equal(r.json.name, 'team-a');
    assert.equal(r.json.source, 'store');
    assert.equal(r.json.created_by, 'admin');
    assert.equal(r.json.key, `sk-***${secret.slice(-4)}`);
    const c = await chat(gw, ask, { key: secret });
    assert.equal(c.status, 200, c.text);
    const line = await gw.logFor(c.headers.get('x-request-id'));
    assert.equal(line.key_name, 'team-a');
    assert.equal(line.tier, 'gold');
    assert.equal((await chat(gw, { ...ask, model: 'other' }, { key: secret })).status, 403, 'only its models');

    // Listed, without the secret; the file's keys read-only.
    // When it was last used: reported by the instance at its next poll (200 ms here).
    const used = await waitFor(async () => {
      const k = (await admin(gw, 'GET', '/team-a')).json;
      return k.last_used_ms > 0 && k;
    }, { what: "team-a's last_used_ms" });
    assert.ok(Math.abs(used.last_used_ms - Date.now()) < 60e3, `last_used_ms ${used.last_used_ms}`);
    assert.equal(used.revision, undefined);
    const list = await admin(gw, 'GET');
    assert.equal(list.status, 200);
    assert.ok(!list.text.includes(secret));
    const names = list.json.keys.map((k) => `${k.name}:${k.source}`);
    assert.deepEqual(names.sort(), ['admin:config', 'app:config', 'team-a:store']);
    assert.equal(list.json.keys.find((k) => k.name === 'app').read_only, true);
    assert.equal((await admin(gw, 'GET', '/team-a')).json.secret, undefined);

    // The database: the digest, never the secret (the file and its WAL, read raw).
    const db = path.join(gw.dir, 'history.db');
    const raw = [db, `${db}-wal`].filter((f) => fs.existsSync(f)).map((f) => fs.readFileSync(f).toString('latin1')).join('');
    assert.ok(!raw.includes(secret), 'the secret is not in the database files');
    const digest = execFileSync('sqlite3', [db, "SELECT digest FROM api_keys WHERE name = 'team-a'"]).toString().trim();
    assert.match(digest, /^[0-9a-f]{64}$/);
  });

  test('bad input is refused with its reason and changes nothing', async () => {
    const cases = [
      [{ tenant: 'x' }, 400, 'name'],
      [{ name: 'has space' }, 400, 'name'],
      [{ name: 'n1', models: ['nope'] }, 400, 'models'],
      [{ name: 'n1', models: [] }, 400, 'models'],
      [{ name: 'n1', role: 'root' }, 400, 'role'],
      [{ name: 'n1', max_in_flight: -1 }, 400, 'max_in_flight'],
      [{ name: 'n1', expires_in: 'soon' }, 400, 'expires_in'],
      [{ name: 'n1', secret: 'mine' }, 400, 'secret'],
      [{ name: 'team/a' }, 400, 'name'],
      [{ name: 'n1', expires_in: '0d' }, 400, 'expires_in'],
      [{ name: 'app' }, 409, 'name'],
      [{ name: 'team-a' }, 409, 'name'],
    ];
    for (const [body, status, param] of cases) {
      const r = await admin(gw, 'POST', '', body);
      assert.equal(r.status, status, `${JSON.stringify(body)}: ${r.text}`);
      assert.equal(r.json.error.param, param, JSON.stringify(body));
    }
    const junk = await request(`${gw.url}/admin/keys`, { method: 'POST', key: ADMIN, body: '{"name":' });
    assert.equal(junk.status, 400);
    assert.equal(junk.json.error.code, 'invalid_json');
    const names = (await admin(gw, 'GET')).json.keys.map((k) => k.name);
    assert.ok(!names.includes('n1'), 'nothing was created');
    assert.equal((await admin(gw, 'PATCH', '/app', { tier: 'x' })).status, 403, "the file's keys are read-only");
    assert.equal((await admin(gw, 'DELETE', '/nobody')).status, 404);
    assert.equal((await admin(gw, 'POST', '/team-a/explode')).status, 404);
    // The path is read strictly: nothing is made or dropped by a stray slash.
    assert.equal((await admin(gw, 'POST', '//x', { name: 'slash' })).status, 404);
    assert.equal((await admin(gw, 'DELETE', '/team-a/')).status, 404);
    assert.equal((await admin(gw, 'POST', '/team-a/disable/now')).status, 404);
    assert.equal((await admin(gw, 'OPTIONS', '/app')).status, 405);
    assert.equal((await admin(gw, 'GET', '/team-a')).status, 200, 'team-a is still there');
    assert.ok(!(await admin(gw, 'GET')).json.keys.some((k) => k.name === 'slash'));
  });

  test('expires_in in days; a second rotation within the first one\'s grace is refused', async () => {
    const { json: k } = await admin(gw, 'POST', '', { name: 'days', expires_in: '90d' });
    assert.ok(Math.abs(k.expires_ms - (Date.now() + 90 * 86400e3)) < 60e3, JSON.stringify(k));
    const r1 = await admin(gw, 'POST', '/days/rotate', { grace: '7d' });
    assert.equal(r1.status, 200, r1.text);
    const again = await admin(gw, 'POST', '/days/rotate', { grace: '1h' });
    assert.equal(again.status, 409, 'the first secret keeps its grace');
    assert.equal(again.json.error.param, 'grace');
    assert.equal((await chat(gw, ask, { key: k.secret })).status, 200, 'the original secret, within its grace');
    const now = await admin(gw, 'POST', '/days/rotate', { grace: '0s' });
    assert.equal(now.status, 200, 'without grace: at once, by the operator\'s choice');
    assert.equal((await chat(gw, ask, { key: k.secret })).status, 401);
    assert.equal((await chat(gw, ask, { key: r1.json.secret })).status, 401);
    assert.equal((await chat(gw, ask, { key: now.json.secret })).status, 200);
  });

  test("a stored key's max_in_flight holds its requests in the gate, and a raise lets the waiting ones in", async () => {
    const { json: k } = await admin(gw, 'POST', '', { name: 'narrow', max_in_flight: 1, models: ['slow'] });
    const slow = { model: 'slow', messages: USER, max_tokens: 1 };
    const gate = async () => (await gw.infra()).concurrency_gate;
    const all = [0, 1, 2].map(() => chat(gw, slow, { key: k.secret }));
    await waitFor(async () => {
      const g = await gate();
      return g.in_flight === 1 && g.queued.standard === 2;
    }, { what: 'one request in flight, two waiting for the key slot' });
    const raised = await admin(gw, 'PATCH', '/narrow', { max_in_flight: 3 });
    assert.equal(raised.status, 200, raised.text);
    // (The slow model takes 3 s: the two waiting ones are let in by the raise, not by the
    // first one ending.)
    await waitFor(async () => {
      const g = await gate();
      return g.in_flight === 3 && g.queued.standard === 0;
    }, { timeout: 2500, what: 'the waiting requests let in by the raise' });
    for (const r of await Promise.all(all)) assert.equal(r.status, 200);
  });

  test('a stored key shadowed by a file key of the same name is listed as such and can be deleted', async () => {
    const { json: k } = await admin(gw, 'POST', '', { name: 'twin' });
    const good = fs.readFileSync(gw.configPath, 'utf8');
    fs.writeFileSync(gw.configPath, good.replace('keys:\n', 'keys:\n  - {name: twin, key: sk-twin-file-000000000000}\n'));
    assert.equal((await request(`${gw.url}/admin/reload`, { method: 'POST', key: ADMIN })).status, 200);
    assert.equal((await chat(gw, ask, { key: k.secret })).status, 401, 'the file key wins');
    const listed = (await admin(gw, 'GET')).json.keys.filter((x) => x.name === 'twin');
    assert.deepEqual(listed.map((x) => [x.source, x.shadowed_by_file ?? false]).sort(), [['config', false], ['store', true]]);
    assert.equal((await admin(gw, 'DELETE', '/twin')).status, 200, 'the stored one');
    fs.writeFileSync(gw.configPath, good);
    assert.equal((await request(`${gw.url}/admin/reload`, { method: 'POST', key: ADMIN })).status, 200);
    assert.equal((await chat(gw, ask, { key: k.secret })).status, 401, 'deleted: it does not come back');
  });

  test('disable, enable, change, expire, rotate with a grace, delete', async () => {
    const { json: k } = await admin(gw, 'POST', '', { name: 'life' });
    const s = k.secret;
    assert.equal((await chat(gw, ask, { key: s })).status, 200);
    assert.equal((await admin(gw, 'POST', '/life/disable')).json.enabled, false);
    assert.equal((await chat(gw, ask, { key: s })).status, 401, 'disabled');
    assert.equal((await admin(gw, 'POST', '/life/enable')).json.enabled, true);
    assert.equal((await chat(gw, ask, { key: s })).status, 200, 'enabled again');
    const p = await admin(gw, 'PATCH', '/life', { models: ['other'], tier: 'silver' });
    assert.equal(p.status, 200, p.text);
    assert.equal((await chat(gw, ask, { key: s })).status, 403, 'its models changed');
    assert.equal((await chat(gw, { ...ask, model: 'other' }, { key: s })).status, 200);

    // Rotation: the old secret works for its grace, then not.
    const rot = await admin(gw, 'POST', '/life/rotate', { grace: '1500ms' });
    assert.equal(rot.status, 200, rot.text);
    const s2 = rot.json.secret;
    assert.notEqual(s2, s);
    assert.ok(rot.json.old_key_valid_until_ms > Date.now());
    const other = { ...ask, model: 'other' };
    assert.equal((await chat(gw, other, { key: s2 })).status, 200, 'the new secret');
    assert.equal((await chat(gw, other, { key: s })).status, 200, 'the old one within its grace');
    await waitFor(async () => (await chat(gw, other, { key: s })).status === 401, { timeout: 5000, what: 'the grace to end' });
    assert.equal((await chat(gw, other, { key: s2 })).status, 200);
    const now = await admin(gw, 'POST', '/life/rotate', { grace: '0s' });
    assert.equal((await chat(gw, other, { key: s2 })).status, 401, 'no grace: the old secret at once');
    assert.equal((await chat(gw, other, { key: now.json.secret })).status, 200);

    // Expiry.
    const { json: e } = await admin(gw, 'POST', '', { name: 'brief', expires_in: '1s' });
    assert.equal((await chat(gw, ask, { key: e.secret })).status, 200);
    await waitFor(async () => (await chat(gw, ask, { key: e.secret })).status === 401, { timeout: 5000, what: 'the expiry' });

    assert.equal((await admin(gw, 'DELETE', '/life')).status, 200);
    assert.equal((await chat(gw, other, { key: now.json.secret })).status, 401, 'deleted');
    assert.equal((await admin(gw, 'GET', '/life')).status, 404);
  });

  test('roles: a viewer reads and changes nothing; a user key neither; the admin listener is an admin', async () => {
    const { json: v } = await admin(gw, 'POST', '', { name: 'watcher', role: 'viewer' });
    const { json: u } = await admin(gw, 'POST', '', { name: 'plain' });
    assert.equal((await admin(gw, 'GET', '', undefined, v.secret)).status, 200);
    const denied = await admin(gw, 'POST', '', { name: 'x2' }, v.secret);
    assert.equal(denied.status, 403);
    // A viewer reads what an admin reads: the status pages, every key's usage.
    assert.equal((await request(`${gw.url}/infra`, { key: v.secret })).status, 200);
    const usage = await request(`${gw.url}/history/stats?group_by=key&window=1h`, { key: v.secret });
    assert.equal(usage.status, 200, usage.text);
    assert.equal((await request(`${gw.url}/admin/reload`, { method: 'POST', key: v.secret })).status, 403);
    assert.equal((await request(`${gw.url}/infra`, { key: u.secret })).status, 403);
    assert.equal((await admin(gw, 'GET', '', undefined, u.secret)).status, 403);
    assert.equal((await admin(gw, 'GET', '', undefined, '')).status, 401);
    const viaAdmin = await rawRequest({
      port: gw.adminPort,
      method: 'POST',
      path: '/admin/keys',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'from-listener' }),
    });
    assert.equal(viaAdmin.status, 201, viaAdmin.body);
    assert.equal(JSON.parse(viaAdmin.body).created_by, 'admin-listener');
    // A change is a record naming the admin key; a read is not.
    await waitFor(() => gw.logLines().some((l) => l.path === '/admin/keys' && l.method === 'POST' && l.key_name === 'admin'), {
      what: 'the access-log line of a change',
    });
  });
});

describe('the key store across instances (PostgreSQL)', () => {
  let pg, a, b;
  before(async () => {
    pg = await startPostgres();
    const cfg = config({ history: { url: pg.url, flush_interval: '100ms', retry_interval: '200ms' } });
    [a, b] = await Promise.all([startGateway({ ...cfg, instance: 'gw-a' }), startGateway({ ...cfg, instance: 'gw-b' })]);
  });
  after(async () => {
    await Promise.all([a?.stop(), b?.stop()]);
    await pg?.stop();
  });

  test('a key created on one instance works on the other within 2 s, and a disabled one is refused there as fast', async () => {
    const r = await admin(a, 'POST', '', { name: 'fleet' });
    assert.equal(r.status, 201, r.text);
    const t0 = Date.now();
    await waitFor(async () => (await chat(b, ask, { key: r.json.secret })).status === 200, {
      timeout: 2000,
      interval: 20,
      what: 'the new key on the other instance',
    });
    const seen = Date.now() - t0;
    assert.equal((await admin(b, 'POST', '/fleet/disable')).status, 200);
    await waitFor(async () => (await chat(a, ask, { key: r.json.secret })).status === 401, {
      timeout: 2000,
      interval: 20,
      what: 'the disabled key refused on the first instance',
    });
    const rows = await pg.query('SELECT name, digest, masked FROM api_keys');
    assert.ok(!rows.includes(r.json.secret), 'no secret in the table');
    assert.match(rows, /^fleet\|[0-9a-f]{64}\|sk-\*\*\*/m);
    console.log(`# the new key served by the other instance after ${seen} ms`);
  });

  test('the database down: the keys in force keep working, changes answer 503, and it recovers by itself', async () => {
    const { json: k } = await admin(a, 'POST', '', { name: 'steady' });
    await waitFor(async () => (await chat(b, ask, { key: k.secret })).status === 200, { what: 'the key on b' });
    await pg.stop();
    for (const gw of [a, b]) assert.equal((await chat(gw, ask, { key: k.secret })).status, 200, 'served from the set in force');
    const down = await admin(a, 'POST', '', { name: 'while-down' });
    assert.equal(down.status, 503, down.text);
    assert.equal(down.json.error.code, 'store_unavailable');
    const st = await a.infra();
    assert.equal(st.keys.store.up, false);
    await pg.start();
    const later = await waitFor(
      async () => {
        const r = await admin(a, 'POST', '', { name: 'after' });
        return r.status === 201 && r;
      },
      { timeout: 10000, interval: 200, what: 'the store back' },
    );
    await waitFor(async () => (await chat(b, ask, { key: later.json.secret })).status === 200, { what: 'the key on b' });
    assert.equal((await a.infra()).keys.store.up, true);
  });
});

describe('the key store with Redis pub/sub (key_store.notify: redis)', () => {
  let pg, redis, a, b;
  before(async () => {
    [pg, redis] = await Promise.all([startPostgres(), startRedis()]);
    // A poll of a minute: a change seen within seconds came by Redis.
    const cfg = config({
      key_store: { enabled: true, secret: SECRET, poll: '60s', notify: 'redis' },
      redis: { url: redis.url },
      history: { url: pg.url, flush_interval: '100ms' },
    });
    [a, b] = await Promise.all([startGateway({ ...cfg, instance: 'gw-a' }), startGateway({ ...cfg, instance: 'gw-b' })]);
  });
  after(async () => {
    await Promise.all([a?.stop(), b?.stop()]);
    await Promise.all([pg?.stop(), redis?.stop()]);
  });

  test('a change made on one instance is in force on the other at once, not at the next poll', async () => {
    const r = await admin(a, 'POST', '', { name: 'notified' });
    assert.equal(r.status, 201, r.text);
    await waitFor(async () => (await chat(b, ask, { key: r.json.secret })).status === 200, {
      timeout: 5000,
      interval: 20,
      what: 'the new key on the other instance (by Redis)',
    });
    assert.equal((await admin(b, 'POST', '/notified/disable')).status, 200);
    await waitFor(async () => (await chat(a, ask, { key: r.json.secret })).status === 401, {
      timeout: 5000,
      interval: 20,
      what: 'the disabled key refused on the first instance (by Redis)',
    });
  });
});
