#!/usr/bin/env node
// What an idle client connection costs the gateway in memory, plain HTTP against TLS: one
// gateway of each kind (the same configuration but `tls`), N connections opened to each
// (a TLS one completes its handshake; a plain one sends one request and keeps the
// connection), then the growth of the process's RSS divided by N.
//
// Usage: node bench/tls_memory.mjs [--connections 1000]
// Needs the built gateway (build/sluice, or SLUICE_BIN) and openssl. Prints a table and
// one JSON line.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import tls from 'node:tls';

import { keysAll, startGateway, tempDir } from '../tests/integration/lib.mjs';

const argv = process.argv.slice(2);
const n = Number(argv[argv.indexOf('--connections') + 1] || 1000);
if (!Number.isInteger(n) || n < 1 || n > 20000) {
  console.error('usage: node bench/tls_memory.mjs [--connections 1..20000]');
  process.exit(2);
}
const delay = (ms) => new Promise((r) => setTimeout(r, ms));
const rssKb = (pid) => Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))[1]);

const dir = tempDir('sluice-bench-tls-');
const key = path.join(dir, 'gw.key');
const crt = path.join(dir, 'gw.crt');
execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', crt, '-days', '2',
  '-subj', '/CN=localhost', '-addext', 'subjectAltName=IP:127.0.0.1'], { stdio: 'ignore' });
const base = { keys: keysAll(), models: [{ alias: 'demo', provider: 'simulated' }], access_log: '', history: { backend: 'none' } };

async function measure(gw, open) {
  await delay(300);
  const before = rssKb(gw.pid);
  const socks = [];
  for (let i = 0; i < n; i += 50) socks.push(...(await Promise.all(Array.from({ length: Math.min(50, n - i) }, open))));
  await delay(500);
  const after = rssKb(gw.pid);
  for (const s of socks) s.destroy();
  return { before_kb: before, after_kb: after, per_connection_kb: +((after - before) / n).toFixed(1) };
}

const plainGw = await startGateway(base);
const plain = await measure(plainGw, () => new Promise((resolve, reject) => {
  const s = net.connect(plainGw.port, '127.0.0.1', () => s.write('GET /health HTTP/1.1\r\nHost: x\r\n\r\n'));
  s.once('data', () => resolve(s));
  s.on('error', reject);
}));
await plainGw.stop();

const tlsGw = await startGateway({ ...base, tls: { cert_file: crt, key_file: key } });
const ca = fs.readFileSync(crt);
const secure = await measure(tlsGw, () => new Promise((resolve, reject) => {
  const s = tls.connect({ host: '127.0.0.1', port: tlsGw.port, ca }, () => resolve(s));
  s.on('error', reject);
}));
await tlsGw.stop();

console.log(`idle connections: ${n} to each (a fresh gateway each, workers 2)`);
console.log('| listener | RSS before (KiB) | RSS after (KiB) | per connection (KiB) |');
console.log('|---|---|---|---|');
for (const [name, r] of [['plain HTTP', plain], ['TLS', secure]]) {
  console.log(`| ${name} | ${r.before_kb} | ${r.after_kb} | ${r.per_connection_kb} |`);
}
console.log(JSON.stringify({ connections: n, plain, tls: secure }));
