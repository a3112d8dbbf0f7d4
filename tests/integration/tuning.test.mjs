// Model-server tuning through the gateway (docs/tuning.md): the simulator loads a model
// again, as Ollama does, when num_ctx, num_gpu or num_batch change; a route's load_options
// policy keeps one client's change from stalling the others. What is checked here is what
// the simulator counts (its loads, the options it is loaded with) and which backend served
// each request, not times.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';

import { KEY, REPO, chat, keysAll, rawRequest, startGateway, startSim, tempDir } from './lib.mjs';

const LOAD = { 'load-time': '600ms', ttft: '5ms', 'inter-token': '1ms' };
let a;
let b;
let c;
let gw;

const ask = (model, options, extra = {}) =>
  chat(gw, { model, messages: [{ role: 'user', content: 'Hi.' }], max_tokens: 4, ...(options ? { options } : {}), ...extra });

async function ps(sim) {
  const r = await rawRequest({ port: sim.port, path: '/api/ps' });
  assert.equal(r.status, 200, r.body);
  return Object.fromEntries(JSON.parse(r.body).models.map((m) => [m.name, m]));
}

before(async () => {
  [a, b, c] = await Promise.all([startSim(LOAD), startSim(LOAD), startSim({ 'load-time': '300ms', ttft: '5ms', 'inter-token': '8ms' })]);
  const ollama = (alias, model, sims, load_options) => ({
    alias,
    backends: sims.map((s, i) => ({ name: `${alias}-${i}`, provider: 'ollama', base_url: s.url, model })),
    ...(load_options ? { load_options } : {}),
  });
  gw = await startGateway({
    keys: keysAll(),
    models: [
      ollama('open', 'm-open', [a]),
      ollama('pinned', 'm-pin', [a], { policy: 'pin', values: { num_ctx: 4096 } }),
      ollama('listed', 'm-allow', [a], { policy: 'allow', values: { num_ctx: 4096 }, allowed: { num_ctx: [8192], num_gpu: [-1, 0] } }),
      ollama('steered', 'm-steer', [a, b], { policy: 'steer' }),
      ollama('sweep', 'm-sweep', [c]),
      // A route without a policy whose fallback has one: what reaches the fallback's backends
      // follows the fallback's policy.
      { alias: 'gone', provider: 'ollama', base_url: 'http://127.0.0.1:1', model: 'm-pin', retries: 1, fallbacks: ['pinned'] },
      // Steer over an Ollama backend and one of another wire: only the Ollama one is steered.
      {
        alias: 'mixed',
        backends: [{ name: 'mixed-ollama', provider: 'ollama', base_url: b.url, model: 'm-mixed' },
          { name: 'mixed-openai', provider: 'openai', base_url: `${b.url}/v1`, model: 'm-mixed' }],
        load_options: { policy: 'steer' },
      },
    ],
  });
});
after(() => Promise.all([gw?.stop(), a?.stop(), b?.stop(), c?.stop()]));

describe('load options through the gateway', () => {
  test('no policy: one client\'s num_ctx reloads the model for everyone, and the gateway counts the reload', async () => {
    // Streamed: a first token's time is what tells a load (a whole answer's says nothing).
    const stream = { stream: true };
    const loads0 = (await a.stats()).loads;
    for (let i = 0; i < 3; i++) assert.equal((await ask('open', undefined, stream)).status, 200);
    assert.equal((await a.stats()).loads, loads0 + 1, 'loaded once for the default options');
    assert.equal((await ask('open', { num_ctx: 8192 }, stream)).status, 200);
    assert.equal((await ask('open', undefined, stream)).status, 200);
    assert.equal((await a.stats()).loads, loads0 + 3, 'loaded again for 8192, and again for the others');
    const backend = { backend: 'open-0' };
    assert.equal(await gw.metric('sluice_backend_load_option_changes_total', backend), 2);
    // Both changes waited a whole load (600 ms) against a usual first token of a few ms.
    assert.equal(await gw.metric('sluice_backend_model_reloads_total', backend), 2);
    const infra = await gw.infra();
    const be = infra.routing.backends.find((x) => x.name === 'open-0');
    assert.deepEqual(be.load_options, { changes: 2, reloads_seen: 2 });
  });

  test('pin: the route\'s values replace the client\'s, so nothing a client sends reloads the model', async () => {
    const loads0 = (await a.stats()).loads;
    for (const options of [undefined, { num_ctx: 8192 }, { num_ctx: 2048, num_batch: 64 }, { num_gpu: 0 }]) {
      assert.equal((await ask('pinned', options)).status, 200);
    }
    // keep_alive 0 would unload the model for everyone: under a policy it is dropped.
    assert.equal((await ask('pinned', undefined, { keep_alive: 0 })).status, 200);
    assert.equal((await ask('pinned')).status, 200);
    assert.equal((await a.stats()).loads, loads0 + 1, 'one load, for the pinned values');
    const m = (await ps(a))['m-pin'];
    assert.deepEqual(m.options, { num_ctx: 4096, num_gpu: -1, num_batch: 512 });
    // Through another route that falls back to this one: the fallback's pin applies.
    const via = await ask('gone', { num_ctx: 8192 });
    assert.equal(via.status, 200, via.text);
    assert.equal((await gw.logFor(via.headers.get('x-request-id'))).served_by, 'pinned');
    assert.equal((await ps(a))['m-pin'].options.num_ctx, 4096);
    assert.equal((await a.stats()).loads, loads0 + 1);
  });

  test('allow: listed values pass, others are refused naming what is allowed; num_gpu -1 is a value', async () => {
    assert.equal((await ask('listed', { num_ctx: 8192 })).status, 200);
    assert.equal((await ps(a))['m-allow'].options.num_ctx, 8192);
    assert.equal((await ask('listed')).status, 200);
    assert.equal((await ps(a))['m-allow'].options.num_ctx, 4096, "the route's value when the client gives none");
    const refused = await ask('listed', { num_ctx: 2048 });
    assert.equal(refused.status, 400);
    assert.equal(refused.json.error.code, 'option_not_allowed');
    assert.equal(refused.json.error.param, 'options.num_ctx');
    assert.match(refused.json.error.message, /allowed: 4096, 8192/);
    const gpu = await ask('listed', { num_gpu: -1 });
    assert.equal(gpu.status, 200, gpu.text);
    const reqId = gpu.headers.get('x-request-id');
    const line = await gw.logFor(reqId);
    assert.equal(line.num_gpu, -1, 'recorded as asked (-1: every layer)');
    assert.equal((await ask('listed', { num_gpu: 12 })).status, 400);
  });

  test('steer: each set of options stays on the backend loaded with it; the other client never waits for a load', async () => {
    const [la, lb] = [(await a.stats()).loads, (await b.stats()).loads];
    const served = [];
    for (let i = 0; i < 4; i++) {
      for (const options of [undefined, { num_ctx: 8192 }]) {
        const r = await ask('steered', options);
        assert.equal(r.status, 200);
        served.push([options ? 'x' : 'y', (await gw.logFor(r.headers.get('x-request-id'))).backend]);
      }
    }
    // Two loads in all, one per backend: each client's options stayed where they were loaded.
    assert.equal((await a.stats()).loads - la + (await b.stats()).loads - lb, 2);
    const y = new Set(served.filter(([c]) => c === 'y').map(([, be]) => be));
    const x = new Set(served.filter(([c]) => c === 'x').map(([, be]) => be));
    assert.equal(y.size, 1, JSON.stringify(served));
    assert.equal(x.size, 1, JSON.stringify(served));
    assert.notDeepEqual([...y], [...x]);
    const loaded = [(await ps(a))['m-steer'], (await ps(b))['m-steer']].map((m) => m.options.num_ctx).sort();
    assert.deepEqual(loaded, [2048, 8192]);
  });

  test('steer over mixed wires: the Ollama backend is not starved by one that never loads anything', async () => {
    const seen = new Set();
    for (let i = 0; i < 4; i++) {
      const r = await ask('mixed', i % 2 ? { num_ctx: 8192 } : undefined);
      assert.equal(r.status, 200);
      seen.add((await gw.logFor(r.headers.get('x-request-id'))).backend);
    }
    assert.ok(seen.has('mixed-ollama'), JSON.stringify([...seen]));
  });
});

describe('bench/tune.mjs: the sweep, against the simulator', () => {
  test('a short matrix: one load per configuration (in its warm-up), memory and speed in the shape the reference measured, rows in the history', async () => {
    const dir = tempDir('sluice-tune-');
    const matrix = [{ num_ctx: 512 }, { num_ctx: 8192 }, { num_gpu: 0 }, { num_gpu: 12 }, { num_gpu: -1 }];
    fs.writeFileSync(path.join(dir, 'matrix.json'), JSON.stringify(matrix));
    const jsonl = path.join(dir, 'out.jsonl');
    const loads0 = (await c.stats()).loads;
    const { stdout } = await promisify(execFile)(process.execPath, [
      path.join(REPO, 'bench', 'tune.mjs'), '--url', gw.url, '--key', KEY, '--model', 'sweep',
      '--ollama', c.url, '--ollama-model', 'm-sweep', '--matrix', path.join(dir, 'matrix.json'),
      '--runs', '2', '--tokens', '12', '--jsonl', jsonl,
    ], { timeout: 60000 });
    assert.match(stdout, /\| num_ctx=8192 \|/);
    const lines = fs.readFileSync(jsonl, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
    assert.equal(lines.filter((l) => l.warmup === true).length, matrix.length);
    assert.equal(lines.filter((l) => l.warmup === false).length, 2 * matrix.length);
    assert.ok(lines.filter((l) => l.warmup === false).every((l) => l.ok && l.gateway_ttft_ms > 0), 'every measured run has its gateway TTFT');
    // Unloaded before each configuration, loaded by its warm-up, never by a measured run.
    assert.equal((await c.stats()).loads - loads0, matrix.length);
    const sum = Object.fromEntries(lines.filter((l) => l.summary).map((l) => [l.label, l]));
    // KV cache: 12.8 KiB per token of context, as the reference measured.
    const perToken = ((sum['num_ctx=8192'].vram_mib - sum['num_ctx=512'].vram_mib) * 1024) / (8192 - 512);
    assert.ok(Math.abs(perToken - 12.8) < 0.01, `${perToken} KiB per token`);
    assert.equal(sum['num_gpu=0'].vram_mib, 0);
    assert.ok(Math.abs(sum['num_gpu=12'].vram_mib * 2 - sum['num_gpu=-1'].vram_mib) < 1);
    // All layers on the GPU fastest; half of them slower than the midpoint would be, and
    // the CPU alone slowest (the simulator's 8 ms per token: 8, 15.4 and 20 ms).
    const tps = (k) => sum[k].tokens_per_s;
    assert.ok(tps('num_gpu=-1') > tps('num_gpu=12') && tps('num_gpu=12') > tps('num_gpu=0'), JSON.stringify(sum));
    // The history groups them by option.
    const r = await rawRequest({ port: gw.port, path: '/history/stats?window=1h&group_by=num_ctx&model=m-sweep', headers: { authorization: `Bearer ${KEY}` } });
    assert.equal(r.status, 200, r.body);
    const groups = Object.fromEntries(JSON.parse(r.body).groups.map((g) => [String(g.key), g.count]));
    assert.equal(groups['512'], 3);
    assert.equal(groups['8192'], 3);
  });

  test('a stream that fails is a failed run: the sweep says so and exits 1', async () => {
    const dir = tempDir('sluice-tune-fail-');
    fs.writeFileSync(path.join(dir, 'matrix.json'), JSON.stringify([{ num_ctx: 1024 }]));
    await c.configure({ abort_rate: 1 });
    try {
      const jsonl = path.join(dir, 'out.jsonl');
      const r = await promisify(execFile)(process.execPath, [
        path.join(REPO, 'bench', 'tune.mjs'), '--url', gw.url, '--key', KEY, '--model', 'sweep', '--ollama', `${c.url}/`,
        '--ollama-model', 'm-sweep', '--matrix', path.join(dir, 'matrix.json'), '--runs', '1', '--tokens', '8', '--jsonl', jsonl,
      ], { timeout: 60000 }).then(() => ({ code: 0 }), (e) => ({ code: e.code, stdout: e.stdout }));
      assert.equal(r.code, 1);
      assert.match(r.stdout, /2 request\(s\) failed/);
      const lines = fs.readFileSync(jsonl, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
      assert.ok(lines.filter((l) => !l.summary).every((l) => l.ok === false && l.error), JSON.stringify(lines));
    } finally {
      await c.configure({ abort_rate: 0 });
    }
  });
});
