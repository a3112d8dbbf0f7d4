// The accounting invariants over random request mixes, two gateways sharing one Redis:
// both client dialects, three upstream wire formats, tools, images, n choices, streams
// cut by the client or by the upstream at random points, upstreams that report valid,
// missing or malformed usage, and Redis paused twice under the load. Afterwards:
//   - every reservation is resolved (nothing reserved or held in Redis);
//   - Redis's `used` is the sum of what the access logs say was charged, per key;
//   - a quota with on_redis_down: closed is never exceeded (every charge is within its
//     reservation, so the total stays within the limit);
//   - a complete answer whose usage was valid is charged exactly that usage.
// The mix comes from a seeded generator: SLUICE_PROPERTY_SEED=<n> replays a run (the seed
// is in every failure message).
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, describe, test } from 'node:test';

import { delay, redisLedger, request, sse, startGateway, startRedis, waitFor } from './lib.mjs';

const TIGHT = 'sk-tight-0000111122223333';
const BIG = 'sk-big-4444555566667777';
const LIMIT = 6000;

// mulberry32: a small seeded generator.
function rng(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return { next, int: (lo, hi) => lo + Math.floor(next() * (hi - lo + 1)), pick: (xs) => xs[Math.floor(next() * xs.length)] };
}

// The upstream: OpenAI, Anthropic and Ollama wire formats on one port. What it does is
// written in the prompt: "@@mode=<valid|missing|odd|cut>;words=<k>;id=<i>@@". It answers k
// words per choice ("hi hi hi ...": one token each), reports 5 prompt tokens and k × n
// completion tokens when the mode is valid, no usage when missing, malformed usage when
// odd, and drops the connection halfway through when cut. `reported` keeps what it
// reported as valid usage, by id.
function startUpstream() {
  const reported = new Map();
  const server = http.createServer((req, res) => {
    const parts = [];
    req.on('data', (d) => parts.push(d));
    req.on('end', async () => {
      const raw = Buffer.concat(parts).toString('utf8');
      const json = JSON.parse(raw);
      const m = /@@mode=(\w+);words=(\d+);id=(\d+)@@/.exec(raw);
      const mode = m ? m[1] : 'valid';
      const id = m ? Number(m[3]) : -1;
      const n = json.n ?? 1;
      const bound = json.max_completion_tokens ?? json.max_tokens ?? json.options?.num_predict ?? 1000;
      const k = Math.max(1, Math.min(m ? Number(m[2]) : 3, bound));
      const words = Array.from({ length: k }, (_, i) => (i === 0 ? 'hi' : ' hi'));
      const stream = json.stream === true;
      const cutAt = mode === 'cut' ? Math.floor(k / 2) : Infinity;
      const odd = { prompt_tokens: '5', completion_tokens: -3 };
      if (mode === 'valid') reported.set(id, 5 + k * n);
      const pace = () => delay(2);
      try {
        if (req.url.endsWith('/api/chat')) {
          const final = { model: json.model, created_at: new Date().toISOString(), done: true, done_reason: 'stop' };
          if (mode === 'valid') Object.assign(final, { prompt_eval_count: 5, eval_count: k });
          if (mode === 'odd') Object.assign(final, { prompt_eval_count: -7, eval_count: 'lots' });
          if (!stream) {
            if (mode === 'cut') return res.destroy();
            res.writeHead(200, { 'content-type': 'application/json' });
            return res.end(JSON.stringify({ ...final, message: { role: 'assistant', content: words.join('') } }));
          }
          res.writeHead(200, { 'content-type': 'application/x-ndjson' });
          for (const [i, w] of words.entries()) {
            if (i >= cutAt) return res.destroy();
            res.write(JSON.stringify({ model: json.model, message: { role: 'assistant', content: w }, done: false }) + '\n');
            await pace();
          }
          return res.end(JSON.stringify({ ...final, message: { role: 'assistant', content: '' } }) + '\n');
        }
        if (req.url.endsWith('/v1/messages')) {
          const usageIn = mode === 'valid' ? { input_tokens: 5, output_tokens: 1 } : mode === 'odd' ? { input_tokens: 'x' } : undefined;
          const usageOut = mode === 'valid' ? { output_tokens: k } : mode === 'odd' ? { output_tokens: 1.5 } : undefined;
          const msg = { id: `msg_${id}`, type: 'message', role: 'assistant', model: json.model };
          if (!stream) {
            if (mode === 'cut') return res.destroy();
            res.writeHead(200, { 'content-type': 'application/json' });
            const usage = mode === 'valid' ? { input_tokens: 5, output_tokens: k } : mode === 'odd' ? { input_tokens: -1 } : undefined;
            return res.end(
              JSON.stringify({ ...msg, content: [{ type: 'text', text: words.join('') }], stop_reason: 'end_turn', usage }),
            );
          }
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          const ev = (type, data) => res.write(`event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`);
          ev('message_start', { message: { ...msg, content: [], usage: usageIn } });
          ev('content_block_start', { index: 0, content_block: { type: 'text', text: '' } });
          for (const [i, w] of words.entries()) {
            if (i >= cutAt) return res.destroy();
            ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: w } });
            await pace();
          }
          ev('content_block_stop', { index: 0 });
          ev('message_delta', { delta: { stop_reason: 'end_turn' }, usage: usageOut });
          ev('message_stop', {});
          return res.end();
        }
        // OpenAI chat completions.
        const base = { id: `chatcmpl-${id}`, created: 1, model: json.model };
        const usage =
          mode === 'valid' ? { prompt_tokens: 5, completion_tokens: k * n, total_tokens: 5 + k * n } : mode === 'odd' ? odd : undefined;
        if (!stream) {
          if (mode === 'cut') return res.destroy();
          res.writeHead(200, { 'content-type': 'application/json' });
          const choices = Array.from({ length: n }, (_, i) => ({
            index: i,
            message: { role: 'assistant', content: words.join('') },
            finish_reason: 'stop',
          }));
          return res.end(JSON.stringify({ ...base, object: 'chat.completion', choices, usage }));
        }
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        const chunk = (choices, extra = {}) =>
          res.write(`data: ${JSON.stringify({ ...base, object: 'chat.completion.chunk', choices, ...extra })}\n\n`);
        for (const [i, w] of words.entries()) {
          if (i >= cutAt) return res.destroy();
          chunk(Array.from({ length: n }, (_, c) => ({ index: c, delta: { content: w }, finish_reason: null })));
          await pace();
        }
        chunk(Array.from({ length: n }, (_, c) => ({ index: c, delta: {}, finish_reason: 'stop' })));
        if (usage) chunk([], { usage });
        res.end('data: [DONE]\n\n');
      } catch {
        res.destroy();
      }
    });
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () => {
      const url = `http://127.0.0.1:${server.address().port}`;
      resolve({ url, reported, close: () => new Promise((r) => server.close(r)) });
    }),
  );
}

describe('accounting invariants over random request mixes', () => {
  let redis;
  let up;
  before(async () => {
    redis = await startRedis();
    up = await startUpstream();
  });
  after(async () => {
    await up?.close();
    await redis?.stop();
  });

  test('reservations resolved, Redis equals the logs, a closed quota is never exceeded, valid usage charged exactly', async () => {
    const seed = Number(process.env.SLUICE_PROPERTY_SEED) || Date.now() % 1_000_000;
    const r = rng(seed);
    const why = (s) => `${s} (seed ${seed}: SLUICE_PROPERTY_SEED=${seed} replays this run)`;
    const config = {
      keys: [
        { name: 'tight', key: TIGHT, tenant: 'acme', tier: 'gold', models: ['*'] },
        { name: 'big', key: BIG, tenant: 'acme', tier: 'gold', models: ['*'] },
      ],
      models: [
        { alias: 'oa', provider: 'openai', base_url: `${up.url}/v1`, model: 'gpt-4o' },
        { alias: 'an', provider: 'anthropic', base_url: up.url, model: 'claude-x', api_key: 'sk-ant-prop-123456' },
        { alias: 'ol', provider: 'ollama', base_url: up.url, model: 'llama3' },
      ],
      params: { max_tokens: { min: 1, max: 131072, integer: true }, n: { min: 1, max: 3, integer: true } },
      redis: { url: redis.url, timeout: '100ms', connect_timeout: '100ms', retry_interval: '200ms' },
      rate_limits: {
        backend: 'auto',
        tokens: [
          // Refuses while Redis is down: the limit holds exactly.
          { scope: 'key', key: 'tight', limit: LIMIT, per: 'day', on_redis_down: 'closed' },
          // Large: served from leases; counts in memory while Redis is down.
          { scope: 'key', key: 'big', limit: 1000000000, per: 'day', on_redis_down: 'open' },
        ],
      },
    };
    const gws = [await startGateway(config), await startGateway(config)];
    const outcomes = { tight: [], big: [] };
    const statuses = {};
    try {
      const tools = [
        {
          type: 'function',
          function: {
            name: 'lookup',
            description: 'Looks a customer record up by its id and returns every field. '.repeat(8),
            parameters: { type: 'object', properties: { id: { type: 'string' } } },
          },
        },
      ];
      let next = 0;
      const TOTAL = 240;
      const one = async () => {
        const i = next++;
        const name = r.next() < 0.6 ? 'tight' : 'big';
        const gw = gws[i % 2];
        const model = r.pick(['oa', 'an', 'ol']);
        const anthropicClient = r.next() < 0.35;
        const mode = r.pick(['valid', 'valid', 'missing', 'odd', 'cut']);
        const words = r.int(1, 30);
        const maxTokens = r.int(words, 40);
        const marker = `@@mode=${mode};words=${words};id=${i}@@`;
        const stream = r.next() < 0.5;
        const clientCut = stream && r.next() < 0.25 ? r.int(1, 6) : 0;
        let body;
        let path;
        if (anthropicClient) {
          path = '/v1/messages';
          body = { model, max_tokens: maxTokens, messages: [{ role: 'user', content: `Tell me. ${marker}` }], stream };
          if (r.next() < 0.3) body.tools = [{ name: 'lookup', description: tools[0].function.description, input_schema: tools[0].function.parameters }];
        } else {
          path = '/v1/chat/completions';
          const content =
            r.next() < 0.2
              ? [
                  { type: 'text', text: `Tell me. ${marker}` },
                  { type: 'image_url', image_url: { url: 'https://example.com/cat.png' } },
                ]
              : `Tell me. ${marker}`;
          body = { model, messages: [{ role: 'user', content }], stream };
          if (r.next() < 0.8) body.max_tokens = maxTokens; // else: the route's assumption (reserve_output_tokens)
          if (model === 'oa' && r.next() < 0.3) body.n = r.int(2, 3);
          if (r.next() < 0.3) body.tools = tools;
        }
        const key = name === 'tight' ? TIGHT : BIG;
        const headers = anthropicClient ? { 'anthropic-version': '2023-06-01' } : {};
        let res;
        let complete = false;
        if (stream) {
          res = await sse(`${gw.url}${path}`, body, {
            key,
            headers,
            stopAfter: clientCut ? (events) => events.length >= clientCut : undefined,
          });
          complete = res.status === 200 && !res.aborted && mode !== 'cut' && !res.error;
        } else {
          res = await request(`${gw.url}${path}`, { method: 'POST', key, headers, body });
          complete = res.status === 200;
        }
        statuses[res.status] = (statuses[res.status] ?? 0) + 1;
        if (process.env.SLUICE_PROPERTY_DEBUG && res.status === 400) console.log('400', model, anthropicClient, (res.text ?? res.raw).slice(0, 200));
        const rid = res.headers.get('x-request-id');
        outcomes[name].push({ i, gw, rid, mode, complete, status: res.status });
      };
      const workers = Array.from({ length: 8 }, async () => {
        while (next < TOTAL) await one();
      });
      // Redis paused twice under the load: at the 60th and the 140th request, each time
      // for 400 ms or 30 requests, whichever ends first. (Paced by the requests rather than
      // the clock: on a slow machine, fixed times put so much of the mix into the pauses,
      // refused 503 by the closed quota, that the quota was never reached.)
      const reach = async (n, ms = Infinity) => {
        const until = Date.now() + ms;
        while (next < n && Date.now() < until) await delay(5);
      };
      const pauses = (async () => {
        for (const at of [60, 140]) {
          await reach(at);
          process.kill(redis.proc.pid, 'SIGSTOP');
          await reach(at + 30, 400);
          process.kill(redis.proc.pid, 'SIGCONT');
        }
      })();
      await Promise.all([...workers, pauses]);
      // Then the tight key is driven to its quota with Redis up, whatever the mix left:
      // on a loaded machine (the sanitizer build, two cores) Redis calls time out beyond
      // the pauses too, the closed quota refuses those 503, and the mix alone may never
      // reach the limit. Answers of 1,000 tokens reach it in a few requests; each is
      // recorded like the mix's, so the invariants below cover them.
      for (let k = 0; k < 40 && !(statuses[429] > 0); k++) {
        const i = next++;
        const gw = gws[i % 2];
        const body = { model: 'oa', max_tokens: 1000, messages: [{ role: 'user', content: `Fill. @@mode=valid;words=1000;id=${i}@@` }] };
        const res = await request(`${gw.url}/v1/chat/completions`, { method: 'POST', key: TIGHT, body });
        statuses[res.status] = (statuses[res.status] ?? 0) + 1;
        outcomes.tight.push({ i, gw, rid: res.headers.get('x-request-id'), mode: 'valid', complete: res.status === 200, status: res.status });
        if (res.status === 503) await delay(100);
      }

      // What each request was charged, from the access log of the gateway that served it.
      const charged = { tight: 0, big: 0 };
      for (const name of ['tight', 'big']) {
        for (const o of outcomes[name]) {
          const line = await o.gw.logFor(o.rid);
          const c = (line.prompt_tokens ?? 0) + (line.completion_tokens ?? 0);
          charged[name] += c;
          if (process.env.SLUICE_PROPERTY_DEBUG && name === 'tight') o.line = line;
          // Every charge is within its reservation (so a quota cannot be overrun).
          if (c > 0) {
            assert.ok(c <= line.reserved_tokens, why(`request ${o.i}: charged ${c} > reserved ${line.reserved_tokens}: ${JSON.stringify(line)}`));
          }
          if (o.mode === 'valid' && o.complete) {
            assert.equal(c, up.reported.get(o.i), why(`request ${o.i} (${o.rid}): valid usage charged exactly`));
          }
        }
      }
      // The mix did what it is for: the tight quota was reached, Redis was missed, and
      // the charges were not all zero.
      assert.ok(statuses[429] > 0, why(`some requests refused by the tight quota: ${JSON.stringify(statuses)}`));
      assert.ok(charged.tight > 0 && charged.big > 0, why(JSON.stringify(charged)));
      const errors = (await Promise.all(gws.map((g) => g.infra()))).reduce((s, j) => s + j.rate_limiter.counts.redis_errors, 0);
      assert.ok(errors > 0, why('Redis calls failed during the pauses'));

      for (const name of ['tight', 'big']) {
        const want = { requests: 0, used: charged[name], reserved: 0, holds: 0 };
        let seen;
        if (process.env.SLUICE_PROPERTY_DEBUG) {
          for (const o of outcomes[name]) {
            const l = o.line ?? (await o.gw.logFor(o.rid));
            if ((l.prompt_tokens || l.completion_tokens) && (o.status !== 200 || o.mode === 'cut'))
              console.log(name, o.i, o.status, o.mode, l.model, l.stream, l.reserved_tokens, l.prompt_tokens, l.completion_tokens, l.reason);
          }
          console.log(JSON.stringify((await Promise.all(gws.map((g) => g.infra()))).map((j) => j.rate_limiter.counts)));
        }
        await waitFor(
          async () => {
            seen = await redisLedger(redis, name);
            return JSON.stringify(seen) === JSON.stringify(want);
          },
          { timeout: 15000, what: `the ledger of ${name} to settle` },
        ).catch(() => {});
        assert.deepEqual(seen, want, why(`${name}: Redis holds what the logs charged, nothing reserved`));
      }
      if (process.env.SLUICE_PROPERTY_DEBUG) {
        console.log(JSON.stringify({ statuses, charged }));
        if (charged.tight > LIMIT) {
          for (const o of outcomes.tight) {
            const l = o.line;
            console.log(o.i, o.status, o.mode, l.model, l.stream, l.reserved_tokens, l.prompt_tokens, l.completion_tokens, l.reason, l.ts ?? l.time);
          }
        }
      }
      assert.ok(charged.tight <= LIMIT, why(`the closed quota holds: ${charged.tight} charged of ${LIMIT}`));
    } finally {
      await Promise.all(gws.map((g) => g.stop()));
    }
  });
});
