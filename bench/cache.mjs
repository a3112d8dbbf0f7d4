#!/usr/bin/env node
// The response cache and in-flight coalescing, measured (docs/benchmarks.md, "Cache and
// coalescing"). One run, one machine, the same simulator behind the same gateway binary:
//
//   1. A replayed workload: N requests (temperature 0) from C concurrent clients, built
//      deterministically from a list of questions: 50 % new questions, 30 % exact repeats
//      of an earlier request, 20 % paraphrases of an earlier question (which an exact cache
//      cannot match). Against the gateway with no cache, with the cache, and with the cache
//      and coalescing: upstream generations (the simulator's count), tokens generated and
//      saved, client latency p50 / p95. Two workloads: "tickets" (each new question
//      carries its own ticket number) and "faq" (no number: a question is its verb and
//      subject). With the semantic stage on (the simulator's embeddings as the embedding
//      route, on a simulator of its own answering in 5 ms; cosine 0.92, the article's, and
//      0.85), also how many of its hits were wrong: an answer kept for another question
//      (another ticket; another verb or subject) served for this one.
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

// tickets: each new question carries its own ticket number (the same words but a number
// apart are different questions: a semantic hit across tickets is wrong); without, an FAQ
// (the question is its verb and subject, however worded).
function workload(tickets) {
  seed = 12345;
  const out = [];
  const asked = [];
  const suffix = (t) => (tickets ? ` Ticket ${t}.` : '');
  for (let i = 0; i < N; i++) {
    const x = rnd();
    if (x < 0.3 && out.length) {
      const o = out[Math.floor(rnd() * out.length)];
      out.push({ kind: 'repeat', text: o.text, q: o.q });
    } else if (x < 0.5 && asked.length) {
      // The same question as an earlier one (its ticket too), worded another way.
      const [v, s, f, t] = asked[Math.floor(rnd() * asked.length)];
      out.push({ kind: 'paraphrase', text: `${forms[(f + 1 + (i % 2)) % forms.length](verbs[v], subjects[s])}${suffix(t)}`, q: tickets ? t : `${v},${s}` });
    } else {
      const v = Math.floor(rnd() * verbs.length), s = Math.floor(rnd() * subjects.length), f = Math.floor(rnd() * forms.length);
      const text = `${forms[f](verbs[v], subjects[s])}${suffix(i)}`;
      asked.push([v, s, f, i]);
      out.push({ kind: 'new', text, q: tickets ? i : `${v},${s}` });
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

// The question each kept answer was generated for (by its cache key), to tell a right
// semantic hit (the same question) from a wrong one.
async function replay(gw, items, byOutcome, judge) {
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
      const outcome = r.headers.get('x-sluice-cache') ?? 'none';
      if (byOutcome) (byOutcome[outcome] ??= []).push(performance.now() - t0);
      if (judge) {
        if (outcome === 'miss') judge.asked.set(r.headers.get('x-sluice-cache-key'), it.q);
        if (outcome === 'semantic') {
          const q = judge.asked.get(r.headers.get('x-sluice-cache-match'));
          if (q === undefined) judge.unknown++;
          else if (q !== it.q) judge.wrong++;
        }
      }
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

const base = (sim, cache, extra = {}, embedSim = sim) => ({
  keys: [{ name: 'bench', key: KEY, tenant: 't', models: ['*'] }],
  access_log: '',
  models: [
    { alias: 'm', provider: 'openai', base_url: `${sim.url}/v1`, ...(cache ? { cache } : {}), ...extra },
    { alias: 'e', provider: 'openai', base_url: `${embedSim.url}/v1` },
  ],
});

const rows = [];
{
  // 1. Replayed workload, realistic timing.
  const sim = await startSim({ ttft: '150ms', 'inter-token': '10ms' });
  const embedSim = await startSim({ ttft: '5ms', 'inter-token': '0ms' });
  const semantic = (threshold, more = {}) => ({ ...more, semantic: { embedding: 'e', threshold } });
  for (const [wl, label, cache] of [
    ['tickets', 'no cache', null],
    ['tickets', 'cache', {}],
    ['tickets', 'cache + coalescing', { coalesce: true }],
    ['tickets', 'cache + semantic 0.92', semantic(0.92)],
    ['faq', 'cache', {}],
    ['faq', 'cache + semantic 0.92', semantic(0.92)],
    ['faq', 'cache + semantic 0.85', semantic(0.85)],
    ['faq', 'cache + semantic 0.92 + coalescing', semantic(0.92, { coalesce: true })],
  ]) {
    const items = workload(wl === 'tickets');
    const gw = await startGateway(base(sim, cache, {}, embedSim));
    const before = (await sim.stats()).requests;
    const t0 = performance.now();
    const by = {};
    const judge = { asked: new Map(), wrong: 0, unknown: 0 };
    const lat = await replay(gw, items, by, judge);
    const secs = (performance.now() - t0) / 1000;
    const gens = (await sim.stats()).requests - before;
    const tk = await tokens(gw);
    const infra = await gw.infra();
    await gw.stop();
    const row = { run: 'replay', workload: wl, label, n: N, c: C, upstream: gens, saved_share: 1 - gens / N, tokens_saved: tk.saved, hits: infra.cache.hits, semantic_hits: by.semantic?.length ?? 0, wrong: judge.wrong, unknown: judge.unknown, coalesced: infra.cache.coalesced, p50_ms: pct(lat, 50), p95_ms: pct(lat, 95), hit_p50_ms: by.hit ? pct(by.hit, 50) : null, secs };
    rows.push(row);
    console.log(JSON.stringify(row));
  }
  await embedSim.stop();
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
    ['cache + semantic (embedding call), all misses', (s) => base(s, { semantic: { embedding: 'e' } })],
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

console.log('\n| workload | configuration | upstream generations | generations saved | hits (semantic) | wrong semantic hits | coalesced | tokens saved | p50 ms | p95 ms | hits p50 ms | wall s |');
console.log('|---|---|---|---|---|---|---|---|---|---|---|---|');
for (const r of rows.filter((x) => x.run === 'replay')) {
  console.log(`| ${r.workload}, ${r.n} req, ${r.c} clients | ${r.label} | ${r.upstream} | ${(r.saved_share * 100).toFixed(0)} % | ${r.hits} (${r.semantic_hits}) | ${r.wrong}${r.unknown ? ` (+${r.unknown} unknown)` : ''} | ${r.coalesced} | ${r.tokens_saved} | ${r.p50_ms.toFixed(0)} | ${r.p95_ms.toFixed(0)} | ${r.hit_p50_ms == null ? '—' : r.hit_p50_ms.toFixed(1)} | ${r.secs.toFixed(1)} |`);
}
console.log('\n| configuration | gateway CPU µs per request (median of rounds) | each round |');
console.log('|---|---|---|');
for (const r of rows.filter((x) => x.run === 'cpu')) console.log(`| ${r.label} | ${r.us_per_request} | ${r.all.join(', ')} |`);
