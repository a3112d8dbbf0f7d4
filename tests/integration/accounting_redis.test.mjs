// Accounting through Redis outages: a Redis command that times out may still run when
// Redis resumes. An admission the gateway gave up is voided (its count and its
// reservation are given back, or it does nothing if it runs later); a settlement batch
// whose answer was lost is sent again and charged once; the usage of requests counted in
// memory meanwhile reaches Redis once it is back. Redis is paused with SIGSTOP (by pid).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { delay, KEY, redisLedger, request, startGateway, startRecorder, startRedis, waitFor } from './lib.mjs';

function post(gw, body, key = KEY) {
  return request(`${gw.url}/v1/chat/completions`, { method: 'POST', key, body });
}

const BODY = { model: 'gpt', messages: [{ role: 'user', content: 'hi' }], max_tokens: 20 };

describe('Redis paused under load', () => {
  let redis;
  let up;
  before(async () => {
    redis = await startRedis();
    up = await startRecorder(); // usage: 3 prompt + 1 completion tokens per answer
  });
  after(async () => {
    await up?.close();
    await redis?.stop();
  });

  async function drill(policy, name) {
    const gw = await startGateway({
      keys: [{ name, key: KEY, tenant: 'acme', tier: 'gold', models: ['*'] }],
      models: [{ alias: 'gpt', provider: 'openai', base_url: `${up.url}/v1`, model: 'gpt-4' }],
      redis: { url: redis.url, timeout: '100ms', connect_timeout: '100ms', retry_interval: '200ms' },
      rate_limits: {
        backend: 'auto',
        on_redis_down: policy,
        // No leases: every request is one admission call and one reservation in Redis.
        requests: [{ scope: 'key', key: name, limit: 1000000, window: '1h', algorithm: 'fixed_window', lease: 0 }],
        tokens: [{ scope: 'key', key: name, limit: 1000000000, per: 'day', lease: 0 }],
      },
    });
    const answered = { ok: 0, refused: 0, charged: 0 };
    try {
      let stop = false;
      const workers = Array.from({ length: 8 }, async () => {
        while (!stop) {
          const r = await post(gw, BODY);
          if (r.status === 200) {
            answered.ok++;
            answered.charged += r.json.usage.prompt_tokens + r.json.usage.completion_tokens;
          } else {
            assert.equal(r.status, 503, r.text);
            answered.refused++;
          }
        }
      });
      await delay(300);
      process.kill(redis.proc.pid, 'SIGSTOP');
      await delay(700);
      process.kill(redis.proc.pid, 'SIGCONT');
      await delay(800);
      stop = true;
      await Promise.all(workers);
      const infra = await gw.infra();
      const counts = infra.rate_limiter.counts;
      assert.ok(counts.redis_errors > 0, `Redis calls timed out during the pause: ${JSON.stringify(counts)}`);
      // Admitted by Redis: counted there; the others were counted in memory (open) or
      // refused (closed), and Redis must not keep a count of them.
      const byRedis = counts.counted_redis;
      assert.ok(byRedis > 0 && byRedis < answered.ok + answered.refused, JSON.stringify({ counts, answered }));
      if (policy === 'closed') assert.ok(answered.refused > 0, 'requests were refused while Redis was paused');
      else assert.equal(answered.refused, 0);
      // Once everything is settled: one count per request Redis admitted, no reservation
      // left, and every token the upstream charged in `used` (memory-counted ones too).
      const want = { requests: byRedis, used: answered.charged, reserved: 0, holds: 0 };
      let seen;
      await waitFor(
        async () => {
          seen = await redisLedger(redis, name);
          return JSON.stringify(seen) === JSON.stringify(want);
        },
        { timeout: 8000, what: 'the ledger to settle' },
      ).catch(() => {});
      assert.deepEqual(seen, want);
      // And the key can still spend: nothing phantom stands in its way.
      const r = await post(gw, BODY);
      assert.equal(r.status, 200, r.text);
    } finally {
      await gw.stop();
    }
  }

  test('open: requests counted in memory meanwhile leave no count or reservation in Redis; their usage reaches it', () =>
    drill('open', 'open'));

  test('closed: requests refused meanwhile are not counted when Redis resumes', () => drill('closed', 'closed'));

  test('a settlement batch lost with Redis is sent again to the Redis that comes back, and charged once', async () => {
    // Answers after 400 ms, charging 3 + 1 tokens.
    const slow = await startRecorder((req, res, json) => {
      setTimeout(() => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({
            id: 'chatcmpl-slow',
            object: 'chat.completion',
            created: 1,
            model: json.model,
            choices: [{ index: 0, message: { role: 'assistant', content: 'hello' }, finish_reason: 'stop' }],
            usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 },
          }),
        );
      }, 400);
      return true;
    });
    const gw = await startGateway({
      keys: [{ name: 'lost', key: KEY, tenant: 'acme', tier: 'gold', models: ['*'] }],
      models: [{ alias: 'gpt', provider: 'openai', base_url: `${slow.url}/v1`, model: 'gpt-4' }],
      redis: { url: redis.url, timeout: '150ms', connect_timeout: '150ms', retry_interval: '200ms' },
      rate_limits: { backend: 'redis', tokens: [{ scope: 'key', key: 'lost', limit: 1000000000, per: 'day', lease: 0 }] },
    });
    try {
      // Admitted by Redis, then Redis stops while the answers are on their way: their
      // settlement batch is sent to a paused Redis, then Redis dies with it unread.
      const inflight = Array.from({ length: 5 }, () => post(gw, BODY));
      await delay(150);
      process.kill(redis.proc.pid, 'SIGSTOP');
      const answers = await Promise.all(inflight);
      let charged = 0;
      for (const r of answers) {
        assert.equal(r.status, 200, r.text);
        charged += r.json.usage.prompt_tokens + r.json.usage.completion_tokens;
      }
      await delay(400); // the batch's timeout
      process.kill(redis.proc.pid, 'SIGKILL');
      await redis.proc.exited;
      redis.proc = null;
      await redis.start();
      let seen;
      await waitFor(
        async () => {
          seen = await redisLedger(redis, 'lost');
          return seen.used === charged;
        },
        { timeout: 8000, what: 'the usage to reach the new Redis' },
      ).catch(() => {});
      assert.equal(seen?.used, charged, JSON.stringify(seen));
      // Paused and resumed this time: the first send runs when Redis resumes, the second
      // finds its record: charged once.
      const again = Array.from({ length: 5 }, () => post(gw, BODY));
      await delay(150);
      process.kill(redis.proc.pid, 'SIGSTOP');
      for (const r of await Promise.all(again)) {
        assert.equal(r.status, 200, r.text);
        charged += r.json.usage.prompt_tokens + r.json.usage.completion_tokens;
      }
      await delay(400);
      process.kill(redis.proc.pid, 'SIGCONT');
      await waitFor(async () => (await gw.infra()).rate_limiter.redis.up, { timeout: 5000, what: 'Redis up again' });
      await delay(1000); // every resend answered
      assert.deepEqual(await redisLedger(redis, 'lost'), { requests: 0, used: charged, reserved: 0, holds: 0 });
    } finally {
      await gw.stop();
      await slow.close();
    }
  });
});
