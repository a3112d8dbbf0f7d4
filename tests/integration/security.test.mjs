// What is exposed where: on the main listener only /health and /ready are public; /metrics
// and /infra (backend addresses, routes, the database's place) need an admin key, unless
// admin.public_status; the admin listener serves them, and nothing else, without a key.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';

import { KEY, rawRequest, startGateway } from './lib.mjs';

const ADMIN = 'sk-admin-9999888877776666';

describe('status pages', () => {
  let gw;
  before(async () => {
    gw = await startGateway({
      keys: [
        { name: 'app', key: KEY, tenant: 'acme', tier: 'standard' },
        { name: 'ops', key: ADMIN, tenant: 'ops', tier: 'standard', admin: true },
      ],
      models: [{ alias: 'demo', provider: 'simulated', sim: { ttft: '1ms', inter_token: '1ms', jitter: 0 } }],
    });
  });
  after(async () => {
    if (gw) await gw.stop();
  });

  for (const path of ['/metrics', '/infra']) {
    test(`${path} on the main listener: 401 without a key, 403 with a plain key, 200 with an admin key`, async () => {
      const none = await rawRequest({ port: gw.port, path });
      assert.equal(none.status, 401, none.body);
      assert.doesNotMatch(none.body, /demo|simulated|sluice_/);
      const plain = await rawRequest({ port: gw.port, path, headers: { authorization: `Bearer ${KEY}` } });
      assert.equal(plain.status, 403, plain.body);
      assert.equal(JSON.parse(plain.body).error.code, 'forbidden');
      const admin = await rawRequest({ port: gw.port, path, headers: { authorization: `Bearer ${ADMIN}` } });
      assert.equal(admin.status, 200, admin.body);
    });

    test(`${path} on the admin listener needs no key`, async () => {
      const r = await rawRequest({ port: gw.adminPort, path });
      assert.equal(r.status, 200, r.body);
    });
  }

  test('/health and /ready stay public on both listeners', async () => {
    for (const port of [gw.port, gw.adminPort]) {
      for (const path of ['/health', '/ready']) {
        const r = await rawRequest({ port, path });
        assert.equal(r.status, 200, `${path} on ${port}: ${r.body}`);
      }
    }
  });

  test('the admin listener serves nothing else', async () => {
    const r = await rawRequest({
      port: gw.adminPort,
      method: 'POST',
      path: '/v1/chat/completions',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'demo', messages: [{ role: 'user', content: 'x' }] }),
    });
    assert.equal(r.status, 404, r.body);
  });

  test('a refused status request is in the access log, without the secret', async () => {
    await rawRequest({ port: gw.port, path: '/infra', headers: { authorization: `Bearer ${KEY}`, 'x-request-id': 'infra-denied' } });
    const line = await gw.logFor('infra-denied');
    assert.equal(line.status, 403);
    assert.doesNotMatch(gw.logText(), new RegExp(KEY));
  });
});

describe('admin.public_status', () => {
  test('makes /metrics and /infra public on the main listener', async () => {
    const gw = await startGateway({
      admin: { public_status: true },
      keys: [{ name: 'app', key: KEY, tenant: 'acme', tier: 'standard' }],
      models: [{ alias: 'demo', provider: 'simulated' }],
    });
    try {
      assert.equal(gw.adminPort, 0);
      for (const path of ['/metrics', '/infra']) {
        const r = await rawRequest({ port: gw.port, path });
        assert.equal(r.status, 200, `${path}: ${r.body}`);
      }
    } finally {
      await gw.stop();
    }
  });
});

describe('a port already served', () => {
  test('is refused at start, and shared only with --takeover', async () => {
    const first = await startGateway({ admin: null, keys: [{ name: 'app', key: KEY, tenant: 'acme' }], models: [{ alias: 'demo', provider: 'simulated' }] });
    try {
      const config = { admin: null, listen: `127.0.0.1:${first.port}`, keys: [{ name: 'app', key: KEY, tenant: 'acme' }], models: [{ alias: 'demo', provider: 'simulated' }] };
      await assert.rejects(startGateway(config), /already served by another process[^]*--takeover/);
      const second = await startGateway(config, { args: ['--takeover'] });
      try {
        assert.equal(second.port, first.port);
        const r = await rawRequest({ port: first.port, path: '/health' });
        assert.equal(r.status, 200);
      } finally {
        await second.stop();
      }
    } finally {
      await first.stop();
    }
  });
});

describe('fields that bill or store on the operator account', () => {
  test('service_tier and store are refused unless the route allows them', async () => {
    const gw = await startGateway({
      keys: [{ name: 'app', key: KEY, tenant: 'acme' }],
      models: [
        { alias: 'plain', provider: 'simulated' },
        { alias: 'billed', provider: 'simulated', allow_params: ['service_tier', 'store'] },
      ],
    });
    try {
      const ask = (model, extra) =>
        rawRequest({
          port: gw.port,
          method: 'POST',
          path: '/v1/chat/completions',
          headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
          body: JSON.stringify({ model, messages: [{ role: 'user', content: 'x' }], max_tokens: 2, ...extra }),
        });
      for (const extra of [{ service_tier: 'priority' }, { store: true }]) {
        const refused = await ask('plain', extra);
        assert.equal(refused.status, 400, refused.body);
        const err = JSON.parse(refused.body).error;
        assert.equal(err.code, 'option_not_allowed');
        assert.equal(err.param, Object.keys(extra)[0]);
        const allowed = await ask('billed', extra);
        assert.equal(allowed.status, 200, allowed.body);
      }
      assert.equal((await ask('plain', { store: null })).status, 200);
    } finally {
      await gw.stop();
    }
  });
});
