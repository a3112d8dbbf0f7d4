// HTTPS upstreams: a real nginx terminates TLS in front of the simulator; sluice must
// verify the chain (CA file) and the host name, and send SNI.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';

import { startSim, startGateway, keysAll, chat, USER, tempDir, waitFor, stopProcess } from './lib.mjs';

const NGINX = ['/usr/sbin/nginx', '/usr/bin/nginx'].find((p) => fs.existsSync(p));

async function freePort() {
  const srv = net.createServer();
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  const { port } = srv.address();
  await new Promise((r) => srv.close(r));
  return port;
}

function makeCert(dir, name, san) {
  const key = path.join(dir, `${name}.key`);
  const crt = path.join(dir, `${name}.crt`);
  execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', crt, '-days', '2',
    '-subj', `/CN=${name}`, '-addext', `subjectAltName=${san}`], { stdio: 'ignore' });
  return { key, crt };
}

let sim, gw, nginx, dir;

before(async () => {
  assert.ok(NGINX, 'nginx is required for the TLS tests (scripts/setup.sh --test installs it)');
  sim = await startSim({ ttft: '10ms', 'inter-token': '5ms' });
  dir = tempDir('sluice-tls-');
  const good = makeCert(dir, 'localhost', 'DNS:localhost,IP:127.0.0.1');
  const other = makeCert(dir, 'other.example', 'DNS:other.example');
  const goodPort = await freePort();
  const otherPort = await freePort();
  const conf = `
worker_processes 1;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
daemon off;
events { worker_connections 256; }
http {
  access_log off;
  client_body_temp_path ${dir}/b; proxy_temp_path ${dir}/p; fastcgi_temp_path ${dir}/f;
  uwsgi_temp_path ${dir}/u; scgi_temp_path ${dir}/s;
  server {
    listen 127.0.0.1:${goodPort} ssl;
    ssl_certificate ${good.crt}; ssl_certificate_key ${good.key};
    location / { proxy_pass ${sim.url}; proxy_http_version 1.1; proxy_buffering off; }
  }
  server {
    listen 127.0.0.1:${otherPort} ssl;
    ssl_certificate ${other.crt}; ssl_certificate_key ${other.key};
    location / { proxy_pass ${sim.url}; proxy_http_version 1.1; proxy_buffering off; }
  }
}`;
  fs.writeFileSync(path.join(dir, 'nginx.conf'), conf);
  const child = spawn(NGINX, ['-p', dir, '-c', path.join(dir, 'nginx.conf'), '-e', path.join(dir, 'error.log')], {
    stdio: 'ignore',
  });
  nginx = { child, exited: new Promise((r) => child.on('exit', (code, signal) => r({ code, signal }))) };
  await waitFor(
    () =>
      new Promise((resolve) => {
        const s = net.connect(goodPort, '127.0.0.1', () => {
          s.destroy();
          resolve(true);
        });
        s.on('error', () => resolve(false));
      }),
    { timeout: 5000, what: 'nginx to listen' },
  );
  const route = (alias, url, extra = {}) => ({ alias, provider: 'openai', base_url: url, model: 'm', ...extra });
  gw = await startGateway({
    keys: keysAll(),
    models: [
      route('trusted', `https://localhost:${goodPort}/v1`, { ca_file: good.crt }),
      route('untrusted', `https://localhost:${goodPort}/v1`),
      route('noverify', `https://localhost:${goodPort}/v1`, { tls_verify: false }),
      // The certificate is valid for other.example only, not for localhost.
      route('wronghost', `https://localhost:${otherPort}/v1`, { ca_file: other.crt }),
    ],
  });
});

after(async () => {
  if (gw) await gw.stop();
  if (nginx) await stopProcess(nginx);
  if (sim) await sim.stop();
});

test('HTTPS upstream with its CA configured answers, streamed and not', async () => {
  const r = await chat(gw, { model: 'trusted', messages: USER, max_tokens: 3 });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.usage.completion_tokens, 3);
  const s = await chat(gw, { model: 'trusted', messages: USER, max_tokens: 2, stream: true });
  assert.equal(s.status, 200, s.text);
  assert.match(s.text, /data: \[DONE\]/);
});

test('an untrusted certificate is refused with 502 upstream_unreachable', async () => {
  // Run after the trusted route pooled a connection to the same host:port: the pool must
  // not hand that verified connection to a route with different trust settings.
  const r = await chat(gw, { model: 'untrusted', messages: USER, max_tokens: 3 });
  assert.equal(r.status, 502, r.text);
  assert.equal(r.json.error.code, 'upstream_unreachable');
  assert.match(r.json.error.message, /certificate verify failed/);
});

test('a certificate for another host name is refused', async () => {
  const r = await chat(gw, { model: 'wronghost', messages: USER, max_tokens: 3 });
  assert.equal(r.status, 502, r.text);
  assert.equal(r.json.error.code, 'upstream_unreachable');
});

test('tls_verify: false accepts the untrusted certificate', async () => {
  const r = await chat(gw, { model: 'noverify', messages: USER, max_tokens: 2 });
  assert.equal(r.status, 200, r.text);
});
