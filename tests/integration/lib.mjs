// Shared helpers for the integration tests: real `sluice serve` and `sluice sim` processes,
// a tiny YAML emitter for gateway configs, an SSE reader with arrival timestamps, raw HTTP
// requests (no connection pooling) and bounded wait helpers.
//
// Every process started here is tracked and stopped by its own pid (SIGTERM, then SIGKILL
// after a timeout). Nothing is ever killed by name.
import { execFile, spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as delay } from 'node:timers/promises';

const here = path.dirname(fileURLToPath(import.meta.url));
export const REPO = path.resolve(here, '..', '..');
export const BIN = process.env.SLUICE_BIN || path.join(REPO, 'build', 'sluice');

// Secrets used by the tests. The access-log test checks that none of them is ever written.
export const KEY = 'sk-test-0123456789abcdef';         // masked: sk-test-***cdef
export const KEY_LIMITED = 'sk-limited-aaaabbbbccccdddd';
export const BAD_KEY = 'sk-wrong-zzzzyyyyxxxxwwww';

export { delay };

// ---- generic waiting ---------------------------------------------------------------

// Rejects after `ms` with a message naming what was awaited.
export function withTimeout(promise, ms, what) {
  let timer;
  const t = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
  });
  return Promise.race([promise, t]).finally(() => clearTimeout(timer));
}

// Polls `fn` (sync or async) until it returns a truthy value; returns that value.
// Rejects after `timeout` ms, with the last value or error in the message.
export async function waitFor(fn, { timeout = 5000, interval = 50, what = 'a condition' } = {}) {
  const end = Date.now() + timeout;
  let last;
  for (;;) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    if (Date.now() >= end) {
      const detail = last instanceof Error ? last.message : JSON.stringify(last);
      throw new Error(`timed out after ${timeout} ms waiting for ${what} (last: ${detail})`);
    }
    await delay(interval);
  }
}

// ---- YAML ----------------------------------------------------------------------------

function yamlKey(k) {
  return /^[A-Za-z_][A-Za-z0-9_]*$/.test(k) ? k : JSON.stringify(k);
}

function yamlScalar(v) {
  if (typeof v === 'string') return JSON.stringify(v); // a JSON string is a YAML double-quoted scalar
  if (typeof v === 'number') {
    if (!Number.isFinite(v)) throw new Error(`cannot write ${v} to YAML`);
    return String(v);
  }
  if (typeof v === 'boolean') return v ? 'true' : 'false';
  throw new Error(`cannot write a ${typeof v} (${v}) as a YAML scalar`);
}

const isMap = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

function yamlLines(value, indent) {
  const pad = ' '.repeat(indent);
  if (!isMap(value)) throw new Error('yamlLines expects a map');
  const lines = [];
  for (const [k, v] of Object.entries(value)) {
    if (v === undefined) continue;
    const key = `${pad}${yamlKey(k)}:`;
    if (isMap(v)) {
      if (Object.keys(v).length === 0) lines.push(`${key} {}`);
      else lines.push(key, ...yamlLines(v, indent + 2));
    } else if (Array.isArray(v)) {
      if (v.length === 0) {
        lines.push(`${key} []`);
      } else if (v.every((x) => !isMap(x) && !Array.isArray(x))) {
        lines.push(`${key} [${v.map(yamlScalar).join(', ')}]`);
      } else {
        lines.push(key);
        for (const item of v) {
          if (!isMap(item)) throw new Error('a YAML list mixes maps and scalars');
          const sub = yamlLines(item, indent + 4);
          if (sub.length === 0) {
            lines.push(`${pad}  - {}`);
            continue;
          }
          sub[0] = `${pad}  - ${sub[0].trimStart()}`;
          lines.push(...sub);
        }
      }
    } else {
      lines.push(`${key} ${yamlScalar(v)}`);
    }
  }
  return lines;
}

export function toYaml(obj) {
  return yamlLines(obj, 0).join('\n') + '\n';
}

// ---- processes -------------------------------------------------------------------------

const live = new Set();
// Servers that are not our children (PostgreSQL's postmaster runs under runuser): a kill
// by their pid, for the same last resort.
const stopAtExit = [];
process.on('exit', () => {
  for (const stop of stopAtExit) {
    try {
      stop();
    } catch {
      /* already gone */
    }
  }
  // Last resort if a test crashed before its after(): each child by its own pid.
  for (const child of live) {
    try {
      child.kill('SIGKILL');
    } catch {
      /* already gone */
    }
  }
});

// Temp dirs (configs, access logs) are removed when the test process exits, unless
// SLUICE_IT_KEEP is set (to look at them after a failure).
const tempDirs = [];
process.on('exit', () => {
  if (process.env.SLUICE_IT_KEEP) return;
  for (const d of tempDirs) fs.rmSync(d, { recursive: true, force: true });
});

export function tempDir(prefix = 'sluice-it-') {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  tempDirs.push(d);
  return d;
}

// Spawns BIN with `args` and resolves once `pattern` (with a port capture group) appears on
// the named output stream. Rejects if the process exits first or after `timeout` ms.
async function spawnServer(args, { stream, pattern, timeout = 15000, env, name }) {
  if (!fs.existsSync(BIN)) throw new Error(`${BIN} does not exist: build it first (make build)`);
  const child = spawn(BIN, args, { stdio: ['ignore', 'pipe', 'pipe'], env: env ?? process.env });
  live.add(child);
  const out = { stdout: '', stderr: '' };
  const exited = new Promise((resolve) => {
    child.on('exit', (code, signal) => {
      live.delete(child);
      if (!child.stopping) {
        // Nobody asked it to stop: say so loudly, with the end of its output.
        // A sanitizer's report: from its first line (the stack is what matters).
        const all = out.stderr + out.stdout;
        const report = all.search(/==\d+==ERROR: |runtime error: /);
        const tail = report >= 0
          ? all.slice(Math.max(0, report - 200)).split('\n').slice(0, 60).join('\n')
          : all.split('\n').slice(-15).join('\n');
        process.stderr.write(`\n*** ${name} (pid ${child.pid}) exited unexpectedly: code ${code}, signal ${signal}\n${tail}\n`);
      }
      resolve({ code, signal, at: performance.now() });
    });
  });
  const ready = new Promise((resolve, reject) => {
    const check = () => {
      const m = out[stream].match(pattern);
      if (m) resolve(Number(m[1]));
    };
    child.stdout.on('data', (d) => {
      out.stdout += d;
      check();
    });
    child.stderr.on('data', (d) => {
      out.stderr += d;
      check();
    });
    child.on('error', reject);
    exited.then(({ code, signal }) =>
      reject(new Error(`${name} exited (code ${code}, signal ${signal}) before it was ready:\n${out.stderr}${out.stdout}`)),
    );
  });
  const proc = {
    name,
    child,
    pid: child.pid,
    exited,
    output: out,
    port: 0,
    stop: (timeoutMs) => stopProcess(proc, timeoutMs),
  };
  try {
    proc.port = await withTimeout(ready, timeout, `${name} to print its listening line`);
  } catch (e) {
    await stopProcess(proc, 2000);
    throw e;
  }
  return proc;
}

// SIGTERM, then SIGKILL if the process is still there after `timeoutMs`.
export async function stopProcess(proc, timeoutMs = 6000) {
  const c = proc.child;
  if (c.exitCode !== null || c.signalCode !== null) return proc.exited;
  c.stopping = true;
  c.kill('SIGTERM');
  let timer;
  const r = await Promise.race([proc.exited, new Promise((res) => (timer = setTimeout(() => res(null), timeoutMs)))]);
  clearTimeout(timer);
  if (r) return r;
  c.kill('SIGKILL');
  return proc.exited;
}

// ---- simulator -----------------------------------------------------------------------

// Starts `sluice sim` on 127.0.0.1 port 0. `flags` maps flag names without dashes
// (e.g. {ttft: '1s', 'inter-token': '100ms', jitter: 0}) to values.
export async function startSim(flags = {}) {
  const args = ['sim', '--host', '127.0.0.1', '--port', '0'];
  const all = { jitter: 0, 'shutdown-grace': '500ms', ...flags };
  for (const [k, v] of Object.entries(all)) {
    for (const one of Array.isArray(v) ? v : [v]) args.push(`--${k}`, String(one));
  }
  const proc = await spawnServer(args, {
    stream: 'stdout',
    pattern: /sluice-sim listening on 127\.0\.0\.1:(\d+)/,
    name: 'sluice sim',
  });
  const url = `http://127.0.0.1:${proc.port}`;
  return Object.assign(proc, {
    url,
    async stats() {
      const r = await rawRequest({ port: proc.port, method: 'GET', path: '/sim/stats' });
      assertOk(r, 'GET /sim/stats');
      return JSON.parse(r.body);
    },
    async reset() {
      const r = await rawRequest({ port: proc.port, method: 'POST', path: '/sim/reset', body: '' });
      assertOk(r, 'POST /sim/reset');
      return JSON.parse(r.body);
    },
    // POST /sim/config with field names as GET /sim/config shows them (ttft_ms, abort_rate...).
    async configure(settings) {
      const r = await rawRequest({
        port: proc.port,
        method: 'POST',
        path: '/sim/config',
        body: JSON.stringify(settings),
        headers: { 'content-type': 'application/json' },
      });
      assertOk(r, `POST /sim/config ${JSON.stringify(settings)}`);
      return JSON.parse(r.body);
    },
  });
}

function assertOk(r, what) {
  if (r.status !== 200) throw new Error(`${what}: HTTP ${r.status}: ${r.body}`);
}

// ---- gateway -------------------------------------------------------------------------

// Starts `sluice serve` with `config` (a plain object, written as YAML into a fresh temp
// dir). Fills in, unless given: listen 127.0.0.1:0, workers 2, an access log file in the
// temp dir, timeouts.shutdown_grace 2s, and an admin listener on 127.0.0.1:0 (its port is
// `adminPort`: /metrics and /infra without a key; `admin: null` leaves it out).
export async function startGateway(config, { env, args = [] } = {}) {
  const dir = tempDir('sluice-gw-');
  const logPath = path.join(dir, 'access.log');
  const cfg = {
    instance: 'it-gw',
    listen: '127.0.0.1:0',
    workers: 2,
    access_log: logPath,
    data_dir: dir, // history.db (SQLite, on by default) and the events fallback file
    admin: { listen: '127.0.0.1:0' },
    ...config,
  };
  if (cfg.admin === null) delete cfg.admin;
  // (No drain delay by default: a stop() would wait it out; the shutdown tests set one.)
  cfg.timeouts = { shutdown_grace: '2s', drain_delay: '0s', ...(config.timeouts ?? {}) };
  const yaml = toYaml(cfg);
  const configPath = path.join(dir, 'sluice.yaml');
  fs.writeFileSync(configPath, yaml);
  const proc = await spawnServer(['serve', '--config', configPath, ...args], {
    stream: 'stderr',
    pattern: /sluice listening on 127\.0\.0\.1:(\d+)/,
    name: 'sluice serve',
    env,
  });
  const url = `http://127.0.0.1:${proc.port}`;
  const admin = /sluice admin listening on [^\n]*:(\d+)/.exec(proc.output.stderr);
  const adminPort = admin ? Number(admin[1]) : 0;
  return Object.assign(proc, {
    url,
    adminPort,
    adminUrl: adminPort ? `http://127.0.0.1:${adminPort}` : '',
    // GET /infra (parsed) and /metrics (text) on the admin listener.
    async infra() {
      const r = await rawRequest({ port: adminPort, path: '/infra' });
      if (r.status !== 200) throw new Error(`GET /infra: HTTP ${r.status}: ${r.body}`);
      return JSON.parse(r.body);
    },
    async metrics() {
      const r = await rawRequest({ port: adminPort, path: '/metrics' });
      if (r.status !== 200) throw new Error(`GET /metrics: HTTP ${r.status}: ${r.body}`);
      return r.body;
    },
    // One series from a fresh /metrics page (metricValue() below): a number or undefined.
    async metric(name, labels = {}) {
      return metricValue(await this.metrics(), name, labels);
    },
    dir,
    configPath,
    yaml,
    logPath: cfg.access_log,
    logText() {
      return fs.existsSync(cfg.access_log) ? fs.readFileSync(cfg.access_log, 'utf8') : '';
    },
    // Every access-log line, parsed (throws on a line that is not JSON).
    logLines() {
      return this.logText()
        .split('\n')
        .filter((l) => l.length > 0)
        .map((l) => JSON.parse(l));
    },
    // Waits for the access-log line of `requestId`.
    async logFor(requestId, timeout = 5000) {
      return waitFor(() => this.logLines().find((l) => l.request_id === requestId), {
        timeout,
        what: `the access-log line of request ${requestId}`,
      });
    },
  });
}

// Writes `cfg`'s sections over the running gateway's file (its instance, listeners and
// data directory kept: everything before `keys:`) and reloads it through the admin
// listener. Resolves to POST /admin/reload's answer ({reloaded, message}); a refusal too.
export async function reloadWith(gw, cfg) {
  const now = fs.readFileSync(gw.configPath, 'utf8');
  // (startGateway's timeouts, as it wrote them: a reload that changes them is told so.)
  const body = { ...cfg, timeouts: { shutdown_grace: '2s', drain_delay: '0s', ...(cfg.timeouts ?? {}) } };
  fs.writeFileSync(gw.configPath, now.slice(0, now.indexOf('keys:')) + toYaml(body));
  const r = await rawRequest({ port: gw.adminPort, method: 'POST', path: '/admin/reload', body: '' });
  return { status: r.status, ...JSON.parse(r.body) };
}

// A config with `overrides` laid over `base`: objects are merged key by key, anything else
// (arrays, scalars) replaces; a key set to undefined is removed. Neither input is changed.
export function mergeConfig(base, overrides = {}) {
  const plain = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
  const out = { ...base };
  for (const [k, v] of Object.entries(overrides)) {
    if (v === undefined) delete out[k];
    else out[k] = plain(v) && plain(out[k]) ? mergeConfig(out[k], v) : v;
  }
  return out;
}

// A gateway of its own for one test: starts `base` (a config object, or a function returning
// one) with `overrides` merged in (mergeConfig), runs fn(gw), and stops the gateway however
// fn ends. For a test that needs a setting the file's shared gateway must not have:
//   await withGateway(fileConfig, { limits: { max_body_bytes: 4096 } }, async (gw) => { ... });
//   await withGateway(config, async (gw) => { ... });          (no overrides)
// `opts` goes to startGateway ({env, args}).
export async function withGateway(base, overrides, fn, opts) {
  if (typeof overrides === 'function') [overrides, fn, opts] = [{}, overrides, fn];
  const gw = await startGateway(mergeConfig(typeof base === 'function' ? base() : base, overrides), opts);
  try {
    return await fn(gw);
  } finally {
    await gw.stop();
  }
}

// ---- metrics ---------------------------------------------------------------------------

// The samples of a /metrics page (Prometheus text format): [{name, labels, value}], labels
// as an object. Comments (# HELP, # TYPE) and blank lines are skipped; a line that is not a
// sample throws, so a malformed page fails the test that reads it.
export function parseMetrics(text) {
  const samples = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: -?\d+)?$/.exec(line);
    if (!m) throw new Error(`not a Prometheus sample line: ${JSON.stringify(line)}`);
    const labels = {};
    const body = m[2] ?? '';
    const re = /\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*(,|$)/y;
    let at = 0;
    while (at < body.length) {
      re.lastIndex = at;
      const l = re.exec(body);
      if (!l) throw new Error(`bad labels in ${JSON.stringify(line)}`);
      labels[l[1]] = l[2].replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
      at = re.lastIndex;
    }
    const v = m[3];
    samples.push({ name: m[1], labels, value: v === '+Inf' ? Infinity : v === '-Inf' ? -Infinity : Number(v) });
  }
  return samples;
}

// The value of one series on a /metrics page: `labels` ({model: 'demo'}) must be the whole
// label set of the series, in any order. Undefined when the page has no such series.
export function metricValue(text, name, labels = {}) {
  const want = Object.entries(labels).map(([k, v]) => [k, String(v)]);
  const found = parseMetrics(text).find(
    (s) =>
      s.name === name &&
      Object.keys(s.labels).length === want.length &&
      want.every(([k, v]) => s.labels[k] === v),
  );
  return found?.value;
}

// A minimal valid gateway config around the given routes.
export function keysAll(extra = []) {
  return [{ name: 'test-app', key: KEY, tenant: 'acme', tier: 'gold', models: ['*'] }, ...extra];
}

// ---- HTTP ----------------------------------------------------------------------------

// One request on a fresh connection (no pooling), so it sees exactly what the server does
// with a new connection. Resolves {status, headers, body}; rejects on a socket error.
export function rawRequest({ port, method = 'GET', path: p = '/', headers = {}, body, timeout = 10000, localAddress }) {
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: '127.0.0.1', port, method, path: p, headers, agent: false, localAddress },
      (res) => {
        const parts = [];
        res.on('data', (d) => parts.push(d));
        res.on('end', () =>
          resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(parts).toString('utf8') }),
        );
        res.on('error', reject);
      },
    );
    req.setTimeout(timeout, () => req.destroy(new Error(`no answer within ${timeout} ms`)));
    req.on('error', reject);
    if (body !== undefined) req.end(body);
    else req.end();
  });
}

// JSON request through fetch. Resolves {status, headers, text, json}.
export async function request(url, { method = 'GET', headers = {}, body, key, timeout = 15000, signal } = {}) {
  const h = { ...headers };
  if (key) h.authorization = `Bearer ${key}`;
  let payload = body;
  if (body !== undefined && typeof body !== 'string') {
    payload = JSON.stringify(body);
    h['content-type'] ??= 'application/json';
  }
  const limit = AbortSignal.timeout(timeout);
  const res = await fetch(url, { method, headers: h, body: payload, signal: signal ? AbortSignal.any([signal, limit]) : limit });
  const text = await res.text();
  let json;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, headers: res.headers, text, json };
}

export function chat(gw, body, opts = {}) {
  return request(`${gw.url}/v1/chat/completions`, { method: 'POST', key: KEY, ...opts, body });
}

export const USER = [{ role: 'user', content: 'Say something.' }];

// ---- the simulator's text (src/sim/answer.cpp, docs/simulator.md) ----------------------
// The same generator as the simulator's, token for token: change both together.

// Its vocabulary, in order.
export const SIM_WORDS = [
  'the', 'of', 'and', 'to', 'in', 'is', 'that', 'for', 'it', 'as', 'was', 'with', 'be', 'by', 'on', 'not', 'this',
  'are', 'or', 'from', 'at', 'which', 'but', 'have', 'an', 'had', 'they', 'you', 'were', 'their', 'one', 'all', 'we',
  'can', 'her', 'has', 'there', 'been', 'if', 'more', 'when', 'will', 'would', 'who', 'so', 'no', 'she', 'other',
  'its', 'may', 'these', 'about', 'them', 'some', 'time', 'could', 'into', 'than', 'only', 'two', 'new', 'first',
  'any', 'then', 'like', 'our', 'what', 'also', 'over', 'most', 'made', 'after', 'such', 'many', 'well', 'where',
  'people', 'very', 'must', 'through', 'before', 'years', 'between', 'way', 'each', 'great', 'because', 'those',
  'same', 'state', 'both', 'work', 'good', 'long', 'world', 'down', 'under', 'still', 'just', 'life', 'own', 'should',
  'might', 'back', 'here', 'day', 'part', 'place', 'while', 'even', 'much', 'house', 'small', 'number', 'against',
  'high', 'old', 'water', 'system', 'case', 'group', 'found', 'never', 'since', 'home', 'point', 'come', 'take',
  'know', 'make', 'thought', 'three', 'large', 'light', 'hand', 'money', 'order', 'power', 'night', 'city', 'school',
  'often', 'country', 'again', 'family', 'left', 'public', 'within', 'open', 'kind', 'change', 'word', 'less',
  'story', 'market', 'field', 'around', 'side', 'end', 'form', 'morning', 'table', 'river', 'sound', 'road', 'door',
  'music', 'paper', 'garden', 'window', 'letter', 'voice', 'answer', 'question', 'reason', 'color', 'idea', 'book',
  'child', 'mother', 'father', 'friend', 'simple', 'early', 'quiet', 'warm', 'bright', 'clear', 'green', 'blue',
  'happy', 'ready', 'strong', 'gentle', 'careful', 'sudden', 'walk', 'read', 'write', 'build', 'find', 'bring',
  'carry', 'follow', 'learn', 'begin', 'watch', 'listen', 'speak', 'remember', 'show', 'keep', 'turn', 'move', 'hold',
  'stand', 'leave', 'live', 'seem', 'feel', 'give', 'ask', 'call', 'try', 'need', 'use', 'tell', 'help', 'play',
  'run', 'look', 'stay', 'grow', 'close', 'wait', 'travel', 'return', 'explain', 'decide', 'share', 'plan', 'visit',
  'mean', 'consider', 'evening', 'summer', 'winter', 'mountain', 'ocean', 'forest', 'village', 'street', 'station',
  'island', 'bridge', 'kitchen', 'picture', 'journey', 'history', 'science', 'nature', 'language', 'machine',
  'problem', 'project', 'moment', 'weather', 'season', 'energy', 'future', 'memory', 'pattern', 'signal', 'surface',
  'bird', 'tree', 'stone', 'cloud', 'rain', 'snow', 'wind', 'fire', 'earth', 'star', 'moon', 'sun', 'sea', 'lake',
  'hill', 'valley', 'path', 'corner', 'edge', 'center', 'circle', 'line', 'shape', 'size', 'weight', 'speed',
  'distance', 'minute', 'hour', 'week', 'month', 'year', 'today', 'tomorrow', 'yesterday', 'always', 'sometimes',
  'usually', 'almost', 'nearly', 'quite', 'rather', 'perhaps', 'together', 'alone', 'above', 'below', 'inside',
  'outside', 'behind', 'beside', 'toward', 'across', 'along', 'among', 'during', 'until', 'without', 'every',
  'another', 'several', 'few', 'enough', 'little', 'different', 'important', 'possible', 'certain', 'common',
  'special', 'whole', 'free', 'full', 'real', 'true', 'sure', 'late', 'young', 'next', 'last', 'best', 'better',
  'dark', 'deep', 'wide', 'soft', 'fresh', 'quick', 'slow', 'heavy', 'short', 'tall', 'round', 'flat', 'empty',
  'rich', 'poor', 'safe', 'busy', 'calm', 'cold', 'hot', 'dry', 'wet',
];

// A request's seed (a Number or a BigInt, negative too) folded to 32 bits, as
// sim::fold_seed: of its 64-bit two's complement, the low half XOR (the high half *
// 0x9E3779B9 mod 2^32).
export function simSeed(seed = 0) {
  const b = BigInt.asUintN(64, BigInt(seed));
  return (Number(b & 0xffffffffn) ^ Math.imul(Number(b >> 32n), 0x9e3779b9)) >>> 0;
}

// mulberry32, as sim::Rng.
function simRng(state) {
  let a = state >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1) >>> 0;
    t = ((t + Math.imul(t ^ (t >>> 7), t | 61)) ^ t) >>> 0;
    return (t ^ (t >>> 14)) >>> 0;
  };
}

// The simulator's tokens for `seed` (default 0, as for a request without one): sentences of
// 4 to 12 words, capitalised, ending with '.', a comma after one word in 11; token 0 has no
// leading space, the others one.
export function simTokens(n, seed = 0) {
  const next = simRng(simSeed(seed));
  const out = [];
  let left = 0;
  for (let i = 0; i < n; i++) {
    const start = left === 0;
    if (start) left = 4 + (next() % 9);
    const r = next();
    let w = SIM_WORDS[r % SIM_WORDS.length];
    if (start) w = w[0].toUpperCase() + w.slice(1);
    left--;
    if (left === 0) w += '.';
    else if (left >= 2 && (r >>> 16) % 11 === 0) w += ',';
    out.push(i === 0 ? w : ` ${w}`);
  }
  return out;
}

// The text of an answer of n tokens: what the simulator says without a stop, a format or
// a tool call.
export function simText(n, seed = 0) {
  return simTokens(n, seed).join('');
}

// lowbias32, as sim::hash32.
function simHash(x) {
  x = (x ^ (x >>> 16)) >>> 0;
  x = Math.imul(x, 0x7feb352d) >>> 0;
  x = (x ^ (x >>> 15)) >>> 0;
  x = Math.imul(x, 0x846ca68b) >>> 0;
  return (x ^ (x >>> 16)) >>> 0;
}

// The log probability the simulator gives token `index` (logprobs: true).
export function simLogprob(index, seed = 0) {
  const h = simHash((simSeed(seed) ^ simHash(index >>> 0)) >>> 0);
  return -(10 + (h % 691)) / 1000;
}

// ---- SSE -----------------------------------------------------------------------------

// Parses the SSE body incrementally. Events: {t, data, json?, event?} for data events and
// {t, comment} for comment lines; `t` is the arrival time (performance.now()) of the bytes
// that completed the event.
export class SseParser {
  constructor() {
    this.buf = '';
    this.events = [];
    this.data = null;
    this.event = '';
  }
  push(text, t) {
    this.buf += text.replace(/\r\n/g, '\n');
    let nl;
    while ((nl = this.buf.indexOf('\n')) >= 0) {
      const line = this.buf.slice(0, nl);
      this.buf = this.buf.slice(nl + 1);
      if (line === '') {
        if (this.data !== null) {
          const ev = { t, data: this.data };
          if (this.event) ev.event = this.event;
          if (this.data !== '[DONE]') {
            try {
              ev.json = JSON.parse(this.data);
            } catch {
              /* left as text */
            }
          }
          this.events.push(ev);
        }
        this.data = null;
        this.event = '';
      } else if (line.startsWith(':')) {
        this.events.push({ t, comment: line.slice(1).trim() });
      } else if (line.startsWith('data:')) {
        const v = line.slice(5).replace(/^ /, '');
        this.data = this.data === null ? v : `${this.data}\n${v}`;
      } else if (line.startsWith('event:')) {
        this.event = line.slice(6).trim();
      }
    }
  }
}

// POSTs `body` and reads the answer. For an event stream: {status, headers, raw, chunks:
// [{t, text}], events, done (saw [DONE]), ended (body ended normally), aborted, t0}.
// For anything else: {status, headers, raw, json}.
// Options: stopAfter(events) -> true aborts the fetch (the connection is closed);
// timeout bounds the whole exchange (then it throws).
export async function sse(url, body, { key = KEY, headers = {}, stopAfter, timeout = 20000 } = {}) {
  const ac = new AbortController();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    ac.abort();
  }, timeout);
  const t0 = performance.now();
  const h = { 'content-type': 'application/json', ...headers };
  if (key) h.authorization = `Bearer ${key}`;
  try {
    const res = await fetch(url, { method: 'POST', headers: h, body: JSON.stringify(body), signal: ac.signal });
    const out = { status: res.status, headers: res.headers, raw: '', t0, tHead: performance.now() };
    if (!(res.headers.get('content-type') ?? '').startsWith('text/event-stream')) {
      out.raw = await res.text();
      try {
        out.json = JSON.parse(out.raw);
      } catch {
        /* not JSON */
      }
      return out;
    }
    Object.assign(out, { chunks: [], events: [], done: false, ended: false, aborted: false });
    const parser = new SseParser();
    out.events = parser.events;
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    for (;;) {
      let r;
      try {
        r = await reader.read();
      } catch (e) {
        if (timedOut) throw new Error(`SSE stream not finished after ${timeout} ms; got so far:\n${out.raw}`);
        if (out.aborted) break;
        out.error = e;
        break;
      }
      if (r.done) {
        out.ended = true;
        break;
      }
      const t = performance.now();
      const text = dec.decode(r.value, { stream: true });
      out.raw += text;
      out.chunks.push({ t, text });
      parser.push(text, t);
      if (stopAfter && stopAfter(out.events)) {
        out.aborted = true;
        ac.abort();
        break;
      }
    }
    out.done = out.events.some((e) => e.data === '[DONE]');
    return out;
  } catch (e) {
    if (timedOut) throw new Error(`no complete answer from ${url} within ${timeout} ms`);
    throw e;
  } finally {
    clearTimeout(timer);
  }
}

// Data events carrying a chat.completion.chunk with non-empty delta content.
export function contentEvents(events) {
  return events.filter((e) => e.json?.choices?.[0]?.delta?.content);
}

export function assembled(events) {
  return contentEvents(events)
    .map((e) => e.json.choices[0].delta.content)
    .join('');
}

// ---- redis ---------------------------------------------------------------------------

// Starts a real redis-server on a free 127.0.0.1 port (no persistence), as a child process
// stopped by its pid. `stop()` ends it; `start()` brings it back on the same port (for
// outage drills); `cmd(...args)` runs one command through redis-cli and returns its
// output. redis-server must be installed (scripts/setup.sh --test).
// `args`: more of redis-server's options ('--replicaof', '127.0.0.1 6379'...). `sentinel`:
// lines of a sentinel's configuration file ('sentinel monitor m 127.0.0.1 6379 2'...):
// the server then runs as a sentinel (redis-server --sentinel, which is what redis-sentinel
// is), writing that file as sentinels do.
// `clients` loops each sending one request after another (`send()` answers a response
// with a status), pausing `pause` ms between, pushing every status into `statuses` until
// stop() (which waits for the requests under way).
export function underLoad(send, statuses, { clients = 4, pause = 5 } = {}) {
  let stopped = false;
  const loops = Array.from({ length: clients }, async () => {
    while (!stopped) {
      statuses.push((await send()).status);
      await delay(pause);
    }
  });
  return {
    async stop() {
      stopped = true;
      await Promise.all(loops);
    },
  };
}

export async function startRedis({ args = [], sentinel = null } = {}) {
  const port = await closedPort();
  // A directory of its own: a replica's full sync writes dump.rdb there, which a server
  // started later in the same directory would load (another test's counters).
  const dir = tempDir(sentinel ? 'sluice-sentinel-' : 'sluice-redis-');
  let conf = null;
  if (sentinel) {
    conf = path.join(dir, 'sentinel.conf');
    fs.writeFileSync(conf, `${sentinel.join('\n')}\n`);
  }
  const redis = {
    port,
    url: `redis://127.0.0.1:${port}`,
    proc: null,
    async start() {
      const base = conf
        ? [conf, '--sentinel', '--port', String(port), '--bind', '127.0.0.1', '--loglevel', 'warning']
        : ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--loglevel', 'warning', '--dir', dir];
      const child = spawn('redis-server', [...base, ...args.map(String)], { stdio: ['ignore', 'pipe', 'pipe'] });
      live.add(child);
      const exited = new Promise((resolve) =>
        child.on('exit', (code, signal) => {
          live.delete(child);
          resolve({ code, signal });
        }),
      );
      child.on('error', (e) => {
        throw new Error(`cannot start redis-server (install it: scripts/setup.sh --test): ${e.message}`);
      });
      child.stdout.resume();
      child.stderr.resume();
      this.proc = { child, pid: child.pid, exited, name: 'redis-server' };
      await waitFor(async () => (await this.cmd('PING').catch(() => '')).trim() === 'PONG', {
        timeout: 10000,
        what: `redis-server on port ${port} to answer PING`,
      });
      return this;
    },
    async stop() {
      if (this.proc) await stopProcess(this.proc, 3000);
      this.proc = null;
    },
    cmd(...args) {
      return new Promise((resolve, reject) =>
        execFile('redis-cli', ['-p', String(port), '--no-raw', ...args.map(String)], { timeout: 5000 }, (err, out) =>
          err ? reject(err) : resolve(out),
        ),
      );
    },
    // redis-cli --raw: plain values, one per line.
    raw(...args) {
      return new Promise((resolve, reject) =>
        execFile('redis-cli', ['-p', String(port), '--raw', ...args.map(String)], { timeout: 5000 }, (err, out) =>
          err ? reject(err) : resolve(out.trimEnd()),
        ),
      );
    },
  };
  return redis.start();
}

// ---- redis cluster -------------------------------------------------------------------

const CLUSTER_SLOTS = 16384;

// One redis-cli command against 127.0.0.1:`port`. `json`: parse the reply (RESP3 as JSON;
// null for a nil); else --raw, trimmed. `follow`: cluster mode (-c), following MOVED/ASK.
// redis-cli exits 0 on an error reply: it is turned into a rejection here.
function redisCli(port, args, { json = false, follow = false, timeout = 5000 } = {}) {
  const argv = ['-h', '127.0.0.1', '-p', String(port), ...(follow ? ['-c'] : []), json ? '--json' : '--raw', ...args.map(String)];
  return new Promise((resolve, reject) => {
    const child = execFile('redis-cli', argv, { timeout }, (err, out, errOut) => {
      if (err) return reject(new Error(`redis-cli ${argv.join(' ')}: ${err.message}${errOut}`));
      const text = out.trim();
      if (json) {
        if (text.startsWith('error:')) return reject(new Error(`redis-cli ${argv.join(' ')}: ${text}`));
        try {
          return resolve(JSON.parse(text));
        } catch {
          return reject(new Error(`redis-cli ${argv.join(' ')}: not JSON: ${text}`));
        }
      }
      if (/^(ERR|WRONGTYPE|MOVED|ASK|CLUSTERDOWN|TRYAGAIN|CROSSSLOT|LOADING|MASTERDOWN|NOAUTH|READONLY) /.test(text)) {
        return reject(new Error(`redis-cli ${argv.join(' ')}: ${text}`));
      }
      resolve(text);
    });
    child.stdin.end();
  });
}

// Starts a real Redis Cluster on 127.0.0.1: masters * (1 + replicas) servers from
// startRedis (own port, own directory with its nodes.conf, own cluster bus port: the
// default bus port, port + 10000, is past 65535 for much of the ephemeral range), joined by
// `redis-cli --cluster create` (which makes the first `masters` servers the masters), and
// resolves once every node says cluster_state:ok, sees all 16384 slots served and every
// replica's link to its master is up (ROLE: connected; one that never synced cannot fail
// over).
// redis-cli needs at least 3 masters. Which replica follows which master is redis-cli's
// choice (it shuffles them): ask ROLE or masterOf(), never assume nodes[masters + i].
// Returns {
//   nodes       the servers, as startRedis gives them (port, cmd(), raw(), stop(), start():
//               cmd/raw talk to that one node and do not follow redirects); stopping a
//               master (node.stop(), SIGTERM by pid) makes its replica take over after
//               nodeTimeout ms; start() brings the node back with its nodes.conf (it rejoins,
//               as a replica if it lost its slots)
//   url         'redis-cluster://127.0.0.1:<port>,127.0.0.1:<port>' (the first two nodes,
//               masters at creation, as seeds)
//   masters()   the running nodes whose ROLE is master now
//   masterOf(k) the node serving key k's slot now, as a running node's CLUSTER SLOTS says
//               (after a failover: call waitOk() first)
//   waitOk({ timeout = 20000 })  until every running node says cluster_state:ok, sees all
//               slots served by running masters (the same ones everywhere) and every running
//               replica is connected to its master: a failover, or a node's return, settled
//   cmd(...a)   a command through `redis-cli -c --raw` (follows redirects) on a running node
//   get(k)      GET k through `redis-cli -c` on a running node: the value, or null
//   stop()      stops every node
// }
export async function startRedisCluster({ masters = 3, replicas = 1, nodeTimeout = 1000 } = {}) {
  const count = masters * (1 + replicas);
  const nodes = [];
  const running = () => nodes.filter((n) => n.proc && n.proc.child.exitCode === null && n.proc.child.signalCode === null);
  const anyRunning = () => {
    const r = running();
    if (!r.length) throw new Error('no node of the Redis Cluster is running');
    return r[0];
  };
  // Slot ranges as one node sees them: [[from, to, masterPort], ...].
  const slotsSeenBy = async (node) =>
    (await redisCli(node.port, ['CLUSTER', 'SLOTS'], { json: true })).map(([from, to, master]) => [from, to, Number(master[1])]);

  // Why the cluster is not settled, or '' when it is.
  const unsettled = async ({ fresh = false } = {}) => {
    const up = running();
    const ports = new Set(up.map((n) => n.port));
    let seen = null;
    for (const n of up) {
      const info = await redisCli(n.port, ['CLUSTER', 'INFO']);
      if (!/^cluster_state:ok\s*$/m.test(info)) return `${n.port}: ${info.match(/^cluster_state:\S+/m)?.[0]}`;
      if (fresh && !new RegExp(`^cluster_known_nodes:${count}\\s*$`, 'm').test(info)) {
        return `${n.port}: ${info.match(/^cluster_known_nodes:\S+/m)?.[0]} of ${count}`;
      }
      const ranges = (await slotsSeenBy(n)).sort((a, b) => a[0] - b[0]);
      let covered = 0;
      for (const [from, to, port] of ranges) {
        if (!ports.has(port)) return `${n.port}: slots ${from}-${to} on ${port}, which is not running`;
        covered += to - from + 1;
      }
      if (covered !== CLUSTER_SLOTS) return `${n.port}: ${covered} of ${CLUSTER_SLOTS} slots served`;
      const view = JSON.stringify(ranges);
      if (seen !== null && view !== seen) return `${n.port} sees other slot owners than ${up[0].port}`;
      seen = view;
      const role = (await n.raw('ROLE')).split('\n');
      if (role[0] === 'slave' && role[3] !== 'connected') return `${n.port}: replica of ${role[2]} is ${role[3]}`;
    }
    return '';
  };
  // For waitFor: true, or an error saying why not (waitFor's message shows the last one).
  const settled = async (opts) => {
    const why = await unsettled(opts);
    if (why) throw new Error(why);
    return true;
  };

  const cluster = {
    nodes,
    url: '',
    async masters() {
      const out = [];
      for (const n of running()) {
        const role = await n.raw('ROLE').catch(() => '');
        if (role.split('\n')[0] === 'master') out.push(n);
      }
      return out;
    },
    async masterOf(key) {
      const asked = anyRunning();
      const slot = Number(await redisCli(asked.port, ['CLUSTER', 'KEYSLOT', key]));
      const range = (await slotsSeenBy(asked)).find(([from, to]) => from <= slot && slot <= to);
      if (!range) throw new Error(`no node serves slot ${slot} (key ${key}), as ${asked.port} sees it`);
      const node = nodes.find((n) => n.port === range[2]);
      if (!node) throw new Error(`slot ${slot} (key ${key}) is on port ${range[2]}, not a node of this cluster`);
      return node;
    },
    async waitOk({ timeout = 20000 } = {}) {
      await waitFor(settled, { timeout, interval: 200, what: 'the Redis Cluster to settle' });
      return this;
    },
    cmd(...args) {
      return redisCli(anyRunning().port, args, { follow: true });
    },
    get(key) {
      return redisCli(anyRunning().port, ['GET', key], { json: true, follow: true });
    },
    async stop() {
      await Promise.all(nodes.map((n) => n.stop()));
    },
  };

  try {
    for (let i = 0; i < count; i++) {
      // A retry: the bus port is closed when startRedis picks its own port, which can
      // (rarely) be the same one; that server then fails to bind and never answers PING.
      for (let attempt = 1; ; attempt++) {
        const dir = tempDir('sluice-rcluster-');
        const busPort = await closedPort();
        try {
          nodes.push(
            await startRedis({
              args: [
                '--cluster-enabled', 'yes',
                '--cluster-config-file', path.join(dir, 'nodes.conf'),
                '--cluster-node-timeout', nodeTimeout,
                '--cluster-port', busPort,
                // A replica's (diskless) full sync starts at once, not after 5 s: the
                // cluster is ready ~4 s sooner, and so is a node brought back.
                '--repl-diskless-sync-delay', 0,
                // After startRedis's own --dir: the last one wins.
                '--dir', dir,
              ],
            }),
          );
          break;
        } catch (e) {
          if (attempt >= 3) throw e;
        }
      }
    }
    const createArgs = ['--cluster', 'create', ...nodes.map((n) => `127.0.0.1:${n.port}`), '--cluster-replicas', String(replicas), '--cluster-yes'];
    await new Promise((resolve, reject) => {
      const child = execFile('redis-cli', createArgs, { timeout: 60000 }, (err, out, errOut) => {
        live.delete(child);
        if (err) reject(new Error(`redis-cli ${createArgs.join(' ')} failed: ${err.message}\n${out}${errOut}`));
        else resolve(out);
      });
      live.add(child);
      // --cluster-yes answers the question; stdin must still be closed.
      child.stdin.end();
    });
    cluster.url = `redis-cluster://127.0.0.1:${nodes[0].port},127.0.0.1:${nodes[1].port}`;
    await waitFor(() => settled({ fresh: true }), { timeout: 20000, interval: 200, what: 'the new Redis Cluster to be ready' });
  } catch (e) {
    await cluster.stop();
    throw e;
  }
  return cluster;
}

// What Redis holds for the counters of key `name` of `tenant`: the request windows'
// counts (every window summed) and the token quotas' used, reserved and reservations held
// (every period summed). The admission and batch records are not counters and are skipped.
export async function redisLedger(redis, name, tenant = 'acme') {
  const keys = (await redis.raw('KEYS', `sluice:{t:${tenant}}:k:${name}:*`)).split('\n').filter(Boolean);
  const out = { requests: 0, used: 0, reserved: 0, holds: 0 };
  for (const k of keys) {
    if (/:r\d+\.(fw|sw)\.\d+:\d+$/.test(k)) out.requests += Number(await redis.raw('GET', k));
    else if (/:q\d+\.[a-z]+:\d+$/.test(k)) {
      out.used += Number((await redis.raw('HGET', k, 'used')) || 0);
      out.reserved += Number((await redis.raw('HGET', k, 'reserved')) || 0);
      out.holds += Number(await redis.raw('ZCARD', `${k}:r`));
    }
  }
  return out;
}

// ---- misc ----------------------------------------------------------------------------

// A TCP port on 127.0.0.1 that nothing listens on (bound, then released).
export async function closedPort() {
  const srv = net.createServer();
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  const { port } = srv.address();
  await new Promise((r) => srv.close(r));
  return port;
}

// An OpenAI answer to the chat request `json`: an SSE stream (content, the finish, then a
// usage chunk) when it asked for one, else a chat.completion; `usage` as given.
export function writeOpenAiAnswer(res, json, { id = 'chatcmpl-x', content = 'hello', usage }) {
  const base = { id, created: 1, model: json?.model ?? 'x' };
  if (json?.stream) {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    const chunk = (delta, finish) => ({ ...base, object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: finish }] });
    res.write(`data: ${JSON.stringify(chunk({ role: 'assistant', content }, null))}\n\n`);
    res.write(`data: ${JSON.stringify(chunk({}, 'stop'))}\n\n`);
    res.write(`data: ${JSON.stringify({ ...base, object: 'chat.completion.chunk', choices: [], usage })}\n\n`);
    res.end('data: [DONE]\n\n');
  } else {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({
        ...base,
        object: 'chat.completion',
        choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop' }],
        usage,
      }),
    );
  }
}

// A recording upstream (plain Node HTTP server on 127.0.0.1:0): stores every request
// (method, url, headers, raw body, parsed JSON) and answers like a tiny OpenAI or Ollama
// server (fixed content "hello"). Used where the simulator cannot show what it received
// (it exposes no request headers or bodies). `custom(req, res, json)` may take over the
// answer (return true when it did), e.g. to drop the connection mid-stream.
export async function startRecorder(custom) {
  const requests = [];
  const server = http.createServer((req, res) => {
    const parts = [];
    req.on('data', (d) => parts.push(d));
    req.on('end', () => {
      const raw = Buffer.concat(parts).toString('utf8');
      let json;
      try {
        json = JSON.parse(raw);
      } catch {
        json = undefined;
      }
      requests.push({ method: req.method, url: req.url, headers: req.headers, raw, json });
      if (custom && custom(req, res, json)) return;
      const model = json?.model ?? 'x';
      if (req.url.endsWith('/api/chat')) {
        const final = {
          model,
          created_at: new Date().toISOString(),
          message: { role: 'assistant', content: json?.stream ? '' : 'hello' },
          done: true,
          done_reason: 'stop',
          prompt_eval_count: 3,
          eval_count: 1,
        };
        if (json?.stream) {
          res.writeHead(200, { 'content-type': 'application/x-ndjson' });
          res.write(JSON.stringify({ model, message: { role: 'assistant', content: 'hello' }, done: false }) + '\n');
          res.end(JSON.stringify(final) + '\n');
        } else {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(JSON.stringify(final));
        }
        return;
      }
      writeOpenAiAnswer(res, json, { id: 'chatcmpl-rec', content: 'hello', usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 } });
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address();
  return {
    port,
    url: `http://127.0.0.1:${port}`,
    requests,
    close: () =>
      new Promise((r) => {
        server.closeAllConnections?.();
        server.close(() => r());
      }),
  };
}

// ---- PostgreSQL ----------------------------------------------------------------------

const PG_BIN = '/usr/lib/postgresql/15/bin';
const isRoot = process.getuid?.() === 0;

function run(cmd, args, { timeout = 30000 } = {}) {
  return new Promise((resolve, reject) =>
    execFile(cmd, args, { timeout }, (err, stdout, stderr) =>
      err ? reject(new Error(`${cmd} ${args.join(' ')}: ${err.message}\n${stderr}`)) : resolve(stdout),
    ),
  );
}

// As the postgres user when running as root (PostgreSQL refuses to run as root).
function asPostgres(cmd, args, opts) {
  return isRoot ? run('runuser', ['-u', 'postgres', '--', cmd, ...args], opts) : run(cmd, args, opts);
}

function pidAlive(pid) {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  // An exited child of runuser can linger as a zombie: that is stopped.
  try {
    return !/^\S+ \(.*\) Z/.test(fs.readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

// A PostgreSQL server of its own: initdb into a temp dir, listening on 127.0.0.1 (a free
// port) with fsync off, database `sluice`. stop() ends it by its postmaster pid (fast
// shutdown, then SIGKILL); start() brings it back on the same port and data.
export async function startPostgres() {
  const dir = tempDir('sluice-pg-');
  if (isRoot) await run('chown', ['-R', 'postgres:postgres', dir]);
  const data = path.join(dir, 'data');
  await asPostgres(`${PG_BIN}/initdb`, ['-D', data, '-A', 'trust', '-U', 'postgres', '--no-sync', '-E', 'UTF8'], {
    timeout: 60000,
  });
  const port = await closedPort();
  const pg = {
    port,
    url: `postgresql://postgres@127.0.0.1:${port}/sluice`,
    pid: 0,
    async start() {
      const child = spawn(
        isRoot ? 'runuser' : `${PG_BIN}/postgres`,
        [
          ...(isRoot ? ['-u', 'postgres', '--', `${PG_BIN}/postgres`] : []),
          '-D', data, '-k', dir, '-p', String(port),
          '-c', 'listen_addresses=127.0.0.1', '-c', 'fsync=off', '-c', 'synchronous_commit=off',
          '-c', 'full_page_writes=off',
        ],
        { stdio: ['ignore', 'ignore', 'pipe'] },
      );
      live.add(child);
      child.on('exit', () => live.delete(child));
      let err = '';
      child.stderr.on('data', (d) => (err += d));
      await waitFor(
        async () => {
          try {
            await run(`${PG_BIN}/pg_isready`, ['-h', '127.0.0.1', '-p', String(port), '-t', '1'], { timeout: 3000 });
            return true;
          } catch {
            return false;
          }
        },
        { timeout: 20000, interval: 100, what: `PostgreSQL on port ${port} to accept connections (${err})` },
      );
      this.pid = Number(fs.readFileSync(path.join(data, 'postmaster.pid'), 'utf8').split('\n')[0]);
      this.child = child;
      return this;
    },
    async stop() {
      if (!this.pid) return;
      const pid = this.pid;
      this.pid = 0;
      try {
        process.kill(pid, 'SIGINT'); // fast shutdown
      } catch {
        return;
      }
      try {
        await waitFor(() => !pidAlive(pid), { timeout: 10000, what: `PostgreSQL (pid ${pid}) to stop` });
      } catch {
        process.kill(pid, 'SIGKILL');
        await waitFor(() => !pidAlive(pid), { timeout: 5000, what: `PostgreSQL (pid ${pid}) to die` });
      }
    },
    // psql -At: one line per row, fields separated by '|'.
    query(sql, db = 'sluice') {
      return run('psql', ['-h', '127.0.0.1', '-p', String(port), '-U', 'postgres', '-d', db, '-At', '-c', sql]);
    },
  };
  await pg.start();
  stopAtExit.push(() => pg.pid && process.kill(pg.pid, 'SIGKILL'));
  await pg.query('CREATE DATABASE sluice', 'postgres');
  return pg;
}

// ---- Kafka (librdkafka's mock cluster) -------------------------------------------------

export const KAFKA_MOCK = process.env.SLUICE_KAFKA_MOCK || path.join(path.dirname(BIN), 'kafka-mock');

// The Kafka mock cluster (tests/tools/kafka_mock.cpp): real Kafka protocol on loopback.
// down()/up() take every broker down or back.
export async function startKafka({ topic = 'sluice.requests', partitions = 1 } = {}) {
  if (!fs.existsSync(KAFKA_MOCK)) throw new Error(`${KAFKA_MOCK} does not exist: build it (make build with tests)`);
  const dir = tempDir('sluice-kafka-');
  const file = path.join(dir, 'bootstrap');
  const child = spawn(KAFKA_MOCK, ['--bootstrap-file', file, '--topic', topic, '--partitions', String(partitions)], {
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  live.add(child);
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => (live.delete(child), resolve({ code, signal }))));
  child.stderr.resume();
  const replies = [];
  let buf = '';
  child.stdout.on('data', (d) => {
    buf += d;
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      replies.push(buf.slice(0, i));
      buf = buf.slice(i + 1);
    }
  });
  const bootstrap = await waitFor(() => fs.existsSync(file) && fs.readFileSync(file, 'utf8').trim(), {
    timeout: 10000,
    what: 'the Kafka mock cluster to write its bootstrap address',
  });
  const command = async (line) => {
    const n = replies.length;
    child.stdin.write(line + '\n');
    const reply = await waitFor(() => replies.length > n && replies[n], { timeout: 5000, what: `kafka-mock: ${line}` });
    if (reply !== 'ok') throw new Error(`kafka-mock ${line}: ${reply}`);
  };
  return {
    bootstrap,
    topic,
    proc: { child, pid: child.pid, exited, name: 'kafka-mock' },
    down: () => command('down all'),
    up: () => command('up all'),
    stop() {
      return stopProcess(this.proc, 3000);
    },
    // Every message on the topic from the beginning, parsed (kcat, a real Kafka client).
    async messages() {
      const out = await run('kcat', ['-C', '-b', bootstrap, '-t', topic, '-o', 'beginning', '-e', '-q', '-f', '%s\\n'], {
        timeout: 30000,
      });
      return out
        .split('\n')
        .filter((l) => l.trim().length > 0)
        .map((l) => JSON.parse(l));
    },
  };
}
