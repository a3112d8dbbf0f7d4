#!/usr/bin/env node
// Embeddings micro-batching, measured (docs/benchmarks.md, "Embeddings micro-batching").
// One run, the same simulator behind the same gateway binary: N single-input embeddings
// requests from C concurrent clients, to a route without and with `embedding_batch`. The
// simulator models a GPU embedding server: a few slots (`--max-in-flight`), a fixed time
// per call (`--ttft`) and a cost per prompt token, so one call of many inputs costs about
// what one input does plus its tokens: what batching is for.
//
// Usage: node bench/embed_batch.mjs [--n 3000] [--c 64] [--slots 4] [--rounds 3]
// Prints a Markdown table and one JSON line per configuration and round.
import { request, startGateway, startSim } from '../tests/integration/lib.mjs';

const arg = (name, dflt) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
};
const N = arg('n', 3000);
const C = arg('c', 64);
const SLOTS = arg('slots', 4);
const ROUNDS = arg('rounds', 3);
const KEY = 'sk-bench-0123456789abcdef';

const pct = (a, p) => {
  const s = [...a].sort((x, y) => x - y);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};

const sim = await startSim({ ttft: '10ms', 'inter-token': '0ms', 'max-in-flight': SLOTS, 'ttft-per-prompt-token': 0.02 });
const configs = [
  ['unbatched', {}],
  ['embedding_batch window 2ms', { embedding_batch: { window: '2ms', max_inputs: 256 } }],
  ['embedding_batch window 5ms', { embedding_batch: { window: '5ms', max_inputs: 256 } }],
];
const results = Object.fromEntries(configs.map(([l]) => [l, []]));
let serial = 0;
for (let round = 0; round < ROUNDS; round++) {
  for (const [label, extra] of configs) {
    const gw = await startGateway({
      keys: [{ name: 'bench', key: KEY, tenant: 't', models: ['*'] }],
      access_log: '',
      models: [{ alias: 'e', provider: 'openai', base_url: `${sim.url}/v1`, ...extra }],
    });
    const c0 = (await sim.stats()).embeddings;
    const lat = [];
    let next = 0;
    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: C }, async () => {
        while (next < N) {
          next++;
          const t = performance.now();
          const r = await request(`${gw.url}/v1/embeddings`, {
            method: 'POST',
            key: KEY,
            body: { model: 'e', input: `Sentence number ${serial++} to embed, about the weather and the sea.` },
          });
          if (r.status !== 200) throw new Error(`HTTP ${r.status}: ${r.text}`);
          lat.push(performance.now() - t);
        }
      }),
    );
    const secs = (performance.now() - t0) / 1000;
    const calls = (await sim.stats()).embeddings - c0;
    await gw.stop();
    const row = { label, round, n: N, c: C, slots: SLOTS, rps: N / secs, calls, p50_ms: pct(lat, 50), p95_ms: pct(lat, 95) };
    results[label].push(row);
    console.log(JSON.stringify(row));
  }
}
await sim.stop();
const med = (rows, k) => pct(rows.map((r) => r[k]), 50);
const base = med(results.unbatched, 'rps');
console.log(`\n| configuration | requests/s (median of ${ROUNDS}) | × unbatched | upstream calls | p50 ms | p95 ms |`);
console.log('|---|---|---|---|---|---|');
for (const [label] of configs) {
  const rs = results[label];
  console.log(`| ${label} | ${med(rs, 'rps').toFixed(0)} | ${(med(rs, 'rps') / base).toFixed(2)} | ${med(rs, 'calls')} | ${med(rs, 'p50_ms').toFixed(1)} | ${med(rs, 'p95_ms').toFixed(1)} |`);
}
