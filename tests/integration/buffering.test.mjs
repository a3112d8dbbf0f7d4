// A slow reader: the relay reads the upstream only as fast as the client takes the frames,
// and nothing is lost when the upstream finishes before the client has read it all.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';

import { KEY, USER, keysAll, simText, startGateway, startSim } from './lib.mjs';

let sim, gw;

before(async () => {
  // A fast upstream: every token at once.
  sim = await startSim({ ttft: '0ms', 'inter-token': '0ms', 'max-output-tokens': 100000 });
  gw = await startGateway({
    keys: keysAll(),
    params: { max_tokens: { min: 1, max: 100000, integer: true } },
    models: [{ alias: 'fast', provider: 'openai', base_url: `${sim.url}/v1`, model: 'fast' }],
  });
});

after(async () => {
  if (gw) await gw.stop();
  if (sim) await sim.stop();
});

// Streams one request, reading slowly at first (the client's socket fills, the relay
// buffer fills, the upstream finishes while frames are still queued), then everything.
function slowReader(body, pauseMs) {
  return new Promise((resolve, reject) => {
    const req = http.request(
      `${gw.url}/v1/chat/completions`,
      { method: 'POST', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' }, agent: false },
      (res) => {
        const parts = [];
        res.pause();
        setTimeout(() => res.resume(), pauseMs);
        // Then keep reading slowly to the end, so the relay is still blocked on the client
        // when the upstream has finished.
        let sincePause = 0;
        res.on('data', (d) => {
          parts.push(d);
          sincePause += d.length;
          if (sincePause >= 64 * 1024) {
            sincePause = 0;
            res.pause();
            setTimeout(() => res.resume(), 10);
          }
        });
        res.on('end', () => resolve({ status: res.statusCode, text: Buffer.concat(parts).toString('utf8') }));
        res.on('error', reject);
      },
    );
    req.setTimeout(30000, () => req.destroy(new Error('no answer within 30 s')));
    req.on('error', reject);
    req.end(JSON.stringify(body));
  });
}

function contentOf(text) {
  let s = '';
  let done = false;
  for (const block of text.split('\n\n')) {
    const line = block.split('\n').find((l) => l.startsWith('data: '));
    if (!line) continue;
    const data = line.slice(6);
    if (data === '[DONE]') {
      done = true;
      continue;
    }
    const j = JSON.parse(data);
    assert.equal(j.error, undefined, `unexpected error event: ${data}`);
    s += j.choices?.[0]?.delta?.content ?? '';
  }
  return { s, done };
}

// Enough output (~15 MB) to fill the kernel's socket buffers while the client pauses, so
// the relay's writes block and its buffer fills behind them.
for (const [n, pause] of [
  [3000, 300],
  [75000, 1500],
]) {
  test(`a ${n}-token stream read slowly arrives whole, ending with [DONE]`, async () => {
    const r = await slowReader({ model: 'fast', messages: USER, stream: true, max_tokens: n }, pause);
    assert.equal(r.status, 200);
    const { s, done } = contentOf(r.text);
    assert.equal(s.length, simText(n).length, 'every token arrived');
    assert.equal(s, simText(n));
    assert.ok(done, 'the stream ends with data: [DONE]');
  });
}
