// A non-streamed upstream answer is read whole, up to max_upstream_response_bytes: an answer
// of exactly the limit arrives intact (read in growing pieces: it is far above the first
// read's 1 KiB), one byte more is refused as too large, whether the upstream frames it by
// Content-Length or by chunks.
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, describe, test } from 'node:test';

import { KEY, request, startGateway } from './lib.mjs';

const LIMIT = 100_000;

// The upstream answers a chat completion whose JSON is exactly `size` bytes long, as the
// prompt says ("size=<n>;chunked=<0|1>"); chunked answers go in pieces of 7,000 bytes.
function answerOf(size) {
  const shell = (pad) =>
    JSON.stringify({
      id: 'chatcmpl-big',
      object: 'chat.completion',
      created: 1,
      model: 'big',
      choices: [{ index: 0, message: { role: 'assistant', content: pad }, finish_reason: 'stop' }],
      usage: { prompt_tokens: 3, completion_tokens: 5, total_tokens: 8 },
    });
  const fixed = Buffer.byteLength(shell(''));
  return shell('x'.repeat(size - fixed));
}

function startUpstream() {
  const server = http.createServer((req, res) => {
    const parts = [];
    req.on('data', (d) => parts.push(d));
    req.on('end', () => {
      const m = /size=(\d+);chunked=(\d)/.exec(Buffer.concat(parts).toString('utf8'));
      const body = Buffer.from(answerOf(Number(m[1])));
      if (m[2] === '1') {
        res.writeHead(200, { 'content-type': 'application/json' });
        for (let i = 0; i < body.length; i += 7000) res.write(body.subarray(i, i + 7000));
        res.end();
      } else {
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': body.length });
        res.end(body);
      }
    });
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () =>
      resolve({ url: `http://127.0.0.1:${server.address().port}`, close: () => new Promise((r) => server.close(r)) }),
    ),
  );
}

describe('a whole upstream answer up to max_upstream_response_bytes', () => {
  let up;
  let gw;
  before(async () => {
    up = await startUpstream();
    gw = await startGateway({
      keys: [{ name: 'test', key: KEY }],
      models: [{ alias: 'big', provider: 'openai', base_url: `${up.url}/v1`, model: 'big' }],
      limits: { max_upstream_response_bytes: LIMIT },
    });
  });
  after(async () => {
    await gw?.stop();
    await up?.close();
  });

  const ask = (size, chunked) =>
    request(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      key: KEY,
      body: { model: 'big', messages: [{ role: 'user', content: `size=${size};chunked=${chunked ? 1 : 0}` }] },
    });

  for (const chunked of [false, true]) {
    const framing = chunked ? 'chunked' : 'Content-Length';
    test(`${framing}: exactly the limit arrives whole`, async () => {
      const res = await ask(LIMIT, chunked);
      assert.equal(res.status, 200, res.text);
      const want = JSON.parse(answerOf(LIMIT)).choices[0].message.content;
      assert.equal(res.json.choices[0].message.content, want);
    });
    test(`${framing}: one byte over the limit is refused`, async () => {
      const res = await ask(LIMIT + 1, chunked);
      assert.equal(res.status, 502, res.text);
      assert.match(res.json.error.message, /exceeds 100000 bytes/);
    });
  }
});
