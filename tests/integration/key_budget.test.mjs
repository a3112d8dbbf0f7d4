// A stored key's own token budget (docs/admin.md, "budget"): set through /admin/keys, counted
// like a token quota of scope key (here in memory), refusing the request that would pass
// it with 429 token_limit_exceeded or quota_exceeded, changed or removed at runtime.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { USER, chat, request, startGateway } from './lib.mjs';

const ADMIN = 'sk-admin-0000000000000000';

describe('a stored key with a budget of its own', () => {
  let gw;
  before(async () => {
    gw = await startGateway({
      keys: [{ name: 'admin', key: ADMIN, tenant: 'ops', admin: true }],
      key_store: { enabled: true, secret: 'budget-test-secret-0123456789', poll: '200ms' },
      models: [{ alias: 'demo', provider: 'simulated', sim: { ttft: '1ms', inter_token: '1ms', jitter: 0 } }],
      history: { flush_interval: '100ms' },
    });
  });
  after(async () => {
    await gw?.stop();
  });

  const admin = (method, p, body) => request(`${gw.url}/admin/keys${p}`, { method, key: ADMIN, body });
  const ask = (key, max_tokens = 20) => chat(gw, { model: 'demo', messages: USER, max_tokens }, { key });

  test('refused once its tokens are spent; raised, then removed, at runtime', async () => {
    const made = await admin('POST', '', { name: 'metered', tenant: 'acme', budget: { tokens: 100, per: 'day' } });
    assert.equal(made.status, 201, made.text);
    assert.deepEqual(made.json.budget, { tokens: 100, per: 'day' });
    const secret = made.json.secret;
    // Each request reserves its prompt plus 20 output tokens, and is charged what it used.
    let spent = 0;
    let refused;
    for (let i = 0; i < 20 && !refused; i++) {
      const r = await ask(secret);
      if (r.status === 200) spent += r.json.usage.total_tokens;
      else refused = r;
    }
    assert.ok(refused, `never refused (${spent} tokens spent)`);
    assert.equal(refused.status, 429, refused.text);
    assert.match(refused.json.error.message, /token limit key budget reached/);
    assert.ok(spent <= 100 && spent > 50, `${spent} tokens spent of 100`);
    // Another key is not metered by it.
    const other = await admin('POST', '', { name: 'free', tenant: 'acme' });
    assert.equal(other.json.budget, null);
    assert.equal((await ask(other.json.secret)).status, 200);

    // A change of another field keeps the budget.
    const kept = await admin('PATCH', '/metered', { tier: 'gold' });
    assert.equal(kept.status, 200, kept.text);
    assert.deepEqual(kept.json.budget, { tokens: 100, per: 'day' });
    assert.equal((await ask(secret)).status, 429, 'still spent');
    // Raised: the count goes on against the new budget.
    const raised = await admin('PATCH', '/metered', { budget: { tokens: 1000, per: 'day' } });
    assert.equal(raised.status, 200, raised.text);
    assert.equal((await ask(secret)).status, 200);
    // Removed: nothing meters it.
    const removed = await admin('PATCH', '/metered', { budget: null });
    assert.equal(removed.json.budget, null);
    assert.equal((await ask(secret, 5000)).status, 200);
    assert.deepEqual((await admin('GET', '/metered')).json.budget, null);
  });

  test('a bad budget is refused with 400 naming the field, and changes nothing', async () => {
    for (const budget of [{ tokens: 0, per: 'day' }, { tokens: 10, per: 'week' }, { tokens: 10 }, 5, { tokens: 10, per: 'day', extra: 1 }]) {
      const r = await admin('POST', '', { name: 'bad', budget });
      assert.equal(r.status, 400, JSON.stringify(budget));
      assert.equal(r.json.error.param, 'budget');
    }
    assert.equal((await admin('GET', '/bad')).status, 404);
  });
});
