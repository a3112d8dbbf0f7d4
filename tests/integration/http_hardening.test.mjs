// The client-facing HTTP server under hostile or unusual clients: request framing
// (Transfer-Encoding, Content-Length), Host, HEAD, Expect: 100-continue, HTTP/1.0 streams,
// client request ids, the connection cap and the first-byte timeout. Raw sockets
// (node:net), so the test sees exactly the bytes the server writes.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { KEY, USER, keysAll, rawRequest, request, simText, startGateway, startSim, waitFor, withTimeout } from './lib.mjs';

// ---- raw sockets ----------------------------------------------------------------------

// A connected socket that records what it receives and whether the server closed it.
function openSocket(port) {
  return new Promise((resolve, reject) => {
    const s = net.connect(port, '127.0.0.1');
    s.received = '';
    s.closedByPeer = false;
    s.gone = new Promise((res) => s.on('close', res));
    s.on('data', (d) => (s.received += d.toString('latin1')));
    s.on('end', () => (s.closedByPeer = true));
    s.on('error', () => (s.closedByPeer = true)); // a reset counts as closed by the server
    s.once('connect', () => resolve(s));
    s.once('error', reject);
  });
}

// Sends `data` on a fresh connection and resolves with everything received until the
// server closes it (bounded: rejects if the server keeps it open).
async function exchange(port, data, timeout = 8000) {
  const s = await openSocket(port);
  s.write(data);
  await withTimeout(s.gone, timeout, 'the server to close the connection');
  return s.received;
}

// Waits until the socket has received `pattern` (bounded).
function until(s, pattern, what, timeout = 8000) {
  return waitFor(() => pattern.test(s.received), { timeout, interval: 10, what });
}

// Splits the first response off a raw byte string: {status, headers (lowercase), head, rest}.
function firstResponse(raw) {
  const end = raw.indexOf('\r\n\r\n');
  assert.ok(end > 0, `a response head in ${JSON.stringify(raw.slice(0, 300))}`);
  const head = raw.slice(0, end);
  const [statusLine, ...lines] = head.split('\r\n');
  const headers = {};
  for (const l of lines) {
    const i = l.indexOf(':');
    headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
  }
  return { status: Number(statusLine.split(' ')[1]), statusLine, headers, head, rest: raw.slice(end + 4) };
}

const countResponses = (raw) => (raw.match(/HTTP\/1\.[01] \d{3} /g) ?? []).length;

function chatBody(extra = {}) {
  return JSON.stringify({ model: 'gpt', messages: USER, max_tokens: 3, ...extra });
}

function post(path, { headers = '', body = '', version = '1.1', host = true } = {}) {
  return (
    `POST ${path} HTTP/${version}\r\n` +
    (host ? 'Host: sluice.test\r\n' : '') +
    `Authorization: Bearer ${KEY}\r\nContent-Type: application/json\r\n` +
    headers +
    '\r\n' +
    body
  );
}

// ---- one gateway for the protocol checks ---------------------------------------------

let sim;
let gw;

before(async () => {
  sim = await startSim({ ttft: '5ms', 'inter-token': '5ms' });
  gw = await startGateway({
    instance: 'it-http',
    keys: keysAll(),
    timeouts: { client_first_byte: '400ms' },
    models: [
      { alias: 'gpt', provider: 'openai', base_url: `${sim.url}/v1` },
      { alias: 'llama', provider: 'ollama', base_url: sim.url },
    ],
  });
});

after(async () => {
  await Promise.all([gw?.stop(), sim?.stop()]);
});

describe('request framing (RFC 9112 §6.3)', () => {
  const body = chatBody();
  const forms = ['chunked, identity', 'identity', 'xchunked', 'chunked, chunked', 'gzip, chunked'];

  for (const te of forms) {
    test(`Transfer-Encoding: ${te} with a Content-Length is refused with 400 and the connection closes`, async () => {
      // Framed by Content-Length, this request would be served (200), and the pipelined
      // one after it too.
      const raw = await exchange(
        gw.port,
        post('/v1/chat/completions', { headers: `Transfer-Encoding: ${te}\r\nContent-Length: ${body.length}\r\n`, body }) +
          'GET /health HTTP/1.1\r\nHost: sluice.test\r\n\r\n',
      );
      const r = firstResponse(raw);
      assert.equal(r.status, 400, raw.slice(0, 400));
      assert.equal(r.headers.connection, 'close');
      assert.match(r.rest, /Transfer-Encoding|malformed/);
      assert.equal(countResponses(raw), 1, 'nothing after the refused request is served');
    });

    test(`Transfer-Encoding: ${te} without a Content-Length is refused with 400`, async () => {
      const raw = await exchange(gw.port, post('/v1/chat/completions', { headers: `Transfer-Encoding: ${te}\r\n`, body }));
      const r = firstResponse(raw);
      assert.equal(r.status, 400, raw.slice(0, 400));
      assert.equal(r.headers.connection, 'close');
      assert.match(r.rest, /Transfer-Encoding|malformed/);
      assert.equal(countResponses(raw), 1);
    });
  }

  test('two Transfer-Encoding fields (chunked twice) are refused with 400', async () => {
    const chunked = `${body.length.toString(16)}\r\n${body}\r\n0\r\n\r\n`;
    const raw = await exchange(
      gw.port,
      post('/v1/chat/completions', { headers: 'Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n', body: chunked }),
    );
    assert.equal(firstResponse(raw).status, 400, raw.slice(0, 400));
  });

  test('Transfer-Encoding: chunked together with Content-Length is refused with 400 and close', async () => {
    const chunked = `${body.length.toString(16)}\r\n${body}\r\n0\r\n\r\n`;
    for (const headers of [
      `Transfer-Encoding: chunked\r\nContent-Length: ${chunked.length}\r\n`,
      `Content-Length: ${chunked.length}\r\nTransfer-Encoding: chunked\r\n`,
    ]) {
      const raw = await exchange(gw.port, post('/v1/chat/completions', { headers, body: chunked }));
      const r = firstResponse(raw);
      assert.equal(r.status, 400, raw.slice(0, 400));
      assert.equal(r.headers.connection, 'close');
    }
  });

  test('Transfer-Encoding in an HTTP/1.0 request is refused with 400', async () => {
    const chunked = `${body.length.toString(16)}\r\n${body}\r\n0\r\n\r\n`;
    const raw = await exchange(gw.port, post('/v1/chat/completions', { version: '1.0', headers: 'Transfer-Encoding: chunked\r\n', body: chunked }));
    assert.equal(firstResponse(raw).status, 400, raw.slice(0, 400));
  });

  test('an empty chunked request whose last chunk arrives as "0\\r\\n", "\\r", "\\n" gets a 400', async () => {
    // Beast 1.81 asserted on this split (src/common/boost_assert.cpp): the Debug and
    // sanitizer builds aborted.
    const s = await openSocket(gw.port);
    s.setNoDelay(true);
    s.write(post('/v1/chat/completions', { headers: 'Transfer-Encoding: chunked\r\nConnection: close\r\n', body: '0\r\n' }));
    for (const piece of ['\r', '\n']) {
      await new Promise((r) => setTimeout(r, 40));
      s.write(piece);
    }
    await withTimeout(s.gone, 8000, 'the server to close the connection');
    const r = firstResponse(s.received);
    assert.equal(r.status, 400, s.received.slice(0, 600));
    assert.ok(JSON.parse(r.rest).error, r.rest);
  });

  test('a plain chunked request is still served', async () => {
    const chunked = `${body.length.toString(16)}\r\n${body}\r\n0\r\n\r\n`;
    const raw = await exchange(
      gw.port,
      post('/v1/chat/completions', { headers: 'Transfer-Encoding: Chunked\r\nConnection: close\r\n', body: chunked }),
    );
    const r = firstResponse(raw);
    assert.equal(r.status, 200, raw.slice(0, 600));
    assert.equal(JSON.parse(r.rest).choices[0].message.content, simText(3));
  });
});

describe('Host, HEAD and Expect', () => {
  test('an HTTP/1.1 request without Host gets 400 and the connection closes', async () => {
    const raw = await exchange(gw.port, 'GET /health HTTP/1.1\r\n\r\nGET /health HTTP/1.1\r\nHost: a\r\n\r\n');
    const r = firstResponse(raw);
    assert.equal(r.status, 400, raw.slice(0, 400));
    assert.equal(r.headers.connection, 'close');
    assert.match(r.rest, /Host/);
    assert.equal(countResponses(raw), 1);
  });

  test('two Host headers get 400', async () => {
    const raw = await exchange(gw.port, 'GET /health HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n');
    assert.equal(firstResponse(raw).status, 400, raw.slice(0, 400));
  });

  test('an HTTP/1.0 request without Host is served', async () => {
    const raw = await exchange(gw.port, 'GET /health HTTP/1.0\r\n\r\n');
    assert.equal(firstResponse(raw).status, 200, raw.slice(0, 400));
  });

  for (const path of ['/health', '/ready']) {
    test(`HEAD ${path} gets the head a GET gets, without the body`, async () => {
      const get = firstResponse(await exchange(gw.port, `GET ${path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n`));
      assert.ok(get.rest.length > 0, 'the GET has a body');
      // The HEAD, then a pipelined GET on the same connection: the second response must
      // follow the first head directly.
      const raw = await exchange(gw.port, `HEAD ${path} HTTP/1.1\r\nHost: a\r\n\r\nGET ${path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n`);
      const head = firstResponse(raw);
      assert.equal(head.status, get.status);
      assert.equal(head.headers['content-length'], String(Buffer.byteLength(get.rest, 'latin1')));
      assert.match(head.rest, /^HTTP\/1\.1 /, `no body after the HEAD's head: ${JSON.stringify(head.rest.slice(0, 120))}`);
      const second = firstResponse(head.rest);
      assert.equal(second.status, get.status);
      assert.equal(second.rest.length, Buffer.byteLength(get.rest, 'latin1'));
    });
  }

  test('HEAD /v1/models with a key gets the head a GET gets (200), without the body', async () => {
    const auth = `Authorization: Bearer ${KEY}\r\n`;
    const get = firstResponse(await exchange(gw.port, `GET /v1/models HTTP/1.1\r\nHost: a\r\n${auth}Connection: close\r\n\r\n`));
    assert.equal(get.status, 200);
    const raw = await exchange(gw.port, `HEAD /v1/models HTTP/1.1\r\nHost: a\r\n${auth}\r\nGET /health HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n`);
    const head = firstResponse(raw);
    assert.equal(head.status, 200, head.statusLine);
    assert.equal(head.headers['content-length'], String(Buffer.byteLength(get.rest, 'latin1')));
    assert.match(head.rest, /^HTTP\/1\.1 200 /, `no body after the HEAD's head: ${JSON.stringify(head.rest.slice(0, 120))}`);
  });

  for (const path of ['/no/such/route', '/v1/chat/completions']) {
    test(`HEAD ${path} (an error answer) has a Content-Length and no body`, async () => {
      const raw = await exchange(gw.port, `HEAD ${path} HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer ${KEY}\r\n\r\nGET /health HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n`);
      const head = firstResponse(raw);
      assert.ok(head.status >= 400, head.statusLine);
      assert.ok(Number(head.headers['content-length']) > 0);
      assert.match(head.rest, /^HTTP\/1\.1 200 /, `no body after the HEAD's head: ${JSON.stringify(head.rest.slice(0, 120))}`);
    });
  }

  test('Expect: 100-continue gets "100 Continue" before the body is sent, then the answer', async () => {
    const body = chatBody();
    const s = await openSocket(gw.port);
    s.write(post('/v1/chat/completions', { headers: `Content-Length: ${body.length}\r\nExpect: 100-continue\r\nConnection: close\r\n` }));
    await until(s, /\r\n\r\n/, 'the 100 Continue');
    assert.match(s.received, /^HTTP\/1\.1 100 Continue\r\n\r\n$/);
    s.write(body);
    await withTimeout(s.gone, 8000, 'the answer');
    const final = firstResponse(s.received.slice('HTTP/1.1 100 Continue\r\n\r\n'.length));
    assert.equal(final.status, 200, s.received.slice(0, 400));
    assert.equal(JSON.parse(final.rest).choices[0].message.content, simText(3));
  });

  test('Expect: 100-continue with a declared body over the limit gets 413 without a 100 Continue', async () => {
    const s = await openSocket(gw.port);
    s.write(post('/v1/chat/completions', { headers: `Content-Length: ${5 << 20}\r\nExpect: 100-continue\r\n` }));
    await withTimeout(s.gone, 8000, 'the 413 and the close');
    const r = firstResponse(s.received);
    assert.equal(r.status, 413, s.received.slice(0, 400));
    assert.doesNotMatch(s.received, /100 Continue/);
  });

  test('a request without Expect gets no 100 Continue', async () => {
    const body = chatBody();
    const raw = await exchange(gw.port, post('/v1/chat/completions', { headers: `Content-Length: ${body.length}\r\nConnection: close\r\n`, body }));
    assert.match(raw, /^HTTP\/1\.1 200 /);
  });
});

describe('HTTP/1.0 streams', () => {
  test('a streamed answer to an HTTP/1.0 client is plain SSE text ended by close (no chunk framing)', async () => {
    const body = chatBody({ stream: true, max_tokens: 6 });
    const raw = await exchange(gw.port, post('/v1/chat/completions', { version: '1.0', headers: `Content-Length: ${body.length}\r\n`, body }));
    const r = firstResponse(raw);
    assert.equal(r.status, 200, raw.slice(0, 400));
    assert.match(r.statusLine, /^HTTP\/1\.0 /);
    assert.equal(r.headers['transfer-encoding'], undefined);
    assert.equal(r.headers['content-length'], undefined);
    assert.equal(r.headers.connection, 'close');
    // Exactly SSE: events of "data: ..." lines (or comments), each ended by a blank line.
    assert.match(r.rest, /^(?:(?:data: [^\r\n]*|: [^\r\n]*)\n\n)+$/, `SSE only: ${JSON.stringify(r.rest.slice(0, 300))}`);
    const datas = r.rest.split('\n').filter((l) => l.startsWith('data: ')).map((l) => l.slice(6));
    assert.equal(datas.at(-1), '[DONE]');
    const text = datas
      .slice(0, -1)
      .map((d) => JSON.parse(d).choices?.[0]?.delta?.content ?? '')
      .join('');
    assert.equal(text, simText(6));
  });

  test('the same stream over HTTP/1.1 is chunked', async () => {
    const body = chatBody({ stream: true });
    const raw = await exchange(gw.port, post('/v1/chat/completions', { headers: `Content-Length: ${body.length}\r\nConnection: close\r\n`, body }));
    const r = firstResponse(raw);
    assert.equal(r.headers['transfer-encoding'], 'chunked');
    assert.match(r.rest, /0\r\n\r\n$/);
  });
});

describe('client request ids', () => {
  test('an X-Request-Id with a quote or backslash is replaced, never echoed into a body', async () => {
    for (const bad of ['bad"id', 'bad\\id', 'a b', 'x{"y":1}']) {
      // The Ollama wire: the gateway writes the request id into the body it builds.
      const r = await request(`${gw.url}/v1/chat/completions`, {
        method: 'POST',
        key: KEY,
        headers: { 'x-request-id': bad },
        body: { model: 'llama', messages: USER, max_tokens: 2 },
      });
      assert.equal(r.status, 200, r.text);
      assert.ok(r.json, `a JSON body: ${r.text}`);
      assert.match(r.headers.get('x-request-id'), /^[0-9a-f]{32}$/);
      assert.ok(!r.text.includes(bad), r.text);
    }
  });

  test('a safe X-Request-Id is kept', async () => {
    const r = await request(`${gw.url}/health`, { headers: { 'x-request-id': 'client-1.2:3_x' } });
    assert.equal(r.headers.get('x-request-id'), 'client-1.2:3_x');
  });
});

describe('first-byte timeout', () => {
  test('a connection that sends nothing is closed after timeouts.client_first_byte; one that spoke stays open', async () => {
    // A keep-alive connection that has served a request waits under timeouts.keep_alive
    // (75 s here) ...
    const spoke = await openSocket(gw.port);
    spoke.write('GET /health HTTP/1.1\r\nHost: a\r\n\r\n');
    await until(spoke, /\r\n\r\n\{"status":"ok"\}/, 'the /health answer');
    // ... while one opened after it that never speaks is closed first.
    const silent = await openSocket(gw.port);
    await withTimeout(silent.gone, 8000, 'the silent connection to be closed');
    assert.equal(silent.received, '', 'closed without an answer');
    assert.equal(spoke.closedByPeer, false, 'the connection that spoke is still open');
    spoke.write('GET /health HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n');
    await withTimeout(spoke.gone, 8000, 'the second answer');
    assert.equal(countResponses(spoke.received), 2);
  });
});

// ---- the connection cap -----------------------------------------------------------------

describe('connection cap (limits.max_connections)', () => {
  const CAP = 20;
  let slowSim;
  let capGw;
  let oneWorker;
  const sockets = [];

  before(async () => {
    slowSim = await startSim({ ttft: '60s' });
    const config = (workers) => ({
      instance: `it-cap-${workers}`,
      workers,
      keys: keysAll(),
      limits: { max_connections: CAP },
      timeouts: { heartbeat: '100ms' },
      models: [
        { alias: 'gpt', provider: 'openai', base_url: `${sim.url}/v1` },
        { alias: 'slow', provider: 'openai', base_url: `${slowSim.url}/v1` },
      ],
    });
    [capGw, oneWorker] = await Promise.all([startGateway(config(2)), startGateway(config(1))]);
  });

  after(async () => {
    for (const s of sockets) s.destroy();
    await Promise.all([capGw?.stop(), oneWorker?.stop(), slowSim?.stop()]);
  });

  async function idleSockets(port, n) {
    const out = [];
    for (let i = 0; i < n; i++) out.push(await openSocket(port));
    sockets.push(...out);
    return out;
  }

  test('at the cap with idle connections, a new request is served and an idle connection is closed', async () => {
    const idle = await idleSockets(capGw.port, CAP);
    const r = await rawRequest({ port: capGw.port, method: 'GET', path: '/health' });
    assert.equal(r.status, 200, r.body);
    await waitFor(() => idle.some((s) => s.closedByPeer), { what: 'an idle connection to be closed' });
    for (const s of idle) s.destroy();
  });

  test('the oldest idle connection is closed first', async () => {
    const idle = await idleSockets(oneWorker.port, CAP);
    const r = await rawRequest({ port: oneWorker.port, method: 'GET', path: '/health' });
    assert.equal(r.status, 200, r.body);
    await withTimeout(idle[0].gone, 8000, 'the oldest idle connection to be closed');
    assert.deepEqual(
      idle.slice(1).filter((s) => s.closedByPeer).length,
      0,
      'only the oldest was closed',
    );
    for (const s of idle) s.destroy();
  });

  test('at the cap with every connection busy, a new connection gets 503 and is closed', async () => {
    // Wait until the previous test's sockets are gone from the count.
    await waitFor(async () => (await rawRequest({ port: capGw.port, path: '/health' })).status === 200, {
      what: 'the gateway to take requests',
    });
    const body = chatBody({ model: 'slow', stream: true });
    const busy = [];
    for (let i = 0; i < CAP; i++) {
      const s = await openSocket(capGw.port);
      s.write(post('/v1/chat/completions', { headers: `Content-Length: ${body.length}\r\n`, body }));
      busy.push(s);
    }
    sockets.push(...busy);
    // Each stream has its head (sent with the first heartbeat): every connection is busy.
    for (const s of busy) await until(s, /^HTTP\/1\.1 200 [^]*\r\n\r\n/, 'a stream head');
    const extra = await openSocket(capGw.port);
    extra.write('GET /health HTTP/1.1\r\nHost: a\r\n\r\n');
    await withTimeout(extra.gone, 8000, 'the refused connection to be closed');
    const r = firstResponse(extra.received);
    assert.equal(r.status, 503, extra.received);
    assert.equal(r.headers.connection, 'close');
    assert.equal(JSON.parse(r.rest).error.code, 'too_many_connections');
    assert.ok(busy.every((s) => !s.closedByPeer), 'the busy connections were left alone');

    const metrics = () => rawRequest({ port: capGw.adminPort, path: '/metrics' });
    for (const s of busy) s.destroy();
    // Room again once they are gone.
    const m = await waitFor(async () => {
      const res = await metrics();
      return res.status === 200 && res;
    }, { what: 'a request to be served again' });
    assert.match(m.body, /^sluice_client_connections_refused_total [1-9]/m);
    assert.match(m.body, /^sluice_client_connections_evicted_total [1-9]/m);
    assert.match(m.body, /^sluice_client_connections_open \d+$/m);
  });
});

// ---- out of file descriptors --------------------------------------------------------------

describe('out of file descriptors', () => {
  let fdGw;
  const held = [];

  before(async () => {
    // A cap the descriptor limit set below cannot honour.
    fdGw = await startGateway({ instance: 'it-fd', keys: keysAll(), limits: { max_connections: 5000 }, models: [
      { alias: 'gpt', provider: 'openai', base_url: `${sim.url}/v1` },
    ] });
  });

  after(async () => {
    for (const s of held) s.destroy();
    await fdGw?.stop();
  });

  // Not under the sanitizers: out of descriptors, UBSan's own type check cannot read what
  // it needs and reports an invalid vptr in Boost's error categories.
  test('at EMFILE a new client is answered 503 and closed, not left waiting; service resumes after', { skip: !!process.env.ASAN_OPTIONS && 'runs in the plain build only (UBSan needs descriptors too)' }, async () => {
    const { execFileSync } = await import('node:child_process');
    const fs = await import('node:fs');
    const open = fs.readdirSync(`/proc/${fdGw.pid}/fd`).length;
    const limit = open + 12;
    execFileSync('prlimit', ['--pid', String(fdGw.pid), `--nofile=${limit}:${limit}`]);
    // More connections than the descriptors left: the gateway accepts (and holds, idle)
    // what fits; each one past that must be told 503 and closed, not left in the backlog.
    for (let i = 0; i < 30; i++) held.push(await openSocket(fdGw.port));
    await waitFor(() => held.some((s) => s.closedByPeer), { what: 'a connection past the limit to be closed' });
    const shed = held.filter((s) => s.closedByPeer);
    assert.ok(shed.length < held.length, 'some connections were accepted');
    for (const s of shed) assert.match(s.received, /^HTTP\/1\.1 503 /);
    for (const h of held) h.destroy();
    const r = await waitFor(async () => {
      const res = await rawRequest({ port: fdGw.port, path: '/health' }).catch(() => null);
      return res?.status === 200 && res;
    }, { what: 'the gateway to serve again' });
    assert.equal(r.status, 200);
  });
});
