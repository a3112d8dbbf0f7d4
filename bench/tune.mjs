#!/usr/bin/env node
// A controlled sweep of a model server's load options through the gateway (docs/tuning.md),
// after the method of the reference's section 9.2: a fixed prompt (about 208 tokens of
// English), a fixed output length, temperature 0; per configuration the model is unloaded
// first (Ollama: keep_alive 0), one warm-up request that loads it is not counted, then N
// measured runs. Each request is streamed through the gateway and timed by this client (end
// to end); the gateway's own time to first token is read back from its history, and the
// model's memory from Ollama's /api/ps. Every request lands in the history with its options,
// so /history/stats?group_by=num_ctx (or num_gpu, num_batch) groups them too.
//
// Usage: node bench/tune.mjs --url http://127.0.0.1:8080 --key SECRET --model ALIAS
//          [--ollama http://127.0.0.1:11434 --ollama-model qwen2.5:0.5b] [--no-unload]
//          [--matrix FILE.json] [--runs 3] [--tokens 64] [--jsonl OUT.jsonl]
// --matrix: a JSON array of option objects ([{"num_ctx": 512}, {"num_gpu": 0}, ...]);
// default: the reference's 13 (num_ctx 512..8192, num_gpu 0, 12, -1, num_batch 64..1024).
// Prints a Markdown table; --jsonl writes one line per request and one per configuration.
// Exit 0 when every request succeeded, 1 otherwise, 2 on bad arguments.
import fs from 'node:fs';

const DEFAULT_MATRIX = [
  { num_ctx: 512 }, { num_ctx: 1024 }, { num_ctx: 2048 }, { num_ctx: 4096 }, { num_ctx: 8192 },
  { num_gpu: 0 }, { num_gpu: 12 }, { num_gpu: -1 },
  { num_batch: 64 }, { num_batch: 128 }, { num_batch: 256 }, { num_batch: 512 }, { num_batch: 1024 },
];
// About 208 tokens (cl100k) of plain English: the same prompt for every configuration.
const PROMPT = ('A gateway stands where every call to a language model converges. It authenticates the caller, ' +
  'applies rate limits and quotas shared by all instances, decides when a request may start, picks a healthy ' +
  'backend, relays the answer token by token and records what happened. ').repeat(4) +
  'Summarize in one sentence what such a gateway does.';

function parseArgs(argv) {
  const a = { url: '', key: '', model: '', ollama: '', ollamaModel: '', unload: true, matrix: '', runs: 3, tokens: 64, jsonl: '' };
  const strings = { '--url': 'url', '--key': 'key', '--model': 'model', '--ollama': 'ollama', '--ollama-model': 'ollamaModel', '--matrix': 'matrix', '--jsonl': 'jsonl' };
  const ints = { '--runs': 'runs', '--tokens': 'tokens' };
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i];
    if (k === '--no-unload') a.unload = false;
    else if (strings[k] && i + 1 < argv.length) a[strings[k]] = argv[++i];
    else if (ints[k] && i + 1 < argv.length) a[ints[k]] = Number(argv[++i]);
    else throw new Error(`unknown or incomplete argument ${k}`);
  }
  if (!a.url || !a.key || !a.model) throw new Error('--url, --key and --model are required');
  if (!Number.isInteger(a.runs) || a.runs < 1 || a.runs > 100) throw new Error('--runs: 1..100');
  if (!Number.isInteger(a.tokens) || a.tokens < 2 || a.tokens > 4096) throw new Error('--tokens: 2..4096');
  if (a.ollama && !a.ollamaModel) throw new Error('--ollama needs --ollama-model (the model name Ollama knows)');
  a.ollama = a.ollama.replace(/\/+$/, '');
  return a;
}

let args;
let matrix;
try {
  args = parseArgs(process.argv.slice(2));
  matrix = args.matrix ? JSON.parse(fs.readFileSync(args.matrix, 'utf8')) : DEFAULT_MATRIX;
  if (args.jsonl) args.jsonlFd = fs.openSync(args.jsonl, 'w');
  if (!Array.isArray(matrix) || matrix.length === 0 || !matrix.every((m) => m && typeof m === 'object' && !Array.isArray(m))) {
    throw new Error('--matrix: expected a non-empty JSON array of option objects');
  }
} catch (e) {
  console.error(`tune: ${e.message}\nusage: node bench/tune.mjs --url URL --key KEY --model ALIAS [--ollama URL --ollama-model NAME] [--matrix FILE] [--runs N] [--tokens N] [--jsonl FILE]`);
  process.exit(2);
}

const base = args.url.replace(/\/+$/, '');
const auth = { authorization: `Bearer ${args.key}` };
const out = args.jsonl ? args.jsonlFd : null;
const REQUEST_TIMEOUT_MS = 600000; // a request that has not ended in 10 minutes is a failure
const emit = (obj) => out !== null && fs.writeSync(out, `${JSON.stringify(obj)}\n`);

// One streamed request through the gateway: end-to-end first token, tokens/s after it. A
// request that fails (no connection, an error status, an error event or a stream cut
// before its end) is a failure, with what went wrong.
async function run(options) {
  try {
    return await stream(options);
  } catch (e) {
    return { ok: false, status: 0, error: String(e.message ?? e) };
  }
}

async function stream(options) {
  const t0 = performance.now();
  const res = await fetch(`${base}/v1/chat/completions`, {
    signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
    method: 'POST',
    headers: { ...auth, 'content-type': 'application/json' },
    body: JSON.stringify({
      model: args.model, stream: true, temperature: 0, max_tokens: args.tokens,
      stream_options: { include_usage: true },
      messages: [{ role: 'user', content: PROMPT }], options,
    }),
  });
  const requestId = res.headers.get('x-request-id');
  if (res.status !== 200) return { ok: false, status: res.status, error: await res.text(), request_id: requestId };
  let first = -1;
  let completion = 0;
  let done = false;
  let failure = '';
  let buf = '';
  const dec = new TextDecoder();
  for await (const chunk of res.body) {
    buf += dec.decode(chunk, { stream: true });
    let nl;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl).trim();
      buf = buf.slice(nl + 1);
      if (line === 'data: [DONE]') done = true;
      if (!line.startsWith('data: ') || done) continue;
      const ev = JSON.parse(line.slice(6));
      if (ev.error) failure = ev.error.message ?? JSON.stringify(ev.error);
      if (first < 0 && ev.choices?.[0]?.delta?.content) first = performance.now();
      if (ev.usage) completion = ev.usage.completion_tokens;
    }
  }
  const end = performance.now();
  if (!done || failure || first < 0) {
    return { ok: false, status: 200, request_id: requestId, error: failure || (done ? 'no token' : 'the stream ended before [DONE]') };
  }
  return {
    ok: true, status: 200, request_id: requestId, completion_tokens: completion,
    e2e_ttft_ms: first >= 0 ? first - t0 : null,
    tokens_per_s: first >= 0 && end > first && completion > 1 ? (completion - 1) / ((end - first) / 1000) : null,
  };
}

// The gateway's time to first token of these requests, from its history (written in
// batches: polled until every row is there, at most 10 s).
async function gatewayTtft(ids) {
  const want = new Set(ids.filter(Boolean));
  const found = new Map();
  const until = Date.now() + 10000;
  while (found.size < want.size && Date.now() < until) {
    const r = await fetch(`${base}/history?limit=1000`, { headers: auth, signal: AbortSignal.timeout(10000) }).catch(() => null);
    if (!r || r.status !== 200) break;
    for (const row of (await r.json()).data) if (want.has(row.request_id)) found.set(row.request_id, row.ttft_ms);
    if (found.size < want.size) await new Promise((res) => setTimeout(res, 200));
  }
  return found;
}

async function ollama(path, body) {
  const r = await fetch(`${args.ollama}${path}`, {
    signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
    ...(body === undefined ? {} : { method: 'POST', body: JSON.stringify(body) }),
  });
  if (r.status !== 200) throw new Error(`${path}: HTTP ${r.status}: ${await r.text()}`);
  return r.json();
}

const median = (xs) => {
  const v = xs.filter((x) => x !== null && x !== undefined).sort((p, q) => p - q);
  return v.length === 0 ? null : v.length % 2 ? v[(v.length - 1) / 2] : (v[v.length / 2 - 1] + v[v.length / 2]) / 2;
};
const fmt = (x, d) => (x === null || x === undefined ? '—' : x.toFixed(d));

const rows = [];
let failures = 0;
const started = performance.now();
for (const options of matrix) {
  const label = Object.entries(options).map(([k, v]) => `${k}=${v}`).join(' ') || '(defaults)';
  if (args.ollama && args.unload) {
    try {
      await ollama('/api/generate', { model: args.ollamaModel, keep_alive: 0 });
    } catch (e) {
      console.error(`tune: unloading before ${label}: ${e.message}`);
      failures++;
    }
  }
  const warm = await run(options);
  emit({ config: options, warmup: true, ...warm });
  if (!warm.ok) failures++;
  const measured = [];
  for (let i = 0; i < args.runs; i++) {
    const r = await run(options);
    if (!r.ok) failures++;
    measured.push(r);
  }
  const gw = await gatewayTtft(measured.map((r) => r.request_id));
  for (const r of measured) emit({ config: options, warmup: false, ...r, gateway_ttft_ms: gw.get(r.request_id) ?? null });
  let vram = null;
  if (args.ollama) {
    try {
      const ps = await ollama('/api/ps');
      const m = (ps.models ?? []).find((x) => x.name === args.ollamaModel || x.model === args.ollamaModel);
      vram = m ? m.size_vram / 1048576 : null;
    } catch (e) {
      console.error(`tune: /api/ps after ${label}: ${e.message}`);
    }
  }
  const row = {
    config: options, label, runs: measured.filter((r) => r.ok).length,
    gateway_ttft_s: median(measured.map((r) => gw.get(r.request_id))) / 1000 || null,
    e2e_ttft_s: median(measured.map((r) => r.e2e_ttft_ms)) / 1000 || null,
    warmup_e2e_ttft_s: warm.e2e_ttft_ms == null ? null : warm.e2e_ttft_ms / 1000,
    tokens_per_s: median(measured.map((r) => r.tokens_per_s)),
    vram_mib: vram,
  };
  emit({ summary: true, ...row });
  rows.push(row);
}

console.log(`${matrix.length} configurations × (1 warm-up + ${args.runs} runs), ${args.tokens} tokens each, ` +
  `${((performance.now() - started) / 1000).toFixed(1)} s`);
console.log('| configuration | gateway TTFT (s, median) | end-to-end TTFT (s) | warm-up TTFT (s) | tokens/s | VRAM (MiB) |');
console.log('|---|---|---|---|---|---|');
for (const r of rows) {
  console.log(`| ${r.label} | ${fmt(r.gateway_ttft_s, 3)} | ${fmt(r.e2e_ttft_s, 3)} | ${fmt(r.warmup_e2e_ttft_s, 3)} | ${fmt(r.tokens_per_s, 1)} | ${fmt(r.vram_mib, 0)} |`);
}
if (failures) console.log(`${failures} request(s) failed (see --jsonl)`);
if (out !== null) fs.closeSync(out);
process.exit(failures ? 1 : 0);
