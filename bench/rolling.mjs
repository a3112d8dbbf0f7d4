#!/usr/bin/env node
// A rolling restart under load: keeps N streams open (each one, when it ends, is replaced by
// a new one) and sends non-streamed requests at a steady rate, through one URL; after a
// warm-up it runs a command (deploy/cluster.sh restart), goes on until the command has
// exited plus a settle time, and reports what every request and stream became.
//
// Usage: node bench/rolling.mjs --url http://127.0.0.1:PORT/v1/chat/completions --key SECRET
//          [--streams 500] [--rate 100] [--stream-model slow] [--stream-tokens 100]
//          [--model sluice-sim] [--warmup-ms 3000] [--settle-ms 2000] -- COMMAND ARGS...
// Prints one JSON line on stdout; exit code 0 even when requests fail (the caller reads
// the counts), 2 on bad arguments, 3 when the command fails.
import http from 'node:http';
import { spawn } from 'node:child_process';

const a = {
  url: '', key: '', streams: 500, rate: 100, streamModel: 'slow', streamTokens: 100, model: 'sluice-sim',
  warmupMs: 3000, settleMs: 2000, cmd: [],
};
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  const k = argv[i];
  const v = argv[i + 1];
  if (k === '--') {
    a.cmd = argv.slice(i + 1);
    break;
  }
  const keys = { '--url': 'url', '--key': 'key', '--stream-model': 'streamModel', '--model': 'model' };
  const nums = { '--streams': 'streams', '--rate': 'rate', '--stream-tokens': 'streamTokens', '--warmup-ms': 'warmupMs', '--settle-ms': 'settleMs' };
  if (keys[k]) a[keys[k]] = v;
  else if (nums[k]) a[nums[k]] = Number(v);
  else {
    process.stderr.write(`rolling.mjs: unknown argument ${k}\n`);
    process.exit(2);
  }
  i++;
}
if (!a.url || !a.cmd.length || !(a.streams >= 0) || !(a.rate > 0)) {
  process.stderr.write('rolling.mjs: --url and a command after -- are required\n');
  process.exit(2);
}

const target = new URL(a.url);
const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity });
const out = {
  streams: 0, streams_ok: 0, streams_cut: 0, streams_failed: 0,
  requests: 0, requests_ok: 0, requests_failed: 0, failures: {}, latencies_ms: [],
  during: { requests: 0, requests_failed: 0, streams_ended: 0, streams_cut: 0 },
};
let phase = 'warmup';
let stopping = false;
const fail = (what) => (out.failures[what] = (out.failures[what] ?? 0) + 1);

function post(body, onData) {
  return new Promise((resolve) => {
    const req = http.request(
      {
        host: target.hostname, port: target.port, path: target.pathname, method: 'POST', agent,
        headers: { 'content-type': 'application/json', authorization: `Bearer ${a.key}` },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (d) => {
          text += d;
          onData?.(d);
        });
        res.on('end', () => resolve({ status: res.statusCode, text }));
        res.on('error', (e) => resolve({ status: res.statusCode, text, error: e.code ?? e.message }));
        res.on('aborted', () => resolve({ status: res.statusCode, text, error: 'aborted' }));
      },
    );
    req.setTimeout(120000, () => req.destroy(new Error('timeout')));
    req.on('error', (e) => resolve({ status: 0, error: e.code ?? e.message }));
    req.end(JSON.stringify(body));
  });
}

async function streamLoop() {
  while (!stopping) {
    const during = phase === 'restart';
    const r = await post({ model: a.streamModel, messages: [{ role: 'user', content: 'go' }], stream: true, max_tokens: a.streamTokens });
    out.streams++;
    const done = r.status === 200 && !r.error && r.text.includes('data: [DONE]');
    if (done) out.streams_ok++;
    else if (r.status === 200) {
      out.streams_cut++;
      fail(`stream cut: ${r.error ?? 'no [DONE]'}`);
    } else {
      out.streams_failed++;
      fail(`stream HTTP ${r.status} ${r.error ?? ''}`.trim());
    }
    if (during || phase === 'restart') {
      out.during.streams_ended++;
      if (!done) out.during.streams_cut++;
    }
  }
}

async function one() {
  const t0 = performance.now();
  const during = phase === 'restart';
  const r = await post({ model: a.model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 8 });
  out.requests++;
  if (during) out.during.requests++;
  if (r.status === 200 && !r.error) {
    out.requests_ok++;
    if (during) out.latencies_ms.push(performance.now() - t0);
  } else {
    out.requests_failed++;
    if (during) out.during.requests_failed++;
    fail(`request HTTP ${r.status} ${r.error ?? ''}`.trim());
  }
}

const pending = new Set();
const ticker = setInterval(() => {
  if (stopping) return;
  const p = one();
  pending.add(p);
  p.finally(() => pending.delete(p));
}, 1000 / a.rate);
const loops = Array.from({ length: a.streams }, () => streamLoop());

await new Promise((r) => setTimeout(r, a.warmupMs));
phase = 'restart';
const t0 = performance.now();
const code = await new Promise((resolve) => {
  const child = spawn(a.cmd[0], a.cmd.slice(1), { stdio: ['ignore', 'ignore', 'inherit'] });
  child.on('exit', (c) => resolve(c));
});
const restartMs = performance.now() - t0;
await new Promise((r) => setTimeout(r, a.settleMs));
phase = 'settle';
stopping = true;
clearInterval(ticker);
await Promise.all([...loops, ...pending]);
agent.destroy();
const lat = out.latencies_ms.sort((x, y) => x - y);
const pct = (p) => (lat.length ? lat[Math.min(lat.length - 1, Math.floor((p / 100) * lat.length))] : null);
delete out.latencies_ms;
console.log(JSON.stringify({
  phase: 'rolling', streams_open: a.streams, rate: a.rate, stream_tokens: a.streamTokens, command: a.cmd.join(' '),
  command_exit: code, restart_ms: Math.round(restartMs), p50_ms_during: pct(50), p99_ms_during: pct(99), ...out,
}));
process.exit(code === 0 ? 0 : 3);
