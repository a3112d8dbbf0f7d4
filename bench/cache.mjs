#!/usr/bin/env node
// The response cache and in-flight coalescing, measured (docs/benchmarks.md, "Cache and
// coalescing"). One run, one machine, the same simulator behind the same gateway binary:
//
//   1. A replayed workload: N requests (temperature 0) from C concurrent clients, built
//      deterministically from a list of questions: 50 % new questions, 30 % exact repeats
//      of an earlier request, 20 % paraphrases of an earlier question (which an exact cache
//      cannot match). Against the gateway with no cache, with the cache, and with the cache
//      and coalescing: upstream generations (the simulator's count), tokens generated and
//      saved, client latency p50 / p95.
//   2. The cost on a miss: all-new requests at a fixed rate against the gateway with and
//      without the cache, and with and without a guardrails policy: the gateway's CPU
//      microseconds per request (utime + stime of its process, /proc).
//
// Usage: node bench/cache.mjs [--n 600] [--c 16] [--cpu-n 4000] [--rounds 3]
// Prints a Markdown table and one JSON line per configuration.
import fs from 'node:fs';
import { request, startGateway, startSim } from '../tests/integration/lib.mjs';

const arg = (name, dflt) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
};
const N = arg('n', 600);
const C = arg('c', 16);
const CPU_N = arg('cpu-n', 4000);
const KEY = 'sk-bench-0123456789abcdef';

// Deterministic: a small LCG.
let seed = 12345;
const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
const subjects = ['my password', 'an order', 'a refund', 'the invoice', 'my account', 'a delivery', 'the app', 'a subscription', 'two-factor login', 'my address'];
const verbs = ['reset', 'cancel', 'track', 'change', 'update', 'recover', 'close', 'renew', 'verify', 'download'];
const forms = [(v, s) => `How do I ${v} ${s}?`, (v, s) => `What is the way to ${v} ${s}?`, (v, s) => `Can you tell me how to ${v} ${s}?`];

function workload() {
  seed = 12345;
  const out = [];
  const asked = [];
  for (let i = 0; i < N; i++) {
    const x = rnd();
    if (x < 0.3 && out.length) {
      out.push({ kind: 'repeat', text: out[Math.floor(rnd() * out.length)].text });
    } else if (x < 0.5 && asked.length) {
      // The same question as an earlier one (its ticket too), worded another way.
      const [v, s, f, t] = asked[Math.floor(rnd() * asked.length)];
      out.push({ kind: 'paraphrase', text: `${forms[(f + 1 + (i % 2)) % forms.length](verbs[v], subjects[s])} Ticket ${t}.` });
    } else {
      const v = Math.floor(rnd() * verbs.length), s = Math.floor(rnd() * subjects.length), f = Math.floor(rnd() * forms.length);
      const text = `${forms[f](verbs[v], subjects[s])} Ticket ${i}.`;
      asked.push([v, s, f, i]);
      out.push({ kind: 'new', text });
    }
  }
  return out;
}

const pct = (a, p) => {
  const s = [...a].sort((x, y) => x - y);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};

function cpuTicks(pid) {
  const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const rest = f.slice(f.lastIndexOf(')') + 2).split(' ');
  return Number(rest[11]) + Number(rest[12]); // utime, stime (fields 14, 15)
}
const HZ = 100;

async function replay(gw, items, byOutcome) {
  const lat = [];
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const it = items[next++];
      const t0 = performance.now();
      const r = await request(`${gw.url}/v1/chat/completions`, {
        method: 'POST',
        key: KEY,
        body: { model: 'm', temperature: 0, max_tokens: 40, messages: [{ role: 'user', content: it.text }] },
      });
      if (r.status !== 200) throw new Error(`HTTP ${r.status}: ${r.text}`);
      lat.push(performance.now() - t0);
      if (byOutcome) (byOutcome[r.headers.get('x-sluice-cache') ?? 'none'] ??= []).push(performance.now() - t0);
    }
  };
  await Promise.all(Array.from({ length: C }, worker));
  return lat;
}

async function tokens(gw) {
  const m = await gw.metrics();
  const sum = (name) =>
    m.split('\n').filter((l) => l.startsWith(name)).reduce((s, l) => s + Number(l.split(' ').at(-1)), 0);
  return { saved: sum('sluice_cache_tokens_saved_total') + sum('sluice_coalesced_tokens_total') };
}

const base = (sim, cache, extra = {}) => ({
  keys: [{ name: 'bench', key: KEY, tenant: 't', models: ['*'] }],
  access_log: '',
  models: [{ alias: 'm', provider: 'openai', base_url: `${sim.url}/v1`, ...(cache ? { cache } : {}), ...extra }],
});

const rows = [];
{
  // 1. Replayed workload, realistic timing.
  const sim = await startSim({ ttft: '150ms', 'inter-token': '10ms' });
  const items = workload();
  for (const [label, cache] of [
    ['no cache', null],
    ['cache', {}],
    ['cache + coalescing', { coalesce: true }],
  ]) {
    const gw = await startGateway(base(sim, cache));
    const before = (await sim.stats()).requests;
    const t0 = performance.now();
    const by = {};
    const lat = await replay(gw, items, by);
    const secs = (performance.now() - t0) / 1000;
    const gens = (await sim.stats()).requests - before;
    const tk = await tokens(gw);
    const infra = await gw.infra();
    await gw.stop();
    const row = { run: 'replay', label, n: N, c: C, upstream: gens, saved_share: 1 - gens / N, tokens_saved: tk.saved, hits: infra.cache.hits, coalesced: infra.cache.coalesced, p50_ms: pct(lat, 50), p95_ms: pct(lat, 95), hit_p50_ms: by.hit ? pct(by.hit, 50) : null, secs };
    rows.push(row);
    console.log(JSON.stringify(row));
  }
  await sim.stop();
}
{
  // 2. CPU per request on a miss: all new, no generation time.
  const sim = await startSim({ ttft: '0ms', 'inter-token': '0ms' });
  const guard = [{ name: 'g', email: 'redact', phone: 'redact', card: 'block', iban: 'redact' }];
  const ROUNDS = arg('rounds', 3);
  const configs = [
    ['no cache, no guard', (s) => base(s, null)],
    ['cache (memory), all misses', (s) => base(s, {})],
    ['guardrails (screen + PII)', (s) => ({ ...base(s, null, { guardrails: 'g' }), guardrails: guard })],
  ];
  const per = Object.fromEntries(configs.map(([l]) => [l, []]));
  let serial = 0;
  for (let round = 0; round < ROUNDS; round++) {
    for (const [label, cfg] of configs) {  // interleaved: the machine's noise spreads over all
      const gw = await startGateway(cfg(sim));
      const items = Array.from({ length: CPU_N }, (_, i) => ({ text: `Unique question number ${serial++} about the weather in city ${i * 7}, please answer briefly.` }));
      await replay(gw, items.slice(0, 200));
      const t = cpuTicks(gw.pid);
      await replay(gw, items.slice(200));
      per[label].push(((cpuTicks(gw.pid) - t) / HZ / (CPU_N - 200)) * 1e6);
      await gw.stop();
    }
  }
  for (const [label] of configs) {
    const row = { run: 'cpu', label, n: CPU_N - 200, rounds: ROUNDS, us_per_request: Math.round(pct(per[label], 50) * 10) / 10, all: per[label].map((x) => Math.round(x)) };
    rows.push(row);
    console.log(JSON.stringify(row));
  }
  await sim.stop();
}

console.log('\n| run | configuration | upstream generations | generations saved | hits | coalesced | tokens saved | p50 ms | p95 ms | hits p50 ms | wall s |');
console.log('|---|---|---|---|---|---|---|---|---|---|---|');
for (const r of rows.filter((x) => x.run === 'replay')) {
  console.log(`| replay ${r.n} req, ${r.c} clients | ${r.label} | ${r.upstream} | ${(r.saved_share * 100).toFixed(0)} % | ${r.hits} | ${r.coalesced} | ${r.tokens_saved} | ${r.p50_ms.toFixed(0)} | ${r.p95_ms.toFixed(0)} | ${r.hit_p50_ms == null ? '—' : r.hit_p50_ms.toFixed(1)} | ${r.secs.toFixed(1)} |`);
}
console.log('\n| configuration | gateway CPU µs per request (median of rounds) | each round |');
console.log('|---|---|---|');
for (const r of rows.filter((x) => x.run === 'cpu')) console.log(`| ${r.label} | ${r.us_per_request} | ${r.all.join(', ')} |`);
