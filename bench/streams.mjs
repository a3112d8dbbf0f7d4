#!/usr/bin/env node
// Opens N concurrent streaming chat completions against one target and reports, per run:
// streams ok / with errors, TTFT percentiles (request start -> first `data:` event), and,
// for the processes given with --rss-pid, the resident memory (VmRSS, summed over the pids)
// when idle (after a few warm-up streams), at the moment every stream has received its
// first token (all streams open at once), and the highest value sampled every 10 ms while
// the batch runs.
//
// Usage: node bench/streams.mjs --url http://127.0.0.1:PORT/v1/chat/completions
//          [--n 1000] [--key SECRET] [--model sluice-sim] [--max-tokens 50]
//          [--timeout-ms 60000] [--warmup 20] [--rss-pid PID[,PID...]] [--label NAME]
// Prints one JSON line on stdout. Exit code 0 even when some streams fail (the caller
// reads `errors`); 2 on bad arguments.
import http from 'node:http';
import fs from 'node:fs';

function parseArgs(argv) {
  const a = {
    url: '', n: 1000, key: '', model: 'sluice-sim', maxTokens: 50, timeoutMs: 60000,
    warmup: 20, rssPids: [], label: '',
  };
  for (let i = 2; i < argv.length; i++) {
    const k = argv[i];
    const v = argv[i + 1];
    switch (k) {
      case '--url': a.url = v; i++; break;
      case '--n': a.n = Number(v); i++; break;
      case '--key': a.key = v; i++; break;
      case '--model': a.model = v; i++; break;
      case '--max-tokens': a.maxTokens = Number(v); i++; break;
      case '--timeout-ms': a.timeoutMs = Number(v); i++; break;
      case '--warmup': a.warmup = Number(v); i++; break;
      case '--rss-pid': a.rssPids = v ? v.split(',').filter(Boolean).map(Number) : []; i++; break;
      case '--label': a.label = v; i++; break;
      default:
        process.stderr.write(`streams.mjs: unknown argument ${k}\n`);
        process.exit(2);
    }
  }
  if (!a.url || !(a.n > 0) || !(a.maxTokens > 0)) {
    process.stderr.write('streams.mjs: --url is required; --n and --max-tokens must be > 0\n');
    process.exit(2);
  }
  return a;
}

const args = parseArgs(process.argv);
const target = new URL(args.url);
const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity });
const body = JSON.stringify({
  model: args.model,
  messages: [{ role: 'user', content: 'Write a short story about a river.' }],
  max_tokens: args.maxTokens,
  stream: true,
});
const headers = {
  'content-type': 'application/json',
  'content-length': Buffer.byteLength(body),
  accept: 'text/event-stream',
};
if (args.key) headers.authorization = `Bearer ${args.key}`;

// Sum of VmRSS (kB) over the given pids; null when none is readable.
function rssKb(pids) {
  if (pids.length === 0) return null;
  let sum = 0;
  for (const pid of pids) {
    let text;
    try { text = fs.readFileSync(`/proc/${pid}/status`, 'utf8'); } catch { return null; }
    const m = /^VmRSS:\s+(\d+)\s+kB/m.exec(text);
    if (!m) return null;
    sum += Number(m[1]);
  }
  return sum;
}

const now = () => performance.now();

// One streaming request. Calls hooks.onFirst() at the first `data:` event.
function oneStream(hooks) {
  return new Promise((resolve) => {
    const r = { ok: false, error: null, ttftMs: null, events: 0, done: false };
    const t0 = now();
    let settled = false;
    const finish = (err) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      if (err) r.error = err;
      else if (!r.done) r.error = 'no [DONE]';
      else if (r.events === 0) r.error = 'no events';
      r.ok = !r.error;
      resolve(r);
    };
    const timer = setTimeout(() => { req.destroy(); finish('timeout'); }, args.timeoutMs);
    const req = http.request({
      agent, host: target.hostname, port: target.port, path: target.pathname + target.search,
      method: 'POST', headers,
    }, (res) => {
      if (res.statusCode !== 200) {
        res.resume();
        res.on('end', () => finish(`http ${res.statusCode}`));
        return;
      }
      res.setEncoding('utf8');
      let buf = '';
      res.on('data', (chunk) => {
        buf += chunk;
        let idx;
        while ((idx = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, idx).replace(/\r$/, '');
          buf = buf.slice(idx + 1);
          if (!line.startsWith('data:')) continue;
          const data = line.slice(5).trim();
          if (r.ttftMs === null) {
            r.ttftMs = now() - t0;
            hooks.onFirst();
          }
          if (data === '[DONE]') { r.done = true; continue; }
          r.events++;
          if (data.includes('"error"')) r.error = r.error || 'error event';
        }
      });
      res.on('end', () => finish(r.error));
      res.on('error', (e) => finish(`response: ${e.code || e.message}`));
      res.on('close', () => finish(res.complete ? r.error : 'closed before end'));
    });
    req.on('error', (e) => finish(`request: ${e.code || e.message}`));
    req.end(body);
  });
}

function pct(sorted, p) {
  if (sorted.length === 0) return null;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i];
}

async function batch(n, sample) {
  let firsts = 0;
  let finished = 0;
  let atAllFirst = null; // RSS when every stream has had its first token
  let openAtSample = null;
  let sampleAtMs = null;
  let maxRss = null; // highest RSS seen while the batch runs (sampled every 10 ms)
  let maxStreaming = 0; // most streams between first token and end at the same time
  const tStart = now();
  const poll = sample && args.rssPids.length
    ? setInterval(() => {
      const v = rssKb(args.rssPids);
      if (v !== null && (maxRss === null || v > maxRss)) maxRss = v;
    }, 10)
    : null;
  const hooks = {
    onFirst() {
      firsts++;
      maxStreaming = Math.max(maxStreaming, firsts - finished);
      if (sample && firsts === n) {
        // Every stream has its first token: all n are open now (unless some already ended).
        atAllFirst = rssKb(args.rssPids);
        openAtSample = n - finished;
        sampleAtMs = now() - tStart;
      }
    },
  };
  const results = await Promise.all(Array.from({ length: n }, () =>
    oneStream(hooks).then((r) => { finished++; return r; })));
  if (poll) clearInterval(poll);
  if (atAllFirst !== null && (maxRss === null || atAllFirst > maxRss)) maxRss = atAllFirst;
  return { results, atAllFirst, maxRss, openAtSample, maxStreaming, sampleAtMs, wallMs: now() - tStart };
}

async function main() {
  if (args.warmup > 0) await batch(args.warmup, false);
  await new Promise((r) => setTimeout(r, 300));
  const idle = rssKb(args.rssPids);
  const { results, atAllFirst, maxRss, openAtSample, maxStreaming, sampleAtMs, wallMs } = await batch(args.n, true);
  const ok = results.filter((r) => r.ok).length;
  const errs = {};
  for (const r of results) if (!r.ok) errs[r.error] = (errs[r.error] || 0) + 1;
  const ttfts = results.filter((r) => r.ttftMs !== null).map((r) => r.ttftMs).sort((a, b) => a - b);
  const out = {
    label: args.label, url: args.url, n: args.n, ok, errors: args.n - ok, error_kinds: errs,
    ttft_p50_ms: pct(ttfts, 50), ttft_p99_ms: pct(ttfts, 99), ttft_max_ms: pct(ttfts, 100),
    wall_ms: wallMs, sample_at_ms: sampleAtMs, open_at_sample: openAtSample,
    max_streaming: maxStreaming,
    rss_idle_kb: idle, rss_all_first_kb: atAllFirst, rss_peak_kb: maxRss,
    // (highest RSS during the batch - idle RSS) / streams started. Exact as "per open
    // stream" when all streams were open together (open_at_sample == n).
    rss_per_stream_kb: (idle !== null && maxRss !== null) ? (maxRss - idle) / args.n : null,
  };
  process.stdout.write(JSON.stringify(out) + '\n');
  agent.destroy();
}

main().catch((e) => { process.stderr.write(`streams.mjs: ${e.stack || e}\n`); process.exit(1); });
