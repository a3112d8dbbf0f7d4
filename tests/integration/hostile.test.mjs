// The gateway against a hostile upstream (hostile.mjs) and against clients that stop
// reading or leave: answers never cross between requests, every request ends (within
// timeouts.total and a short grace) and is recorded, memory stays bounded per stream.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';

import { startHostile } from './hostile.mjs';
import { KEY, keysAll, metricValue, parseMetrics, request, sse, startGateway, startSim, waitFor, withTimeout } from './lib.mjs';

const KEY_B = 'sk-other-tenant-0000111122223333';

let up, gw;

before(async () => {
  up = await startHostile();
  gw = await startGateway({
    workers: 1, // one upstream pool: a connection left dirty is the next request's
    keys: keysAll([{ name: 'other-app', key: KEY_B, tenant: 'beta', tier: 'standard' }]),
    timeouts: { first_token: '2s', idle: '2s', total: '3s', heartbeat: '30s' },
    models: [{ alias: 'h', provider: 'openai', base_url: `${up.url}/v1`, model: 'h' }],
  });
});

after(async () => {
  if (gw) await gw.stop();
  if (up) await up.close();
});

function ask(marker, { key = KEY, stream = false } = {}) {
  return request(`${gw.url}/v1/chat/completions`, {
    method: 'POST',
    key,
    body: { model: 'h', messages: [{ role: 'user', content: marker }], stream },
  });
}

// The text a client got: the message of a completion, or the deltas of a stream.
function textOf(r) {
  if (r.json) return r.json.choices?.[0]?.message?.content ?? '';
  let out = '';
  for (const line of r.text.split('\n')) {
    if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
    try {
      out += JSON.parse(line.slice(6)).choices?.[0]?.delta?.content ?? '';
    } catch {
      /* not JSON */
    }
  }
  return out;
}

describe('the upstream pool never mixes answers', () => {
  for (const stream of [false, true]) {
    test(`interim 1xx heads before the answer are skipped (${stream ? 'streamed' : 'whole'})`, async () => {
      up.setMode('interim');
      const a = await ask(`alpha-${stream}`, { stream });
      const b = await ask(`beta-${stream}`, { key: KEY_B, stream });
      const c = await ask(`gamma-${stream}`, { stream });
      assert.equal(a.status, 200, a.text);
      assert.equal(textOf(a), `answer for alpha-${stream}`);
      assert.equal(b.status, 200, b.text);
      assert.equal(textOf(b), `answer for beta-${stream}`);
      assert.equal(c.status, 200, c.text);
      assert.equal(textOf(c), `answer for gamma-${stream}`);
    });

    test(`bytes after the end of an answer never reach the next request (${stream ? 'streamed' : 'whole'})`, async () => {
      up.setMode('extra');
      const a = await ask(`one-${stream}`, { stream });
      assert.equal(textOf(a), `answer for one-${stream}`);
      up.setMode('ok');
      const b = await ask(`two-${stream}`, { key: KEY_B, stream });
      assert.equal(b.status, 200, b.text);
      assert.equal(textOf(b), `answer for two-${stream}`);
      assert.doesNotMatch(b.text, /INJECTED/);
    });

    // A first answer in `mode`, then the upstream acts on the idle connection (counted in
    // up.state[counter]: unasked bytes sent, or the connection closed), then a moment for
    // that to arrive; the upstream answers plainly again after.
    async function answerThenIdle(mode, counter, marker) {
      up.setMode(mode, { delayMs: 50 });
      const acted = up.state[counter];
      const a = await ask(marker, { stream });
      assert.equal(textOf(a), `answer for ${marker}`);
      await waitFor(() => up.state[counter] > acted, { what: `the upstream's ${counter}` });
      await new Promise((r) => setTimeout(r, 100));
      up.setMode('ok');
    }

    test(`bytes that come while a connection idles in the pool never reach the next request (${stream ? 'streamed' : 'whole'})`, async () => {
      const before = up.state.connections;
      await answerThenIdle('late_extra', 'lateSent', `first-${stream}`);
      const b = await ask(`second-${stream}`, { key: KEY_B, stream });
      assert.equal(b.status, 200, b.text);
      assert.equal(textOf(b), `answer for second-${stream}`);
      assert.doesNotMatch(b.text, /INJECTED/);
      assert.ok(up.state.connections > before, 'the dirty connection was left, a new one made');
    });

    test(`a pooled connection the upstream closed is not used again (${stream ? 'streamed' : 'whole'})`, async () => {
      await answerThenIdle('close_idle', 'idleClosed', `early-${stream}`);
      const requests = up.state.requests.length;
      const b = await ask(`late-${stream}`, { stream });
      assert.equal(b.status, 200, b.text);
      assert.equal(textOf(b), `answer for late-${stream}`);
      // Sent once: on a new connection, not first on the closed one.
      assert.equal(up.state.requests.length, requests + 1);
    });
  }

  test('a reused connection whose answer is slow to come keeps the stream alive with heartbeats', async () => {
    const hb = await startGateway({
      workers: 1,
      keys: keysAll(),
      timeouts: { first_token: '3s', idle: '3s', total: '5s', heartbeat: '100ms' },
      models: [{ alias: 'h', provider: 'openai', base_url: `${up.url}/v1`, model: 'h' }],
    });
    try {
      up.setMode('ok');
      const ask1 = (marker) => request(`${hb.url}/v1/chat/completions`, {
        method: 'POST', key: KEY, body: { model: 'h', messages: [{ role: 'user', content: marker }], stream: true },
      });
      const a = await ask1('pooled');
      assert.equal(textOf(a), 'answer for pooled');
      const connections = up.state.connections;
      up.setMode('slow', { delayMs: 700 });
      const b = await ask1('slow-on-reuse');
      assert.equal(b.status, 200, b.text);
      assert.match(b.text, /^: keep-alive$/m, 'heartbeats while the answer was awaited');
      assert.equal(textOf(b), 'answer for slow-on-reuse');
      assert.equal(up.state.connections, connections, 'the pooled connection was reused');
      up.setMode('ok');
      const c = await ask1('after');
      assert.equal(textOf(c), 'answer for after');
    } finally {
      up.setMode('ok');
      await hb.stop();
    }
  });
});

describe('a misbehaving upstream ends the request cleanly', () => {
  test('an endless stream ends at timeouts.total with an upstream_timeout event', async () => {
    // As fast as it can: the gateway's reads are mostly served from bytes already buffered.
    up.setMode('endless', { intervalMs: 1, burst: 200 });
    const r = await withTimeout(
      sse(`${gw.url}/v1/chat/completions`, { model: 'h', messages: [{ role: 'user', content: 'x' }], stream: true }, {
        timeout: 30000,
      }),
      30000,
      'the endless stream to be ended by the gateway',
    );
    assert.equal(r.status, 200);
    assert.ok(r.ended, 'the gateway ended the stream');
    const err = r.events.find((e) => e.json?.error);
    assert.ok(err, 'an error event');
    assert.equal(err.json.error.code, 'upstream_timeout');
    const line = await gw.logFor(r.headers.get('x-request-id'));
    assert.equal(line.reason, 'upstream_timeout');
    // total 3 s plus the end's grace; the test's own bound above is the generous one.
    assert.ok(line.wall_ms < 3000 + 1000 + 1500, `wall_ms ${line.wall_ms}`);
  });

  test('an invalid chunk mid-stream: an error event, then a clean end', async () => {
    up.setMode('bad_chunk');
    const r = await sse(`${gw.url}/v1/chat/completions`, { model: 'h', messages: [{ role: 'user', content: 'x' }], stream: true });
    assert.equal(r.status, 200);
    assert.ok(r.done, 'ends with [DONE]');
    assert.equal(r.events.find((e) => e.json?.error)?.json.error.code, 'upstream_stream_failed');
  });

  test('a reset mid-stream: an error event, then a clean end', async () => {
    up.setMode('reset');
    const r = await sse(`${gw.url}/v1/chat/completions`, { model: 'h', messages: [{ role: 'user', content: 'x' }], stream: true });
    assert.equal(r.status, 200);
    assert.ok(r.done, 'ends with [DONE]');
    assert.equal(r.events.find((e) => e.json?.error)?.json.error.code, 'upstream_stream_failed');
  });

  for (const stream of [false, true]) {
    // Beast 1.81 asserted on this split of an empty chunked body (src/common/boost_assert.cpp):
    // the Debug and sanitizer builds aborted. An empty answer is a 502; the gateway lives on.
    test(`an empty chunked answer whose last chunk comes as "0\\r\\n", "\\r", "\\n" is a clean failure (${stream ? 'streamed' : 'whole'})`, async () => {
      up.setMode('split_end', { delayMs: 40 });
      const r = stream
        ? await sse(`${gw.url}/v1/chat/completions`, { model: 'h', messages: [{ role: 'user', content: 'split-s' }], stream: true })
        : await ask('split-w');
      if (stream) {
        assert.ok(r.done || r.status === 502, `a clean end: ${r.status} ${JSON.stringify(r.events)}`);
      } else {
        assert.equal(r.status, 502, r.text);
        assert.ok(r.json?.error, r.text);
      }
      up.setMode('ok');
      assert.equal(textOf(await ask('after-split')), 'answer for after-split');
    });
  }

  test('a body shorter than its Content-Length is a 502', async () => {
    up.setMode('short_body');
    const r = await ask('short');
    assert.equal(r.status, 502, r.text);
  });

  test('a redirect is not followed: 502', async () => {
    up.setMode('redirect');
    const r = await ask('redir');
    assert.equal(r.status, 502, r.text);
    assert.doesNotMatch(r.text, /169\.254/);
  });

  test('an upstream that never answers: 504 (first_token_timeout streamed, upstream_timeout whole)', async () => {
    up.setMode('hang');
    const s = await ask('hang', { stream: true });
    assert.equal(s.status, 504, s.text);
    assert.equal(s.json.error.code, 'first_token_timeout');
    const r = await ask('hang');
    assert.equal(r.status, 504, r.text);
    assert.equal(r.json.error.code, 'upstream_timeout');
  });

  test("a raw upstream error body is not passed to the client", async () => {
    up.setMode('error_text');
    const r = await ask('err');
    assert.equal(r.status, 502, r.text);
    assert.doesNotMatch(r.text, /hunter2|Traceback|10\.0\.0\.7/);
    assert.match(r.json.error.message, /HTTP 500/);
  });

  test('the gateway still serves after all of it, and holds nothing for what ended', async () => {
    up.setMode('ok');
    const r = await ask('after');
    assert.equal(r.status, 200, r.text);
    assert.equal(textOf(r), 'answer for after');
    const infra = await waitFor(
      async () => {
        const j = await gw.infra();
        return j.requests.live === 0 && j.requests.streams === 0 ? j : null;
      },
      { timeout: 10000, what: 'no request or stream left live' },
    );
    assert.equal(infra.requests.streams, 0);
    const metrics = await gw.metrics();
    assert.equal(metricValue(metrics, 'sluice_requests_in_flight'), 0);
    assert.equal(metricValue(metrics, 'sluice_streams_open'), 0);
    assert.deepEqual(parseMetrics(metrics).filter((s) => s.name === 'sluice_upstream_in_flight' && s.value !== 0), []);
  });

  // A client that pipelines its next request while the first one waits on the upstream:
  // the watch on the connection moves the early bytes into the session's buffer, and the
  // second request is answered after the first, in order.
  for (const stream of [false, true]) {
    test(`a pipelined request behind a waiting one is answered, in order (${stream ? 'streamed' : 'whole'} first)`, async () => {
      up.setMode('slow', { delayMs: 600 });
      const body = (marker, s) => JSON.stringify({ model: 'h', messages: [{ role: 'user', content: marker }], stream: s });
      const req = (marker, s, last) => {
        const b = body(marker, s);
        return (
          `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\nContent-Type: application/json\r\n` +
          `${last ? 'Connection: close\r\n' : ''}Content-Length: ${Buffer.byteLength(b)}\r\n\r\n${b}`
        );
      };
      const sock = net.connect(gw.port, '127.0.0.1');
      let received = '';
      sock.on('data', (d) => (received += d));
      const closed = new Promise((r) => sock.on('close', r));
      sock.on('error', () => {});
      // The first request, then the second a moment later, while the first is upstream.
      sock.write(req(`first-${stream}`, stream, false));
      await new Promise((r) => setTimeout(r, 100));
      sock.write(req(`second-${stream}`, false, true));
      await withTimeout(closed, 15000, 'both answers and the close');
      up.setMode('ok');
      const first = received.indexOf(`answer for first-${stream}`);
      const second = received.indexOf(`answer for second-${stream}`);
      assert.ok(first >= 0, received);
      assert.ok(second > first, received);
      assert.equal(received.split('HTTP/1.1 200 OK\r\n').length - 1, 2, received);
    });
  }
});

function rssBytes(pid) {
  const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(m[1]) * 1024;
}

// A raw client: sends a streamed chat request, then does not read (its socket's receive
// buffer fills, then the gateway's send buffer). Returns the socket, paused.
function stalledStream(port, body, requestId, key = KEY) {
  return new Promise((resolve, reject) => {
    const sock = net.connect(port, '127.0.0.1', () => {
      const payload = JSON.stringify(body);
      sock.write(
        `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\n` +
          `Content-Type: application/json\r\nX-Request-Id: ${requestId}\r\nContent-Length: ${Buffer.byteLength(payload)}\r\n\r\n${payload}`,
      );
      sock.pause();
      resolve(sock);
    });
    sock.on('error', () => {});
    sock.once('error', reject);
  });
}

describe('clients that stop reading', () => {
  let sim, gw2;
  before(async () => {
    sim = await startSim({ ttft: '0ms', 'inter-token': '0ms', 'max-output-tokens': 1000000 });
    up.setMode('big_events', { eventBytes: 900000, events: 40 });
    gw2 = await startGateway({
      workers: 1,
      keys: [
        { name: 'one-at-a-time', key: KEY, tenant: 'acme', tier: 'standard', max_in_flight: 1 },
        { name: 'wide', key: KEY_B, tenant: 'beta', tier: 'standard' },
      ],
      params: { max_tokens: { min: 1, max: 1000000, integer: true } },
      concurrency: { max_wait: { vip: '20s', premium: '20s', standard: '20s' } },
      timeouts: { client_write: '60s' },
      models: [
        { alias: 'fast', provider: 'openai', base_url: `${sim.url}/v1`, model: 'fast' },
        { alias: 'big', provider: 'openai', base_url: `${up.url}/v1`, model: 'big' },
      ],
    });
  });
  after(async () => {
    if (gw2) await gw2.stop();
    if (sim) await sim.stop();
  });

  test('a stream whose client stopped reading, then left, ends: slots freed, request recorded', async () => {
    const body = { model: 'fast', messages: [{ role: 'user', content: 'x' }], stream: true, max_tokens: 1000000 };
    const sock = await stalledStream(gw2.port, body, 'stalled-then-gone');
    // Long enough for both socket buffers to fill and the relay to block on the client.
    await waitFor(async () => (await sim.stats()).in_flight === 1, { timeout: 5000, what: 'the stream upstream' });
    await new Promise((r) => setTimeout(r, 1500));
    sock.destroy(); // unread data: the kernel answers with a reset
    const line = await gw2.logFor('stalled-then-gone', 15000);
    assert.equal(line.status, 499);
    assert.equal(line.reason, 'client_closed');
    // The key's one slot is free again: a new request of the same key runs.
    const r = await request(`${gw2.url}/v1/chat/completions`, {
      method: 'POST',
      key: KEY,
      body: { model: 'fast', messages: [{ role: 'user', content: 'x' }], max_tokens: 3 },
    });
    assert.equal(r.status, 200, r.text);
    await waitFor(async () => (await sim.stats()).in_flight === 0, { timeout: 5000, what: 'the upstream to be released' });
  });

  // A client that sends one byte more than its request (a pipelined request's start, or
  // garbage) and then leaves is still seen leaving: while waiting for the upstream, and
  // while waiting in the gate's queue.
  function requestPlusByteThenLeave(body, requestId) {
    return new Promise((resolve) => {
      const sock = net.connect(gw2.port, '127.0.0.1', () => {
        const payload = JSON.stringify(body);
        sock.write(
          `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\n` +
            `Content-Type: application/json\r\nX-Request-Id: ${requestId}\r\nContent-Length: ${Buffer.byteLength(payload)}\r\n\r\n${payload}X`,
        );
        setTimeout(() => {
          sock.destroy();
          resolve();
        }, 500);
      });
      sock.on('error', () => {});
    });
  }

  test('a client that sent one byte more, then left, is seen leaving (upstream wait and queue)', async () => {
    await sim.configure({ ttft_ms: 30000 });
    try {
      const before = (await sim.stats()).cancelled;
      // Holds the key's one slot: upstream for 30 s unless cancelled.
      await requestPlusByteThenLeave({ model: 'fast', messages: [{ role: 'user', content: 'x' }], max_tokens: 2 }, 'extra-byte-1');
      const line = await gw2.logFor('extra-byte-1', 10000);
      assert.equal(line.status, 499);
      await waitFor(async () => (await sim.stats()).cancelled === before + 1, { timeout: 10000, what: 'the upstream cancelled' });

      // Now one request holds the slot (a normal client), the next waits in the queue and
      // leaves after one byte more.
      const stopHolder = new AbortController();
      const holder = request(`${gw2.url}/v1/chat/completions`, {
        method: 'POST',
        key: KEY,
        timeout: 60000,
        signal: stopHolder.signal,
        body: { model: 'fast', messages: [{ role: 'user', content: 'x' }], max_tokens: 2 },
        headers: { 'x-request-id': 'holder-1' },
      });
      await waitFor(async () => (await sim.stats()).in_flight === 1, { timeout: 5000, what: 'the holder upstream' });
      await requestPlusByteThenLeave({ model: 'fast', messages: [{ role: 'user', content: 'x' }], max_tokens: 2 }, 'extra-byte-2');
      const queued = await gw2.logFor('extra-byte-2', 10000);
      assert.equal(queued.status, 499);
      assert.equal(queued.error, 'client left while queued');
      holder.catch(() => {});
      stopHolder.abort();
      await gw2.logFor('holder-1', 10000);
    } finally {
      await sim.configure({ ttft_ms: 0 });
    }
  });

  test('1 MB events and clients that do not read: the relay holds about one event per stream', async () => {
    const before = rssBytes(gw2.pid);
    // Four streams of 40 events of 900 kB (36 MB each); nobody reads for a while.
    const socks = [];
    for (let i = 0; i < 4; i++) {
      socks.push(
        await stalledStream(gw2.port, { model: 'big', messages: [{ role: 'user', content: `s${i}` }], stream: true }, `big-${i}`, KEY_B),
      );
      await new Promise((r) => setTimeout(r, 300));
    }
    await new Promise((r) => setTimeout(r, 1500));
    const held = rssBytes(gw2.pid) - before;
    for (const s of socks) s.destroy();
    // A channel of 256 events would hold up to 36 MB per stream here. (Under ASan freed
    // memory sits in its quarantine: the bound is checked in the plain build only.)
    if (!process.env.ASAN_OPTIONS) {
      assert.ok(held < 24 * 1024 * 1024, `the gateway grew by ${(held / 1048576).toFixed(1)} MiB`);
    }
    for (let i = 0; i < 4; i++) {
      const line = await gw2.logFor(`big-${i}`, 15000);
      assert.ok([200, 499].includes(line.status), JSON.stringify(line));
    }
  });

  test('every request ended: no request or stream is left live', async () => {
    const infra = await waitFor(
      async () => {
        const j = JSON.parse((await request(`${gw2.adminUrl}/infra`)).text);
        return j.requests.live === 0 && j.requests.streams === 0 ? j : null;
      },
      { timeout: 15000, what: 'live requests and streams back to 0' },
    );
    assert.equal(infra.requests.live, 0);
    const metrics = await gw2.metrics();
    assert.equal(metricValue(metrics, 'sluice_requests_in_flight'), 0);
    assert.equal(metricValue(metrics, 'sluice_streams_open'), 0);
  });
});

describe('out of file descriptors on the way upstream', () => {
  let sim, gw3;
  before(async () => {
    sim = await startSim({ ttft: '0ms', 'inter-token': '0ms' });
    gw3 = await startGateway({
      workers: 1,
      keys: keysAll(),
      limits: { max_connections: 100, upstream_pool_per_host: 0 }, // every request connects anew
      models: [{ alias: 'fast', provider: 'openai', base_url: `${sim.url}/v1`, model: 'fast' }],
    });
  });
  after(async () => {
    if (gw3) await gw3.stop();
    if (sim) await sim.stop();
  });

  // A client already connected asks while the gateway cannot open one more descriptor:
  // the upstream connect fails with EMFILE. That is the gateway's own resource failure
  // (503 gateway_resources_exhausted, counted and logged as such), not the client
  // leaving and not the upstream's fault.
  // Not under the sanitizers: out of descriptors, UBSan's own type check cannot read what
  // it needs and reports an invalid vptr in Boost's error categories.
  test('EMFILE on the upstream connect: 503 gateway_resources_exhausted, then service resumes', { skip: !!process.env.ASAN_OPTIONS && 'runs in the plain build only (UBSan needs descriptors too)' }, async () => {
    const { execFileSync } = await import('node:child_process');
    const body = JSON.stringify({ model: 'fast', messages: [{ role: 'user', content: 'x' }], max_tokens: 2 });
    const sock = await new Promise((resolve, reject) => {
      const s = net.connect(gw3.port, '127.0.0.1', () => resolve(s));
      s.once('error', reject);
    });
    let received = '';
    sock.on('data', (d) => (received += d));
    // Its session is open (it sent its first bytes); now no descriptor is left.
    sock.write('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n');
    await new Promise((r) => setTimeout(r, 300));
    const hard = execFileSync('prlimit', ['--pid', String(gw3.pid), '--nofile', '--raw', '--noheadings', '--output=HARD']).toString().trim();
    // A new descriptor takes the lowest free number: a soft limit at that number leaves none.
    const used = new Set(fs.readdirSync(`/proc/${gw3.pid}/fd`).map(Number));
    let lowestFree = 0;
    while (used.has(lowestFree)) lowestFree++;
    execFileSync('prlimit', ['--pid', String(gw3.pid), `--nofile=${lowestFree}:${hard}`]);
    try {
      sock.write(
        `Authorization: Bearer ${KEY}\r\nContent-Type: application/json\r\nX-Request-Id: emfile-1\r\n` +
          `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
      );
      await waitFor(() => /\r\n\r\n[^]*\}/.test(received), { timeout: 10000, what: 'the answer' });
    } finally {
      execFileSync('prlimit', ['--pid', String(gw3.pid), `--nofile=${hard}:${hard}`]);
      sock.destroy();
    }
    assert.match(received, /^HTTP\/1\.1 503 /, received);
    assert.match(received, /"code":"gateway_resources_exhausted"/);
    const line = await gw3.logFor('emfile-1');
    assert.equal(line.status, 503);
    assert.equal(line.reason, 'gateway_resources_exhausted');
    const r = await request(`${gw3.url}/v1/chat/completions`, { method: 'POST', key: KEY, body: JSON.parse(body) });
    assert.equal(r.status, 200, r.text);
  });
});
