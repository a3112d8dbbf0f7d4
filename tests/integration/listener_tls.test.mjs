// TLS on the gateway's own listener (the `tls` section, docs/deploy.md "TLS"): curl, the
// official SDKs and nginx as clients; certificates renewed by SIGHUP without dropping a
// connection; client certificates (mutual TLS); the same limits and timeouts as plain HTTP.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import net from 'node:net';
import path from 'node:path';
import tls from 'node:tls';
import { promisify } from 'node:util';

import {
  BIN, KEY, REPO, keysAll, rawRequest, startGateway, startRecorder, tempDir, toYaml, waitFor, withTimeout,
} from './lib.mjs';

const run = promisify(execFile);
const NGINX = ['/usr/sbin/nginx', '/usr/bin/nginx'].find((p) => fs.existsSync(p));
const MODELS = [{ alias: 'demo', provider: 'simulated', sim: { ttft: '10ms', inter_token: '2ms', jitter: 0 } }];
const BODY = { model: 'demo', messages: [{ role: 'user', content: 'Hello over TLS.' }], max_tokens: 8 };

let dir;
let pki;

function openssl(args) {
  execFileSync('openssl', args, { stdio: 'ignore' });
}

// A CA, and certificates it signs (`ext`: the extensions of the leaf).
function makeCa(name) {
  const key = path.join(dir, `${name}.key`);
  const crt = path.join(dir, `${name}.crt`);
  openssl(['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', crt, '-days', '2', '-subj', `/CN=${name}`]);
  return { key, crt, name };
}
function issue(ca, name, ext) {
  const key = path.join(dir, `${name}.key`);
  const csr = path.join(dir, `${name}.csr`);
  const crt = path.join(dir, `${name}.crt`);
  const extFile = path.join(dir, `${name}.ext`);
  fs.writeFileSync(extFile, ext);
  openssl(['req', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', csr, '-subj', `/CN=${name}`]);
  openssl(['x509', '-req', '-in', csr, '-CA', ca.crt, '-CAkey', ca.key, '-CAcreateserial', '-out', crt, '-days', '2', '-extfile', extFile]);
  return { key, crt, name };
}
const SERVER_EXT = 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n';
const CLIENT_EXT = 'extendedKeyUsage=clientAuth\n';

// The gateway's certificate files: copies it reads (a renewal overwrites them).
function servingFiles(name) {
  return { cert_file: path.join(dir, `${name}-serving.crt`), key_file: path.join(dir, `${name}-serving.key`) };
}
function install(files, cert) {
  fs.copyFileSync(cert.crt, files.cert_file);
  fs.copyFileSync(cert.key, files.key_file);
}

// One HTTPS request (node's client: verifies the chain against `ca`, and the host).
function httpsRequest(port, { method = 'POST', path: p = '/v1/chat/completions', body = BODY, agent = false, ca = pki.ca.crt, cert, key, headers = {} } = {}) {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body);
    const req = https.request(
      {
        host: '127.0.0.1', port, method, path: p, agent,
        ca: fs.readFileSync(ca),
        cert: cert && fs.readFileSync(cert), key: key && fs.readFileSync(key),
        headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', ...headers },
      },
      (res) => {
        const parts = [];
        const peer = res.socket.getPeerCertificate();
        res.on('data', (d) => parts.push(d));
        res.on('end', () =>
          resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(parts).toString('utf8'), serial: peer.serialNumber, subject: peer.subject?.CN, reused: req.reusedSocket }),
        );
      },
    );
    req.setTimeout(10000, () => req.destroy(new Error('no answer within 10 s')));
    req.on('error', reject);
    req.end(payload);
  });
}

// Resolves with the error a TLS client gets (or null when the handshake and a request pass).
async function handshakeError(port, opts) {
  try {
    const r = await httpsRequest(port, opts);
    return r.status === 200 ? null : new Error(`HTTP ${r.status}`);
  } catch (e) {
    return e;
  }
}

// Waits for the peer to close `sock` (a raw TCP socket); resolves the time it took.
function closedWithin(sock, ms) {
  const t0 = performance.now();
  return withTimeout(new Promise((r) => sock.on('close', () => r(performance.now() - t0))), ms, 'the gateway to close the connection');
}

before(() => {
  dir = tempDir('sluice-ltls-');
  const ca = makeCa('test-ca');
  const rogue = makeCa('rogue-ca');
  pki = {
    ca,
    rogue,
    server: issue(ca, 'gw-first', SERVER_EXT),
    renewed: issue(ca, 'gw-renewed', SERVER_EXT),
    client: issue(ca, 'lb-client', CLIENT_EXT),
    rogueClient: issue(rogue, 'rogue-client', CLIENT_EXT),
  };
});

describe('a TLS listener', () => {
  let gw;
  let files;

  before(async () => {
    files = servingFiles('one');
    install(files, pki.server);
    gw = await startGateway({
      keys: keysAll(),
      models: MODELS,
      limits: { max_body_bytes: 4096 },
      timeouts: { client_first_byte: '500ms', client_header: '1s' },
      tls: { ...files, check_interval: '0s' }, // (renewals by SIGHUP only here)
    });
  });
  after(() => gw?.stop());

  test('curl gets chat completions over HTTPS, whole and streamed, verifying the certificate', async () => {
    const url = `https://127.0.0.1:${gw.port}/v1/chat/completions`;
    const common = ['-sS', '--cacert', pki.ca.crt, '-H', `authorization: Bearer ${KEY}`, '-H', 'content-type: application/json'];
    const whole = await run('curl', [...common, '-d', JSON.stringify(BODY), url]);
    const json = JSON.parse(whole.stdout);
    assert.equal(json.object, 'chat.completion');
    assert.ok(json.choices[0].message.content.length > 0);
    const streamed = await run('curl', [...common, '-N', '-d', JSON.stringify({ ...BODY, stream: true }), url]);
    const events = streamed.stdout.split('\n').filter((l) => l.startsWith('data: '));
    assert.ok(events.length >= 3, streamed.stdout);
    assert.equal(events.at(-1), 'data: [DONE]');
    // Without the CA, curl refuses the certificate: the listener really is TLS.
    await assert.rejects(run('curl', ['-sS', '-d', '{}', url]), /certificate/);
    // ALPN: curl offers h2 and http/1.1; the listener picks HTTP/1.1.
    const v = await run('curl', [...common, '-o', '/dev/null', '-w', '%{http_version}', `https://127.0.0.1:${gw.port}/health`]);
    assert.equal(v.stdout, '1.1');
  });

  test('the OpenAI and Anthropic SDKs over HTTPS (the CA given to node as NODE_EXTRA_CA_CERTS)', async () => {
    const script = `
      import OpenAI from 'openai';
      import Anthropic from '@anthropic-ai/sdk';
      const base = 'https://127.0.0.1:${gw.port}';
      const openai = new OpenAI({ apiKey: '${KEY}', baseURL: base + '/v1', maxRetries: 0 });
      const whole = await openai.chat.completions.create(${JSON.stringify(BODY)});
      let streamed = '';
      for await (const c of await openai.chat.completions.create({ ...${JSON.stringify(BODY)}, stream: true })) {
        streamed += c.choices[0]?.delta?.content ?? '';
      }
      const anthropic = new Anthropic({ apiKey: '${KEY}', baseURL: base, maxRetries: 0 });
      const msg = await anthropic.messages.create({ model: 'demo', max_tokens: 8, messages: [{ role: 'user', content: 'Hi' }] });
      console.log(JSON.stringify({ whole: whole.choices[0].message.content, streamed, anthropic: msg.content[0].text }));
    `;
    const cwd = path.join(REPO, 'tests', 'integration');
    const out = await run(process.execPath, ['--input-type=module', '-e', script], {
      cwd, env: { ...process.env, NODE_EXTRA_CA_CERTS: pki.ca.crt }, timeout: 30000,
    });
    const r = JSON.parse(out.stdout.trim().split('\n').at(-1));
    assert.ok(r.whole.length > 0);
    assert.equal(r.streamed, r.whole, 'the streamed answer assembles to the whole one (the simulator is deterministic)');
    assert.ok(r.anthropic.length > 0);
    // Without the CA the SDK refuses the connection.
    await assert.rejects(run(process.execPath, ['--input-type=module', '-e', script], { cwd, timeout: 30000 }), /certificate|Connection error/);
  });

  test('plain HTTP sent to the TLS port is answered 400 in plain text, and counted', async () => {
    const before = (await gw.metric('sluice_tls_handshake_failures_total')) ?? 0;
    const r = await rawRequest({ port: gw.port, path: '/health' });
    assert.equal(r.status, 400);
    assert.match(JSON.parse(r.body).error.message, /speaks HTTPS only/);
    assert.equal(await gw.metric('sluice_tls_handshake_failures_total'), before + 1);
  });

  test('keep-alive: several requests on one TLS connection; the body limit answers 413 over TLS', async () => {
    const agent = new https.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      const a = await httpsRequest(gw.port, { agent });
      const b = await httpsRequest(gw.port, { agent });
      assert.equal(a.status, 200);
      assert.equal(b.status, 200);
      assert.equal(b.reused, true, 'the second request went on the first connection');
      const big = await httpsRequest(gw.port, { agent, body: { ...BODY, messages: [{ role: 'user', content: 'x'.repeat(8000) }] } });
      assert.equal(big.status, 413);
    } finally {
      agent.destroy();
    }
  });

  test('over TLS: a client that leaves mid-stream, one that pipelines; every connection and request is released', async () => {
    const ca = fs.readFileSync(pki.ca.crt);
    const open = (onData) => new Promise((resolve, reject) => {
      const s = tls.connect({ host: '127.0.0.1', port: gw.port, ca }, () => resolve(s));
      s.on('error', () => {});
      s.once('error', reject);
      if (onData) s.on('data', onData);
    });
    // A long stream, left after its first bytes.
    const body = JSON.stringify({ ...BODY, max_tokens: 2000, stream: true });
    let got = '';
    const leaving = await open((d) => (got += d));
    leaving.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\n` +
      `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
    await waitFor(() => got.includes('data: '), { what: 'the first stream bytes' });
    assert.ok((await gw.infra()).requests.live >= 1);
    leaving.destroy();
    // Two requests in one write: both answered, in order.
    let both = '';
    const piped = await open((d) => (both += d));
    piped.write('GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    await waitFor(() => (both.match(/HTTP\/1\.1 200/g) ?? []).length === 2, { what: 'both pipelined answers' });
    piped.destroy();
    // Nothing held: no request live, no client connection open (the checks go to the admin listener).
    await waitFor(async () => (await gw.infra()).requests.live === 0, { what: 'the stream to be released' });
    await waitFor(async () => (await gw.metric('sluice_client_connections_open')) === 0, { what: 'the connections to close' });
  });

  test('a connection that sends nothing, or stops in the middle of its handshake, is closed by the timeouts', async () => {
    const silent = net.connect(gw.port, '127.0.0.1');
    silent.on('error', () => {});
    await closedWithin(silent, 10000); // client_first_byte
    // The first bytes of a ClientHello record, then nothing: closed by client_header.
    const stalled = net.connect(gw.port, '127.0.0.1', () => stalled.write(Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00, 0x01])));
    stalled.on('error', () => {});
    await closedWithin(stalled, 10000);
    const infra = await gw.infra();
    assert.ok(infra.tls.handshake_failures >= 1, JSON.stringify(infra.tls));
  });

  test('SIGHUP: new connections get the renewed certificate, an open connection goes on with its own', async () => {
    const agent = new https.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      const first = await httpsRequest(gw.port, { agent });
      assert.equal(first.subject, 'gw-first');
      const reloadsBefore = (await gw.infra()).routing.reloads.ok;
      install(files, pki.renewed);
      gw.child.kill('SIGHUP');
      await waitFor(async () => (await gw.infra()).routing.reloads.ok > reloadsBefore, { what: 'the SIGHUP reload' });
      await waitFor(() => /the listener's certificate: CN=gw-renewed \(expires /.test(gw.output.stderr), { what: 'the reload to name the new certificate' });
      const fresh = await httpsRequest(gw.port);
      assert.equal(fresh.subject, 'gw-renewed');
      assert.notEqual(fresh.serial, first.serial);
      const again = await httpsRequest(gw.port, { agent });
      assert.equal(again.status, 200);
      assert.equal(again.reused, true, 'the open connection was not dropped');
      assert.equal(again.subject, 'gw-first');
      const infra = await gw.infra();
      assert.equal(infra.tls.subject, 'CN=gw-renewed');
      assert.equal(await gw.metric('sluice_tls_certificate_expiry_timestamp_seconds'), infra.tls.not_after);
    } finally {
      agent.destroy();
    }
  });

  test('a renewed certificate that does not do is refused, named, and the one in force stays', async () => {
    const inForce = (await httpsRequest(gw.port)).serial;
    // A key that is not the certificate's.
    fs.copyFileSync(pki.client.key, files.key_file);
    try {
      const r = await rawRequest({ port: gw.adminPort, method: 'POST', path: '/admin/reload', body: '' });
      assert.notEqual(r.status, 200, r.body);
      const { error } = JSON.parse(r.body);
      assert.equal(error.code, 'reload_refused', r.body);
      assert.match(error.message, /private key in .* does not match the certificate in/);
      assert.ok(error.message.includes(files.cert_file), error.message);
      assert.equal((await httpsRequest(gw.port)).serial, inForce);
    } finally {
      fs.copyFileSync(pki.renewed.key, files.key_file);
    }
  });
});

describe('certificate files watched (tls.check_interval)', () => {
  let gw;
  let files;

  before(async () => {
    files = servingFiles('watched');
    install(files, pki.server);
    gw = await startGateway({ keys: keysAll(), models: MODELS, tls: { ...files, check_interval: '200ms' } });
  });
  after(() => gw?.stop());

  test('renewed files are served without a signal; a pair that does not do is reported and the one in force stays', async () => {
    assert.equal((await httpsRequest(gw.port)).subject, 'gw-first');
    // Half a renewal (a new certificate, the old key): refused, the old pair serves on.
    fs.copyFileSync(pki.renewed.crt, files.cert_file);
    await waitFor(() => /the certificate files changed but do not do[^\n]*does not match the certificate/.test(gw.output.stderr), {
      timeout: 10000, what: 'the mismatched pair to be reported',
    });
    assert.equal((await httpsRequest(gw.port)).subject, 'gw-first');
    // The key follows: the renewed pair is served.
    fs.copyFileSync(pki.renewed.key, files.key_file);
    await waitFor(async () => (await httpsRequest(gw.port)).subject === 'gw-renewed', { timeout: 10000, what: 'the renewed certificate' });
    assert.equal((await gw.infra()).tls.subject, 'CN=gw-renewed');
  });
});

describe('client certificates (mutual TLS)', () => {
  let required;
  let optional;

  before(async () => {
    const files = servingFiles('mtls');
    install(files, pki.server);
    [required, optional] = await Promise.all([
      startGateway({ keys: keysAll(), models: MODELS, tls: { ...files, client_ca_file: pki.ca.crt } }),
      startGateway({ keys: keysAll(), models: MODELS, tls: { ...files, client_ca_file: pki.ca.crt, client_certs: 'optional' } }),
    ]);
  });
  after(() => Promise.all([required?.stop(), optional?.stop()]));

  test('require: only a certificate the configured CA signed gets through', async () => {
    const before = (await required.metric('sluice_tls_handshake_failures_total')) ?? 0;
    assert.equal(await handshakeError(required.port, { cert: pki.client.crt, key: pki.client.key }), null);
    assert.ok(await handshakeError(required.port, {}), 'no client certificate');
    assert.ok(await handshakeError(required.port, { cert: pki.rogueClient.crt, key: pki.rogueClient.key }), 'another CA');
    assert.equal(await required.metric('sluice_tls_handshake_failures_total'), before + 2);
    // curl too: refused without a certificate, served with one.
    const url = `https://127.0.0.1:${required.port}/health`;
    await assert.rejects(run('curl', ['-sS', '--fail', '--cacert', pki.ca.crt, url]));
    const ok = await run('curl', ['-sS', '--fail', '--cacert', pki.ca.crt, '--cert', pki.client.crt, '--key', pki.client.key, url]);
    assert.ok(ok.stdout.length > 0);
    assert.equal((await required.infra()).tls.client_certs, 'require');
  });

  test('optional: no certificate is fine, one from another CA is refused', async () => {
    assert.equal(await handshakeError(optional.port, {}), null);
    assert.equal(await handshakeError(optional.port, { cert: pki.client.crt, key: pki.client.key }), null);
    assert.ok(await handshakeError(optional.port, { cert: pki.rogueClient.crt, key: pki.rogueClient.key }));
  });

  test('nginx as the TLS client in front (verifying the gateway, presenting its certificate): whole and streamed answers', async () => {
    assert.ok(NGINX, 'nginx is required (scripts/setup.sh --test installs it)');
    const ndir = tempDir('sluice-ltls-nginx-');
    const port = await new Promise((r) => {
      const s = net.createServer().listen(0, '127.0.0.1', () => {
        const p = s.address().port;
        s.close(() => r(p));
      });
    });
    fs.writeFileSync(path.join(ndir, 'nginx.conf'), `
worker_processes 1;
pid ${ndir}/nginx.pid;
error_log ${ndir}/error.log warn;
daemon off;
events { worker_connections 64; }
http {
  access_log off;
  client_body_temp_path ${ndir}/b; proxy_temp_path ${ndir}/p; fastcgi_temp_path ${ndir}/f;
  uwsgi_temp_path ${ndir}/u; scgi_temp_path ${ndir}/s;
  upstream sluice { server 127.0.0.1:${required.port}; keepalive 8; }
  server {
    listen 127.0.0.1:${port};
    location / {
      proxy_pass https://sluice;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_ssl_name localhost;
      proxy_ssl_server_name on;
      proxy_ssl_verify on;
      proxy_ssl_trusted_certificate ${pki.ca.crt};
      proxy_ssl_certificate ${pki.client.crt};
      proxy_ssl_certificate_key ${pki.client.key};
    }
  }
}`);
    const child = spawn(NGINX, ['-p', ndir, '-c', path.join(ndir, 'nginx.conf'), '-e', path.join(ndir, 'error.log')], { stdio: 'ignore' });
    const exited = new Promise((r) => child.on('exit', r));
    try {
      await waitFor(() => new Promise((resolve) => {
        const s = net.connect(port, '127.0.0.1', () => { s.destroy(); resolve(true); });
        s.on('error', () => resolve(false));
      }), { timeout: 5000, what: 'nginx to listen' });
      const headers = { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' };
      for (let i = 0; i < 3; i++) {
        const whole = await rawRequest({ port, method: 'POST', path: '/v1/chat/completions', headers, body: JSON.stringify(BODY) });
        assert.equal(whole.status, 200, whole.body + fs.readFileSync(path.join(ndir, 'error.log'), 'utf8'));
        assert.equal(JSON.parse(whole.body).object, 'chat.completion');
      }
      const streamed = await rawRequest({ port, method: 'POST', path: '/v1/chat/completions', headers, body: JSON.stringify({ ...BODY, stream: true }) });
      assert.equal(streamed.status, 200);
      assert.match(streamed.body, /data: \[DONE\]/);
    } finally {
      child.kill('SIGTERM');
      await exited;
    }
  });
});

describe('TLS settings that do not do', () => {
  // Runs `sluice serve` on a config with `tls`; resolves its exit code and stderr (it must
  // not start).
  async function serveFails(tlsSection) {
    const d = tempDir('sluice-ltls-bad-');
    const cfg = path.join(d, 'sluice.yaml');
    fs.writeFileSync(cfg, toYaml({ listen: '127.0.0.1:0', access_log: '', data_dir: d, keys: keysAll(), models: MODELS, tls: tlsSection }));
    // (stdin an open pipe: a prompt for a pass phrase would wait on it for good)
    const child = spawn(BIN, ['serve', '--config', cfg], { stdio: ['pipe', 'ignore', 'pipe'] });
    let err = '';
    child.stderr.on('data', (b) => (err += b));
    const exited = new Promise((r) => child.on('exit', r));
    try {
      return { code: await withTimeout(exited, 10000, 'sluice serve to refuse the config'), err };
    } finally {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGKILL');
        await exited;
      }
    }
  }

  test('a key that is not the certificate\'s, a missing file, half a pair: refused at start, saying which', async () => {
    const mismatch = await serveFails({ cert_file: pki.server.crt, key_file: pki.client.key });
    assert.equal(mismatch.code, 1);
    assert.match(mismatch.err, /tls: the private key in .*lb-client\.key does not match the certificate in .*gw-first\.crt/);
    const missing = await serveFails({ cert_file: path.join(dir, 'nope.crt'), key_file: pki.server.key });
    assert.equal(missing.code, 1);
    assert.match(missing.err, /tls\.cert_file.*file not found: .*nope\.crt/);
    const half = await serveFails({ cert_file: pki.server.crt });
    assert.equal(half.code, 1);
    assert.match(half.err, /cert_file is set without key_file/);
    const notPem = await serveFails({ cert_file: path.join(dir, 'gw-first.csr'), key_file: pki.server.key });
    assert.equal(notPem.code, 1);
    assert.match(notPem.err, /tls: cannot use the certificate chain in .*gw-first\.csr/);
    // An encrypted key is refused, not prompted for.
    const encrypted = path.join(dir, 'gw-first-encrypted.key');
    openssl(['pkey', '-in', pki.server.key, '-aes256', '-passout', 'pass:secret', '-out', encrypted]);
    const locked = await serveFails({ cert_file: pki.server.crt, key_file: encrypted });
    assert.equal(locked.code, 1);
    assert.match(locked.err, /cannot use the private key \(it must be unencrypted PEM\)/);
    assert.doesNotMatch(locked.err, /pass phrase/);
  });
});

describe('large stream writes over TLS', () => {
  let gw;
  let rec;
  const BIG = 'y'.repeat(40000);

  before(async () => {
    // An upstream whose stream sends a small event, then (once the client has its head
    // and first frame) one event far over a TLS record's 16 KiB.
    rec = await startRecorder((req, res, json) => {
      if (!json?.stream) return false;
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const chunk = (delta, finish = null) =>
        `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'x', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
      res.write(chunk({ role: 'assistant', content: 'first ' }));
      setTimeout(() => {
        res.write(chunk({ content: BIG }));
        res.write(chunk({}, 'stop'));
        res.end('data: [DONE]\n\n');
      }, 100);
      return true;
    });
    const files = servingFiles('large');
    install(files, pki.server);
    gw = await startGateway({
      keys: keysAll(),
      models: [{ alias: 'big', provider: 'openai', base_url: `${rec.url}/v1`, model: 'x' }],
      tls: { ...files, check_interval: '0s' },
    });
  });
  after(async () => {
    await gw?.stop();
    await rec?.close();
  });

  // Regression: with the head already sent, a write over 16 KiB that began with an empty
  // buffer went out as 0 bytes (Beast's TLS stream flattens the first buffers into one
  // record) and was taken for done: the frame was lost.
  for (const version of ['1.0', '1.1']) {
    test(`an HTTP/${version} client gets a 40 KB frame that follows the first one whole`, async () => {
      const body = JSON.stringify({ model: 'big', messages: [{ role: 'user', content: 'x' }], stream: true });
      const ca = fs.readFileSync(pki.ca.crt);
      const raw = await withTimeout(new Promise((resolve, reject) => {
        const parts = [];
        const s = tls.connect({ host: '127.0.0.1', port: gw.port, ca }, () => {
          s.write(`POST /v1/chat/completions HTTP/${version}\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\n` +
            `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
        });
        s.on('data', (d) => parts.push(d));
        s.on('end', () => resolve(Buffer.concat(parts).toString('utf8')));
        s.on('error', reject);
      }), 10000, 'the whole stream');
      const at = raw.indexOf('\r\n\r\n');
      assert.match(raw, new RegExp(`^HTTP/${version.replace('.', '\\.')} 200 `), raw.slice(0, 300));
      let rest = raw.slice(at + 4);
      if (version === '1.1') {
        // Undo the chunked coding.
        let plain = '';
        for (;;) {
          const eol = rest.indexOf('\r\n');
          const size = parseInt(rest.slice(0, eol), 16);
          if (!size) break;
          plain += rest.slice(eol + 2, eol + 2 + size);
          rest = rest.slice(eol + 2 + size + 2);
        }
        rest = plain;
      }
      const datas = rest.split('\n').filter((l) => l.startsWith('data: ')).map((l) => l.slice(6));
      assert.equal(datas.at(-1), '[DONE]');
      const text = datas.slice(0, -1).map((d) => JSON.parse(d).choices?.[0]?.delta?.content ?? '').join('');
      assert.equal(text.length, 'first '.length + BIG.length);
      assert.equal(text, `first ${BIG}`);
    });
  }
});
