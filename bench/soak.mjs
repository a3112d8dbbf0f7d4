#!/usr/bin/env node
// Soak: a gateway under a mix of well-behaved and hostile traffic for a long while, then
// idle. It must stay flat under load (RSS, open file descriptors, requests and streams
// live, gate slots) and come back to 0 in flight when the load stops.
//
// The mix, each a loop of its own, all against one gateway (2 workers) in front of the
// simulator and a hostile upstream (tests/integration/hostile.mjs):
//   normal      non-streamed completions (4 loops)
//   streams     streams read to the end (3 loops)
//   slow        streams read slowly: paused, then a little at a time (2 loops)
//   leavers     streams left after a few events (2 loops)
//   stallers    streams never read, left after a while (1 loop)
//   queued      requests of a key with one slot, some left while queued (2 loops)
//   hostile     the hostile upstream, its mode changing every request: 1xx, bytes after
//               the answer, endless streams, 1 MB events, bad chunks, resets, short bodies,
//               redirects, hangs, raw error bodies (2 loops)
// Every SAMPLE_MS it records the gateway's RSS and fd count and /infra's live requests,
// streams and gate slots. At the end it waits for everything to go back to 0 and prints
// a JSON report (one line) and a table.
//
// Usage: node bench/soak.mjs [--seconds 600] [--sample-ms 10000]
// Exit code 1 when something did not come back to 0 or the gateway died.
import http from 'node:http';
import fs from 'node:fs';
import net from 'node:net';

import { startHostile } from '../tests/integration/hostile.mjs';
import { startGateway, startSim, delay } from '../tests/integration/lib.mjs';

const args = { seconds: 600, sampleMs: 10000 };
for (let i = 2; i < process.argv.length; i += 2) {
  const [k, v] = [process.argv[i], Number(process.argv[i + 1])];
  if (k === '--seconds' && v > 0) args.seconds = v;
  else if (k === '--sample-ms' && v > 0) args.sampleMs = v;
  else {
    process.stderr.write(`soak.mjs: unknown or bad argument ${k}\n`);
    process.exit(2);
  }
}

const KEY = 'sk-soak-0123456789abcdef';
const ONE = 'sk-soak-one-slot-0123456789';
const counts = {};
const count = (what) => (counts[what] = (counts[what] ?? 0) + 1);

const sim = await startSim({ ttft: '20ms', 'inter-token': '5ms', 'max-output-tokens': 100000 });
const up = await startHostile();
const gw = await startGateway({
  workers: 2,
  keys: [
    { name: 'soak', key: KEY, tenant: 'soak', tier: 'standard' },
    { name: 'one-slot', key: ONE, tenant: 'soak', tier: 'standard', max_in_flight: 1 },
  ],
  params: { max_tokens: { min: 1, max: 100000, integer: true } },
  concurrency: { queue_size: 64, max_wait: { vip: '3s', premium: '3s', standard: '3s' } },
  timeouts: { first_token: '3s', idle: '3s', total: '20s', heartbeat: '2s', client_write: '5s', drain_delay: '0s' },
  history: { backend: 'none' },
  models: [
    { alias: 'fast', provider: 'openai', base_url: `${sim.url}/v1`, model: 'fast' },
    { alias: 'hostile', provider: 'openai', base_url: `${up.url}/v1`, model: 'h' },
  ],
});
const gwUrl = new URL(gw.url);
const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
let stopping = false;
const deadline = Date.now() + args.seconds * 1000;

// One request; `onResponse(res, req)` may read, pause or destroy. Resolves when it ends,
// whatever way.
function call(body, { key = KEY, onResponse, timeout = 60000 } = {}) {
  return new Promise((resolve) => {
    const payload = JSON.stringify(body);
    const req = http.request(
      {
        host: gwUrl.hostname,
        port: gwUrl.port,
        method: 'POST',
        path: '/v1/chat/completions',
        agent,
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) },
      },
      (res) => {
        count(`status_${res.statusCode}`);
        res.on('error', () => {});
        res.on('close', resolve);
        if (onResponse) onResponse(res, req);
        else res.resume();
      },
    );
    req.setTimeout(timeout, () => req.destroy());
    req.on('error', () => {
      count('client_error');
      resolve();
    });
    req.end(payload);
  });
}

const chat = (extra = {}) => ({ model: 'fast', messages: [{ role: 'user', content: 'soak' }], max_tokens: 20, ...extra });

async function loop(name, fn) {
  while (!stopping && Date.now() < deadline) {
    await fn();
    count(name);
  }
}

const loops = [];
for (let i = 0; i < 4; i++) loops.push(loop('normal', () => call(chat())));
for (let i = 0; i < 3; i++) loops.push(loop('streams', () => call(chat({ stream: true, max_tokens: 200 }))));
for (let i = 0; i < 2; i++) {
  loops.push(
    loop('slow', () =>
      call(chat({ stream: true, max_tokens: 3000 }), {
        onResponse(res) {
          res.pause();
          const tick = setInterval(() => {
            res.resume();
            setTimeout(() => res.pause(), 20);
          }, 200);
          res.on('close', () => clearInterval(tick));
        },
      }),
    ),
  );
}
for (let i = 0; i < 2; i++) {
  loops.push(
    loop('leavers', () =>
      call(chat({ stream: true, max_tokens: 2000 }), {
        onResponse(res, req) {
          let n = 0;
          res.on('data', () => {
            if (++n === 5) req.destroy();
          });
        },
      }),
    ),
  );
}
// Never reads a long stream, leaves after 3 s (a fresh connection: no pooling).
loops.push(
  loop(
    'stallers',
    () =>
      new Promise((resolve) => {
        const payload = JSON.stringify(chat({ stream: true, max_tokens: 100000, messages: [{ role: 'user', content: 'stall' }] }));
        const sock = net.connect(Number(gwUrl.port), gwUrl.hostname, () => {
          sock.write(
            `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\nContent-Type: application/json\r\n` +
              `Content-Length: ${Buffer.byteLength(payload)}\r\n\r\n${payload}`,
          );
          sock.pause();
          setTimeout(() => {
            sock.destroy();
            resolve();
          }, 3000);
        });
        sock.on('error', () => resolve());
      }),
  ),
);
for (let i = 0; i < 2; i++) {
  loops.push(
    loop('queued', () =>
      call(chat({ max_tokens: 40 }), {
        key: ONE,
        timeout: i === 0 ? 60000 : 150, // the second loop's clients leave while queued
      }),
    ),
  );
}
const MODES = ['ok', 'interim', 'extra', 'endless', 'big_events', 'bad_chunk', 'reset', 'short_body', 'redirect', 'hang', 'error_text'];
let modeIndex = 0;
up.setMode('ok', { intervalMs: 2, burst: 20, eventBytes: 500000, events: 10 });
for (let i = 0; i < 2; i++) {
  loops.push(
    loop('hostile', () => {
      up.setMode(MODES[modeIndex++ % MODES.length]);
      return call(
        { model: 'hostile', messages: [{ role: 'user', content: 'h' }], stream: modeIndex % 2 === 0 },
        { timeout: 30000 },
      );
    }),
  );
}

function rssKb() {
  const m = /^VmRSS:\s+(\d+)\s+kB/m.exec(fs.readFileSync(`/proc/${gw.pid}/status`, 'utf8'));
  return Number(m[1]);
}
const fds = () => fs.readdirSync(`/proc/${gw.pid}/fd`).length;
async function state() {
  const infra = await gw.infra();
  return {
    t: Math.round((Date.now() - start) / 1000),
    rss_kb: rssKb(),
    fds: fds(),
    live: infra.requests.live,
    streams: infra.requests.streams,
    gate_in_flight: infra.concurrency_gate.in_flight,
    queued: infra.concurrency_gate.queued.standard + infra.concurrency_gate.queued.premium + infra.concurrency_gate.queued.vip,
  };
}

const start = Date.now();
const samples = [await state()];
while (Date.now() < deadline) {
  await delay(Math.min(args.sampleMs, Math.max(0, deadline - Date.now())));
  samples.push(await state());
  const s = samples.at(-1);
  process.stderr.write(`[soak ${s.t}s] rss ${(s.rss_kb / 1024).toFixed(1)} MiB, fds ${s.fds}, live ${s.live}, streams ${s.streams}, gate ${s.gate_in_flight}, queued ${s.queued}\n`);
}
stopping = true;
await Promise.race([Promise.all(loops), delay(60000)]);
agent.destroy();
// Idle: everything must go back to 0 (within the longest timeout and its grace).
let idle;
const idleBy = Date.now() + 30000;
for (;;) {
  idle = await state();
  if ((idle.live === 0 && idle.streams === 0 && idle.gate_in_flight === 0 && idle.queued === 0) || Date.now() > idleBy) break;
  await delay(500);
}
const load = samples.slice(1);
const pick = (k) => load.map((s) => s[k]);
const report = {
  seconds: args.seconds,
  requests: counts,
  rss_mib: {
    first: +(load[0].rss_kb / 1024).toFixed(1),
    max: +(Math.max(...pick('rss_kb')) / 1024).toFixed(1),
    last: +(load.at(-1).rss_kb / 1024).toFixed(1),
    idle: +(idle.rss_kb / 1024).toFixed(1),
  },
  fds: { before: samples[0].fds, max: Math.max(...pick('fds')), idle: idle.fds },
  live_max: Math.max(...pick('live')),
  streams_max: Math.max(...pick('streams')),
  idle,
  gateway_alive: gw.child.exitCode === null,
  samples,
};
await gw.stop();
await sim.stop();
await up.close();
console.log(JSON.stringify(report));
const ok = report.gateway_alive && idle.live === 0 && idle.streams === 0 && idle.gate_in_flight === 0 && idle.queued === 0;
process.stderr.write(
  `soak: ${args.seconds}s; requests ${JSON.stringify(counts)}\n` +
    `soak: RSS MiB first ${report.rss_mib.first}, max ${report.rss_mib.max}, last ${report.rss_mib.last}, idle ${report.rss_mib.idle}; ` +
    `fds before ${report.fds.before}, max ${report.fds.max}, idle ${report.fds.idle}; ` +
    `idle: live ${idle.live}, streams ${idle.streams}, gate ${idle.gate_in_flight}, queued ${idle.queued} -> ${ok ? 'ok' : 'NOT BACK TO 0'}\n`,
);
process.exit(ok ? 0 : 1);
