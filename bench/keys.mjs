#!/usr/bin/env node
// Key lookup with many keys, and revocation across a fleet (docs/benchmarks.md, "Keys").
// One run, one machine, the same gateway binary:
//
//   1. The gateway's CPU per request and its memory with 1 key and with --keys stored keys
//      (the key store, SQLite): the same requests (the in-process simulated model answering
//      at once, max_tokens 1, 16 clients), each sent with a key drawn at random from the
//      stored ones; the gateway process's utime + stime (/proc) over the requests, and its
//      RSS once they are done. Rounds interleaved; medians.
//   2. Revocation to refusal across 3 instances sharing PostgreSQL (key_store.poll 1s, the
//      default): a key is deleted through one instance, and each of the other two is asked
//      with it every 10 ms until it refuses; the time from the DELETE's answer.
//
// Usage: node bench/keys.mjs [--keys 100000] [--n 20000] [--c 16] [--rounds 3] [--revocations 5]
import crypto from 'node:crypto';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { request, startGateway, startPostgres, tempDir, waitFor } from '../tests/integration/lib.mjs';

const arg = (name, dflt) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
};
const KEYS = arg('keys', 100000);
const N = arg('n', 20000);
const C = arg('c', 16);
const ROUNDS = arg('rounds', 3);
const REVOCATIONS = arg('revocations', 5);
const SECRET = 'bench-hmac-key-0123456789';
const ADMIN = 'sk-admin-0000000000000000';
const HZ = 100;

const digest = (s) => crypto.createHmac('sha256', SECRET).update(s).digest('hex');
const median = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];

function cpuTicks(pid) {
  const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const rest = f.slice(f.lastIndexOf(')') + 2).split(' ');
  return Number(rest[11]) + Number(rest[12]); // utime, stime
}
const rssKiB = (pid) => Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))[1]);

const config = (dir, extra = {}) => ({
  data_dir: dir,
  access_log: '',
  keys: [{ name: 'admin', key: ADMIN, tenant: 'ops', admin: true }],
  key_store: { enabled: true, secret: SECRET },
  models: [{ alias: 'm', provider: 'simulated', sim: { ttft: '0ms', inter_token: '0ms', jitter: 0 } }],
  ...extra,
});

// A data directory whose history.db holds `n` stored keys (written straight into the
// table the gateway made); returns their secrets.
async function storeWith(n) {
  const dir = tempDir('sluice-bench-keys-');
  const gw = await startGateway(config(dir)); // creates and migrates the database
  await gw.stop();
  const secrets = [];
  const lines = ['BEGIN;'];
  for (let i = 0; i < n; i++) {
    const s = `sk-${crypto.randomBytes(32).toString('base64url')}`;
    secrets.push(s);
    lines.push(
      `INSERT INTO api_keys (name, digest, masked, tenant, tier, models, role, max_in_flight, enabled, created_ms, updated_ms) VALUES ('k${i}', '${digest(s)}', 'sk-***${s.slice(-4)}', 't${i % 100}', 'standard', '*', 'user', -1, 1, 0, 0);`,
    );
  }
  lines.push('UPDATE api_keys_version SET version = version + 1 WHERE id = 1;', 'COMMIT;');
  const sql = path.join(dir, 'keys.sql');
  fs.writeFileSync(sql, lines.join('\n'));
  execFileSync('sqlite3', [path.join(dir, 'history.db'), `.read ${sql}`]);
  return { dir, secrets };
}

async function load(gw, secrets, n) {
  let next = 0;
  const worker = async () => {
    while (next < n) {
      next++;
      const key = secrets[Math.floor(Math.random() * secrets.length)];
      const r = await request(`${gw.url}/v1/chat/completions`, {
        method: 'POST',
        key,
        body: { model: 'm', max_tokens: 1, messages: [{ role: 'user', content: 'hi' }] },
      });
      if (r.status !== 200) throw new Error(`HTTP ${r.status}: ${r.text}`);
    }
  };
  await Promise.all(Array.from({ length: C }, worker));
}

const stores = { 1: await storeWith(1), [KEYS]: await storeWith(KEYS) };
const per = { 1: [], [KEYS]: [] };
const rss = { 1: [], [KEYS]: [] };
const ready = { 1: [], [KEYS]: [] };
for (let round = 0; round < ROUNDS; round++) {
  for (const n of [1, KEYS]) {
    const t0 = performance.now();
    const gw = await startGateway(config(stores[n].dir));
    await waitFor(async () => (await gw.infra()).keys.in_force === n + 1, { timeout: 60000, what: `${n} keys in force` });
    ready[n].push(performance.now() - t0);
    await load(gw, stores[n].secrets, 1000); // warm-up, not counted
    const t = cpuTicks(gw.pid);
    await load(gw, stores[n].secrets, N);
    per[n].push(((cpuTicks(gw.pid) - t) / HZ / N) * 1e6);
    rss[n].push(rssKiB(gw.pid));
    await gw.stop();
  }
}

// 2. Revocation across three instances.
const pg = await startPostgres();
const fleet = await Promise.all(
  ['a', 'b', 'c'].map((x) =>
    startGateway(config(tempDir('sluice-bench-fleet-'), { instance: `gw-${x}`, history: { url: pg.url } })),
  ),
);
const revocations = [];
for (let i = 0; i < REVOCATIONS; i++) {
  const made = await request(`${fleet[0].url}/admin/keys`, { method: 'POST', key: ADMIN, body: { name: `r${i}` } });
  if (made.status !== 201) throw new Error(made.text);
  const s = made.json.secret;
  for (const gw of fleet) {
    await waitFor(async () => (await request(`${gw.url}/v1/models`, { key: s })).status === 200, { timeout: 5000, what: 'the key everywhere' });
  }
  const del = await request(`${fleet[0].url}/admin/keys/r${i}`, { method: 'DELETE', key: ADMIN });
  const t0 = performance.now();
  if (del.status !== 200) throw new Error(del.text);
  const times = await Promise.all(
    fleet.map(async (gw) => {
      await waitFor(async () => (await request(`${gw.url}/v1/models`, { key: s })).status === 401, {
        timeout: 10000,
        interval: 10,
        what: 'the refusal',
      });
      return performance.now() - t0;
    }),
  );
  revocations.push(times);
}
await Promise.all(fleet.map((gw) => gw.stop()));
await pg.stop();

const rows = [1, KEYS].map((n) => ({
  run: 'lookup',
  keys: n,
  n: N,
  us_per_request: Math.round(median(per[n]) * 10) / 10,
  rounds: per[n].map((x) => Math.round(x * 10) / 10),
  rss_mib: Math.round((median(rss[n]) / 1024) * 10) / 10,
  in_force_after_start_ms: Math.round(median(ready[n])),
}));
for (const r of rows) console.log(JSON.stringify(r));
const others = revocations.flatMap((t) => t.slice(1));
console.log(JSON.stringify({ run: 'revocation', instances: 3, poll_ms: 1000, own_ms: revocations.map((t) => Math.round(t[0])), others_ms: others.map(Math.round) }));
console.log('\n| stored keys | gateway CPU µs per request (median) | rounds | RSS MiB | start to keys in force, ms |');
console.log('|---|---|---|---|---|');
for (const r of rows) console.log(`| ${r.keys.toLocaleString('en')} | ${r.us_per_request} | ${r.rounds.join(', ')} | ${r.rss_mib} | ${r.in_force_after_start_ms} |`);
console.log(`\nRevocation to refusal, 3 instances, poll 1 s, ${REVOCATIONS} revocations: the instance that deleted it ${Math.round(median(revocations.map((t) => t[0])))} ms (median); the other two: median ${Math.round(median(others))} ms, max ${Math.round(Math.max(...others))} ms.`);
