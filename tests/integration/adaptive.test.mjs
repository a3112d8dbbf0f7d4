// Adaptive concurrency (docs/routing.md): a backend's in-flight limit follows its time to
// first token. The simulator's model server has 2 "GPU slots": beyond them requests queue
// inside it and their TTFT grows, so the gateway lowers the backend's limit (requests wait
// in the gate instead, all still answered); under a load it serves fast, the limit grows
// back one by one.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { KEY, chat, metricValue, rawRequest, startGateway, waitFor } from './lib.mjs';

const config = {
  keys: [{ name: 'app', key: KEY, tenant: 'acme' }],
  models: [
    {
      alias: 'adaptive',
      provider: 'simulated',
      backend_max_in_flight: 16,
      adaptive: { target_ttft: '250ms', min: 2, interval: '300ms' },
      sim: { ttft: '40ms', inter_token: '5ms', jitter: 0, max_in_flight: 2 },
    },
  ],
  concurrency: { queue_size: 100, max_wait: { standard: '30s' } },
};

async function backend(gw) {
  const infra = JSON.parse((await rawRequest({ port: gw.adminPort, path: '/infra' })).body);
  return infra.routing.backends.find((b) => b.name === 'simulated:adaptive');
}

// `clients` loops of requests until `ms` passed (or flag.stop); every status.
async function load(gw, clients, ms, flag = { stop: false }) {
  const statuses = [];
  const end = Date.now() + ms;
  await Promise.all(
    Array.from({ length: clients }, async () => {
      while (Date.now() < end && !flag.stop) {
        const r = await chat(gw, { model: 'adaptive', messages: [{ role: 'user', content: 'hi' }], max_tokens: 10 });
        statuses.push(r.status);
      }
    }),
  );
  return statuses;
}

describe('adaptive concurrency', () => {
  let gw;
  before(async () => {
    gw = await startGateway(config);
  });
  after(async () => {
    await gw?.stop();
  });

  test('the limit falls while the TTFT is over target, every request is still answered, and it grows back', async () => {
    const start = await backend(gw);
    assert.equal(start.adaptive.limit, 16, 'starts at its max_in_flight');

    // Heavy until the limit is down to 3 or less: above that, the simulator's 2 slots queue
    // enough of even a load at the limit that it could not grow back (how fast it falls
    // depends on how many TTFTs each period sees, that is, on the machine).
    const hard = { stop: false };
    const heavyRun = load(gw, 16, 25_000, hard);
    try {
      await waitFor(async () => (await backend(gw)).adaptive.limit <= 3, {
        timeout: 25_000,
        interval: 100,
        what: 'the limit to fall to 3',
      });
    } finally {
      hard.stop = true;
    }
    const heavy = await heavyRun;
    assert.ok(heavy.length > 16);
    assert.deepEqual([...new Set(heavy)], [200], 'nothing refused: the rest waited in the gate');
    const low = await backend(gw);
    assert.ok(low.adaptive.limit < 16, `lowered: ${JSON.stringify(low.adaptive)}`);
    assert.ok(low.adaptive.decreases >= 1);
    assert.ok(low.adaptive.p90_ttft_ms > 0);
    const m = await gw.metrics();
    assert.equal(metricValue(m, 'sluice_backend_adaptive_limit', { backend: 'simulated:adaptive' }), low.adaptive.limit);
    assert.ok(metricValue(m, 'sluice_backend_adaptive_changes_total', { backend: 'simulated:adaptive', direction: 'down' }) >= 1);

    // A load the server takes fast (its 2 slots) at the limit: the limit grows back.
    const before = low.adaptive.limit;
    const flag = { stop: false };
    const light = load(gw, Math.max(before, 2), 20_000, flag);
    try {
      await waitFor(async () => (await backend(gw)).adaptive.limit > before, {
        timeout: 20_000,
        interval: 100,
        what: 'the limit to grow back',
      });
    } finally {
      flag.stop = true;
    }
    assert.deepEqual([...new Set(await light)], [200]);
    assert.ok((await backend(gw)).adaptive.increases >= 1);
  });
});
