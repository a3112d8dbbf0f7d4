// Keys reloaded at runtime (docs/routing.md, "Configuration reload"): SIGHUP and
// POST /admin/reload read the file's keys again with its routes, atomically. A removed key
// is refused at once, a new one works, a changed tier changes the limits that apply, a
// request already running with a removed key finishes, and a broken file changes nothing.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';

import { KEY, chat, rawRequest, request, sse, startGateway, toYaml, USER, waitFor } from './lib.mjs';

const ADMIN = 'sk-admin-0000000000000000';
const OLD = 'sk-old-11111111111111111';
const NEW = 'sk-new-22222222222222222';

function config(keys) {
  return {
    keys: [
      { name: 'admin', key: ADMIN, tenant: 'ops', admin: true },
      { name: 'app', key: KEY, tenant: 'acme', tier: 'standard' },
      ...keys,
    ],
    models: [{ alias: 'demo', provider: 'simulated', sim: { ttft: '5ms', inter_token: '20ms', jitter: 0 } }],
    // Tier "free": one request a minute per key.
    rate_limits: { backend: 'memory', requests: [{ scope: 'key', tier: 'free', limit: 1, window: '1m' }] },
  };
}

describe('keys reloaded from the file', () => {
  let gw;
  before(async () => {
    gw = await startGateway(config([{ name: 'old', key: OLD, tenant: 'acme' }]));
  });
  after(async () => {
    await gw?.stop();
  });

  // Writes the file with `keys` (beside admin and app), as the running gateway's own config.
  function rewrite(keys) {
    const now = fs.readFileSync(gw.configPath, 'utf8');
    const head = now.slice(0, now.indexOf('keys:'));
    const fresh = toYaml(config(keys));
    fs.writeFileSync(gw.configPath, head + fresh);
  }

  const reload = (key = ADMIN, method = 'POST') => request(`${gw.url}/admin/reload`, { method, key });

  test('POST /admin/reload: a removed key is refused at once, a new one works, a running request finishes', async () => {
    assert.equal((await chat(gw, { model: 'demo', messages: USER, max_tokens: 1 }, { key: OLD })).status, 200);
    assert.equal((await chat(gw, { model: 'demo', messages: USER, max_tokens: 1 }, { key: NEW })).status, 401);
    // A stream of the old key that runs across the reload (40 tokens, 20 ms apart).
    const long = sse(`${gw.url}/v1/chat/completions`, { model: 'demo', messages: USER, max_tokens: 40, stream: true }, { key: OLD });
    await new Promise((r) => setTimeout(r, 150));
    rewrite([{ name: 'new', key: NEW, tenant: 'acme' }]);
    const r = await reload();
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.reloaded, true);
    assert.match(r.json.message, /^3 keys, 1 routes/);
    const refused = await chat(gw, { model: 'demo', messages: USER, max_tokens: 1 }, { key: OLD });
    assert.equal(refused.status, 401, 'the removed key, right after the reload answered');
    assert.equal(refused.json.error.code, 'invalid_api_key');
    assert.equal((await chat(gw, { model: 'demo', messages: USER, max_tokens: 1 }, { key: NEW })).status, 200);
    const s = await long;
    assert.equal(s.status, 200);
    assert.ok(s.done, 'the stream authenticated before the reload ends whole');
    const line = await waitFor(() => gw.logLines().find((l) => l.key_name === 'new'), { what: "the new key's line" });
    assert.equal(line.key_id, 'sk-new-***2222');
  });

  test("a key's new tier brings its tier's limits; SIGHUP reloads keys too", async () => {
    // app is "standard": no limit.
    for (let i = 0; i < 3; i++) assert.equal((await chat(gw, { model: 'demo', messages: USER, max_tokens: 1 })).status, 200);
    const now = fs.readFileSync(gw.configPath, 'utf8');
    fs.writeFileSync(gw.configPath, now.replace(/tier: "?standard"?/, 'tier: free'));
    const before = (await gw.infra()).routing.reloads.ok;
    gw.child.kill('SIGHUP');
    await waitFor(async () => (await gw.infra()).routing.reloads.ok > before, { what: 'the SIGHUP reload' });
    const first = await chat(gw, { model: 'demo', messages: USER, max_tokens: 1 });
    assert.equal(first.status, 200, first.text);
    const second = await chat(gw, { model: 'demo', messages: USER, max_tokens: 1 });
    assert.equal(second.status, 429, 'one request a minute in tier free');
    const line = await gw.logFor(second.headers.get('x-request-id'));
    assert.equal(line.tier, 'free');
  });

  test('a broken file is refused with 422 naming its errors, and nothing changes', async () => {
    const good = fs.readFileSync(gw.configPath, 'utf8');
    fs.writeFileSync(gw.configPath, good.replace(NEW, 'short'));
    const r = await reload();
    assert.equal(r.status, 422, r.text);
    assert.equal(r.json.error.code, 'reload_refused');
    assert.match(r.json.error.message, /keys\[\d\]/);
    assert.equal((await chat(gw, { model: 'demo', messages: USER, max_tokens: 1 }, { key: NEW })).status, 200, 'the running keys stay');
    fs.writeFileSync(gw.configPath, good);
  });

  test('only an admin key may reload, with POST; the admin listener needs no key', async () => {
    const notAdmin = await reload(NEW);
    assert.equal(notAdmin.status, 403);
    assert.equal((await reload(ADMIN, 'GET')).status, 405);
    assert.equal((await request(`${gw.url}/admin/reload`, { method: 'POST' })).status, 401);
    const viaAdmin = await rawRequest({ port: gw.adminPort, method: 'POST', path: '/admin/reload' });
    assert.equal(viaAdmin.status, 200, viaAdmin.body);
  });
});
