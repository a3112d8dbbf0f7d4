// The web console (docs/console.md) in a real headless Chromium (Debian's chromium, driven
// by playwright-core): every page loads without a console error and shows the gateway's
// live state; a key is created, used, disabled, rotated and deleted through the UI, and the
// gateway honours each step; a backend is drained and a canary set by clicking; a live
// stream is cancelled from its row; a viewer sees no button that changes anything and is
// sent back to the sign-in when its key is revoked; the admin listener's console asks no
// key. Screenshots of every page go to build/test-artifacts/console/ (SLUICE_ARTIFACTS).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { KEY, REPO, USER, rawRequest, request, startGateway, startSim, waitFor } from './lib.mjs';

const CHROMIUM = process.env.SLUICE_CHROMIUM || '/usr/bin/chromium';
const ARTIFACTS = process.env.SLUICE_ARTIFACTS || path.join(REPO, 'build', 'test-artifacts', 'console');
const ADMIN = 'sk-admin-0000000000000000';
const admin = { authorization: `Bearer ${ADMIN}` };

let chromium;
try {
  ({ chromium } = await import('playwright-core'));
} catch {
  chromium = null;
}
const skip = !chromium || !fs.existsSync(CHROMIUM) ? 'needs playwright-core and Debian chromium (scripts/setup.sh --test)' : false;

const config = (sim, extra = {}) => ({
  keys: [
    { name: 'admin', key: ADMIN, tenant: 'ops', admin: true },
    { name: 'app', key: KEY, tenant: 'acme' },
  ],
  key_store: { enabled: true, secret: 'console-test-secret-0123456789', poll: '200ms' },
  models: [
    {
      alias: 'm',
      backends: [
        { provider: 'openai', base_url: `${sim.url}/v1`, name: 'a' },
        { provider: 'openai', base_url: `${sim.url}/v1`, name: 'b' },
      ],
      canary: { alias: 'm2', weight: 10 },
    },
    { alias: 'm2', backends: [{ provider: 'openai', base_url: `${sim.url}/v1`, name: 'c' }] },
  ],
  history: { flush_interval: '100ms' },
  ...extra,
});

const chat = (gw, key, body = {}) =>
  request(`${gw.url}/v1/chat/completions`, { method: 'POST', key, body: { model: 'm', messages: USER, max_tokens: 5, ...body } });

// A page that records every console error and uncaught exception it sees.
async function open(browser, url) {
  const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  const page = await context.newPage();
  page.errors = [];
  page.on('console', (m) => {
    if (m.type() === 'error') page.errors.push(m.text());
  });
  page.on('pageerror', (e) => page.errors.push(`uncaught: ${e.message}`));
  await page.goto(url);
  return page;
}

async function shot(page, name) {
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  await page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`), fullPage: true });
}

async function signIn(page, key) {
  await page.locator('#key').fill(key);
  await page.locator('#signin button[type=submit]').click();
  await page.locator('#nav').waitFor({ state: 'visible' });
}

// The row of a table whose first cell is `first`.
const row = (page, box, first) => page.locator(`${box} tbody tr`).filter({ has: page.locator(`td:first-child:text-is("${first}")`) });

describe('web console', { skip }, () => {
  let sim;
  let gw;
  let browser;
  before(async () => {
    sim = await startSim({ ttft: '20ms', 'inter-token': '20ms' });
    gw = await startGateway(config(sim));
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox', '--disable-dev-shm-usage'] }); // (root, and a small /dev/shm in containers)
  });
  after(async () => {
    await browser?.close();
    await gw?.stop();
    await sim?.stop();
  });

  test('the files: security headers, ETag, redirects, methods, and off by configuration', async () => {
    const r = await rawRequest({ port: gw.port, path: '/console/' });
    assert.equal(r.status, 200);
    assert.match(r.headers['content-type'], /^text\/html/);
    assert.match(r.headers['content-security-policy'], /script-src 'self'/);
    assert.match(r.headers['content-security-policy'], /frame-ancestors 'none'/);
    assert.equal(r.headers['x-content-type-options'], 'nosniff');
    assert.match(r.body, /<script type="module" src="app.js">/);
    const again = await rawRequest({ port: gw.port, path: '/console/', headers: { 'if-none-match': r.headers.etag } });
    assert.equal(again.status, 304);
    assert.equal(again.body, '');
    assert.equal(again.headers['content-length'], undefined, "a 304 does not say the 200's length as 0");
    const js = await rawRequest({ port: gw.port, path: '/console/app.js' });
    assert.match(js.headers['content-type'], /^text\/javascript/);
    assert.notEqual(js.headers.etag, r.headers.etag);
    const moved = await rawRequest({ port: gw.port, path: '/console' });
    assert.equal(moved.status, 308);
    assert.equal(moved.headers.location, '/console/');
    assert.equal((await rawRequest({ port: gw.port, path: '/console/../keys' })).status, 404);
    assert.equal((await rawRequest({ port: gw.port, path: '/console/nope.js' })).status, 404);
    const post = await rawRequest({ port: gw.port, method: 'POST', path: '/console/', body: '' });
    assert.equal(post.status, 405);
    assert.equal(JSON.parse((await rawRequest({ port: gw.port, path: '/console/env.json' })).body).listener, 'main');
    assert.equal(JSON.parse((await rawRequest({ port: gw.adminPort, path: '/console/env.json' })).body).listener, 'admin');
    // The admin listener asks no key: a browser reaches it only from its own pages, at an
    // address. Another site's page (CSRF), or a name pointed here (DNS rebinding), is refused;
    // clients that are not browsers send none of these headers.
    const onAdmin = (headers, method = 'POST') =>
      rawRequest({ port: gw.adminPort, method, path: '/admin/backends/a/drain', headers, body: method === 'POST' ? '' : undefined });
    const self = `127.0.0.1:${gw.adminPort}`;
    assert.equal((await onAdmin({ origin: 'https://evil.example' })).status, 403);
    assert.equal((await onAdmin({ 'sec-fetch-site': 'cross-site', 'sec-fetch-mode': 'no-cors' })).status, 403);
    assert.equal((await onAdmin({ host: `evil.example:${gw.adminPort}`, origin: `http://evil.example:${gw.adminPort}`, 'sec-fetch-site': 'same-origin' })).status, 403);
    assert.equal((await onAdmin({ host: `evil.example:${gw.adminPort}`, 'sec-fetch-mode': 'cors' }, 'GET')).status, 403);
    assert.equal((await rawRequest({ port: gw.adminPort, path: '/admin/keys', headers: { host: 'evil.example', 'sec-fetch-mode': 'cors' } })).status, 403);
    assert.equal((await rawRequest({ port: gw.adminPort, path: '/admin/backends', headers: { host: self, origin: `http://${self}`, 'sec-fetch-site': 'same-origin' } })).status, 200);
    assert.equal((await rawRequest({ port: gw.adminPort, path: '/admin/backends', headers: { host: `localhost:${gw.adminPort}`, 'sec-fetch-mode': 'cors' } })).status, 200);
    assert.equal((await rawRequest({ port: gw.adminPort, path: '/metrics', headers: { host: 'sluice-admin.monitoring.svc:9090' } })).status, 200, 'Prometheus by a service name');
    const backends = JSON.parse((await rawRequest({ port: gw.adminPort, path: '/admin/backends' })).body).backends;
    assert.equal(backends.find((b) => b.name === 'a').drained, false, 'no refused drain was made');
    // whoami: the console's first question.
    const who = JSON.parse((await rawRequest({ port: gw.port, path: '/admin/whoami', headers: admin })).body);
    assert.deepEqual(who, { name: 'admin', role: 'admin', instance: 'it-gw', key_store: true, history: true, audit: true });
    const off = await startGateway({ ...config(sim), admin: { console: false } });
    try {
      assert.equal((await rawRequest({ port: off.port, path: '/console/' })).status, 404);
    } finally {
      await off.stop();
    }
  });

  test('an admin signs in; every page shows the live state; a key is created, used, rotated and revoked through the UI', async () => {
    for (let i = 0; i < 3; i++) assert.equal((await chat(gw, KEY)).status, 200);
    assert.equal((await chat(gw, KEY, { stream: true })).status, 200);
    const page = await open(browser, `${gw.url}/console/`);

    // A wrong key is refused with the gateway's reason (its 401 is the only console error).
    await page.locator('#key').fill('sk-wrong-0000000000000000');
    await page.locator('#signin button[type=submit]').click();
    await page.locator('#signin-error').filter({ hasText: 'Not signed in' }).waitFor();
    assert.ok(page.errors.every((e) => /401/.test(e)), page.errors.join('\n'));
    page.errors.length = 0;
    await signIn(page, ADMIN);
    assert.equal(await page.locator('#who').textContent(), 'admin (admin) · it-gw');
    // The key lives in this tab's session storage only.
    assert.equal(await page.evaluate(() => sessionStorage.getItem('sluice.console.key')), ADMIN);
    assert.equal(await page.evaluate(() => localStorage.length), 0);
    assert.equal((await page.context().cookies()).length, 0);

    // Overview: this instance's counters.
    await page.locator('#ov-total .value').filter({ hasText: /^[4-9]|\d\d/ }).waitFor();
    await page.locator('#ov-ttft .value').filter({ hasText: /^p50 / }).waitFor();
    await page.locator('#ov-rps .value').filter({ hasText: /^\d/ }).waitFor();
    await shot(page, '1-overview');

    // Routes and backends: drain b by a click, then undrain; the canary set by hand.
    await page.locator('#nav-routes').click();
    await row(page, '#routes', 'm').filter({ hasText: 'm2: 10%' }).waitFor();
    await row(page, '#backends', 'b').filter({ hasText: 'up' }).waitFor();
    await row(page, '#backends', 'b').getByRole('button', { name: 'Drain', exact: true }).click();
    await row(page, '#backends', 'b').filter({ hasText: 'drained' }).waitFor();
    let backends = await request(`${gw.url}/admin/backends`, { headers: admin });
    assert.equal(backends.json.backends.find((b) => b.name === 'b').drained, true);
    await shot(page, '2-routes-drained');
    await row(page, '#backends', 'b').getByRole('button', { name: 'Undrain', exact: true }).click();
    await row(page, '#backends', 'b').getByRole('button', { name: 'Drain', exact: true }).waitFor();
    backends = await request(`${gw.url}/admin/backends`, { headers: admin });
    assert.equal(backends.json.backends.find((b) => b.name === 'b').drained, false);
    await row(page, '#routes', 'm').locator('input').fill('30');
    await row(page, '#routes', 'm').getByRole('button', { name: 'Set', exact: true }).click();
    await row(page, '#routes', 'm').filter({ hasText: 'm2: 30% (set by operator)' }).waitFor();
    let routes = await request(`${gw.url}/admin/routes`, { headers: admin });
    assert.equal(routes.json.routes.find((r) => r.model === 'm').canary.weight, 30);
    await row(page, '#routes', 'm').getByRole('button', { name: 'Reset', exact: true }).click();
    await row(page, '#routes', 'm').filter({ hasText: 'm2: 10%' }).waitFor();
    routes = await request(`${gw.url}/admin/routes`, { headers: admin });
    assert.equal(routes.json.routes.find((r) => r.model === 'm').canary.set_by_operator, false);

    // Keys: create one; its secret is shown once and works.
    await page.locator('#nav-keys').click();
    await row(page, '#keys', 'app').filter({ hasText: 'file' }).waitFor();
    const form = page.locator('#key-create');
    await form.locator('input[name=name]').fill('ui-key');
    await form.locator('input[name=tenant]').fill('ui-team');
    await form.locator('input[name=expires_in]').fill('30d');
    await form.locator('input[name=budget_tokens]').fill('1000000');
    await form.locator('select[name=budget_per]').selectOption('day');
    await form.getByRole('button', { name: 'Create', exact: true }).click();
    const secret = (await page.locator('#new-secret').textContent()).trim();
    assert.match(secret, /^sk-[a-z2-7]{52}$/);
    await shot(page, '3-keys-created');
    await page.locator('#secret-done').click();
    assert.equal(await page.locator('#new-secret').count(), 0, 'the secret is gone once dismissed');
    assert.equal((await page.locator('#keys').textContent()).includes(secret), false, 'the list shows it masked');
    for (let i = 0; i < 2; i++) assert.equal((await chat(gw, secret)).status, 200);
    await row(page, '#keys', 'ui-key').filter({ hasText: '1000000 tokens / day' }).waitFor();
    const stored = await request(`${gw.url}/admin/keys/ui-key`, { key: ADMIN });
    assert.deepEqual(stored.json.budget, { tokens: 1000000, per: 'day' });

    // Disabled: refused. Enabled: served again.
    await row(page, '#keys', 'ui-key').getByRole('button', { name: 'Disable', exact: true }).click();
    await row(page, '#keys', 'ui-key').filter({ hasText: 'disabled' }).waitFor();
    assert.equal((await chat(gw, secret)).status, 401);
    await row(page, '#keys', 'ui-key').getByRole('button', { name: 'Enable', exact: true }).click();
    await row(page, '#keys', 'ui-key').filter({ hasText: 'enabled' }).waitFor();
    assert.equal((await chat(gw, secret)).status, 200);

    // Rotated (asks once more): the new secret works, the old one during its grace.
    await row(page, '#keys', 'ui-key').getByRole('button', { name: 'Rotate', exact: true }).click();
    await row(page, '#keys', 'ui-key').getByRole('button', { name: 'Confirm rotate' }).click();
    const rotated = (await page.locator('#new-secret').textContent()).trim();
    assert.notEqual(rotated, secret);
    assert.equal((await chat(gw, rotated)).status, 200);
    assert.equal((await chat(gw, secret)).status, 200, 'the old secret within its grace');

    // Usage by key and the history, with the 5 requests just served once the history has
    // them (the one refused while disabled is an unknown key's: no key name).
    const rows = await waitFor(
      async () => {
        const r = (await request(`${gw.url}/history?key=ui-key`, { headers: admin })).json.data;
        return r.length === 5 && r;
      },
      { what: "ui-key's 5 requests in the history" },
    );
    const sum = (f) => String(rows.reduce((a, r) => a + r[f], 0));
    await page.locator('#nav-usage').click();
    await row(page, '#usage-table', 'ui-key').waitFor();
    assert.equal(await row(page, '#usage-table', 'ui-key').locator('td').nth(1).textContent(), '5');
    assert.equal(await row(page, '#usage-table', 'ui-key').locator('td').nth(3).textContent(), sum('prompt_tokens'));
    assert.equal(await row(page, '#usage-table', 'ui-key').locator('td').nth(4).textContent(), sum('completion_tokens'));
    assert.equal(sum('completion_tokens'), '25', 'max_tokens 5, five times');
    assert.ok((await page.locator('#usage-chart svg rect').count()) > 0, 'a bar for the window');
    await page.locator('#usage-group').selectOption('tenant');
    await row(page, '#usage-table', 'ui-team').waitFor();
    // By a load option (a tuning sweep's view): these requests set none.
    await page.locator('#usage-group').selectOption('num_ctx');
    await page.locator('#usage-table th', { hasText: 'num_ctx' }).waitFor();
    await row(page, '#usage-table', '(none)').waitFor();
    await page.locator('#usage-group').selectOption('tenant');
    await row(page, '#usage-table', 'ui-team').waitFor();
    await shot(page, '4-usage');
    await page.locator('#nav-history').click();
    await page.locator('#history-filters input[name=key]').fill('ui-key');
    await page.locator('#history-filters').getByRole('button', { name: 'Filter', exact: true }).click();
    // (The page's first, unfiltered reading may be shown until the filtered one arrives.)
    await waitFor(async () => (await page.locator('#history tbody tr').count()) === 5, { what: "the history filtered to ui-key's 5 rows" });
    assert.equal(await page.locator('#history tbody tr').filter({ hasText: 'ui-team' }).count(), 5);
    await shot(page, '5-history');

    // Deleted (asks once more): refused, old and new secret alike.
    await page.locator('#nav-keys').click();
    await row(page, '#keys', 'ui-key').getByRole('button', { name: 'Delete', exact: true }).click();
    await row(page, '#keys', 'ui-key').getByRole('button', { name: 'Confirm delete' }).click();
    await page.locator('#keys-msg').filter({ hasText: 'ui-key: delete done' }).waitFor();
    await row(page, '#keys', 'ui-key').waitFor({ state: 'detached' }); // (the list is read again after the message)
    assert.equal((await chat(gw, rotated)).status, 401);
    assert.equal((await chat(gw, secret)).status, 401);

    // Live: a long stream is listed and cancelled from its row.
    const stream = fetch(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', messages: USER, max_tokens: 3000, stream: true }),
    }).then((r) => r.text());
    await page.locator('#nav-live').click();
    const liveRow = page.locator('#live tbody tr').filter({ hasText: 'stream' });
    await liveRow.waitFor();
    await shot(page, '6-live');
    await liveRow.getByRole('button', { name: 'Cancel', exact: true }).click();
    const raw = await stream;
    assert.match(raw, /"code":"cancelled"/);
    await page.locator('#live .empty').waitFor();

    // Dependencies as /infra sees them.
    await page.locator('#nav-infra').click();
    await row(page, '#infra', 'Request history (database)').filter({ hasText: 'up' }).waitFor();
    await row(page, '#infra', 'Events (Kafka)').filter({ hasText: 'off' }).waitFor();
    await row(page, '#infra', 'Key store (database)').filter({ hasText: 'up' }).waitFor();
    await shot(page, '7-infra');

    // The audit trail names every change made here. What was asked is shown as text, never
    // markup: a drain asked with a body holding a script runs nothing.
    const markup = '<img src=x onerror=window.__xss=1>'; // (no quotes: the page shows it inside JSON)
    const drained = await request(`${gw.url}/admin/backends/c/drain`, { method: 'POST', headers: admin, body: { note: markup } });
    assert.equal(drained.status, 200);
    await request(`${gw.url}/admin/backends/c/undrain`, { method: 'POST', headers: admin });
    const drains = (await request(`${gw.url}/admin/audit?action=backend.drain&target=c`, { headers: admin })).json.audit;
    assert.equal(drains[0].detail.body.note, markup, 'the audit row keeps what was asked');
    await page.locator('#nav-audit').click();
    await page.locator('#audit').filter({ hasText: markup }).waitFor();
    assert.equal(await page.evaluate(() => window.__xss), undefined);
    assert.equal(await page.locator('#audit img').count(), 0);
    await page.locator('#audit tbody tr').first().waitFor();
    const audit = await page.locator('#audit').textContent();
    for (const action of ['key.create', 'key.disable', 'key.enable', 'key.rotate', 'key.delete', 'backend.drain', 'backend.undrain', 'route.canary', 'request.cancel']) {
      assert.ok(audit.includes(action), `${action} in the audit page`);
    }
    await shot(page, '8-audit');
    assert.deepEqual(page.errors, []);

    // Signing out forgets the key.
    await page.locator('#signout').click();
    await page.locator('#signin').waitFor();
    assert.equal(await page.evaluate(() => sessionStorage.getItem('sluice.console.key')), null);
    await page.context().close();
  });

  test('a viewer reads every page with no button that changes anything; revoked, it is signed out', async () => {
    const made = await request(`${gw.url}/admin/keys`, { method: 'POST', headers: admin, body: { name: 'ui-viewer', role: 'viewer' } });
    assert.equal(made.status, 201);
    const page = await open(browser, `${gw.url}/console/`);
    await signIn(page, made.json.secret);
    assert.equal(await page.locator('#who').textContent(), 'ui-viewer (viewer) · it-gw');
    for (const id of ['overview', 'routes', 'keys', 'usage', 'history', 'live', 'infra', 'audit']) {
      await page.locator(`#nav-${id}`).click();
      await page.locator(`#page-${id}`).waitFor();
      await page.waitForLoadState('networkidle');
    }
    await page.locator('#nav-routes').click();
    await row(page, '#backends', 'a').waitFor();
    assert.equal(await page.locator('#page-routes button').count(), 0);
    await page.locator('#nav-keys').click();
    await row(page, '#keys', 'app').waitFor();
    assert.equal(await page.locator('#key-create').count(), 0);
    assert.equal(await page.locator('#page-keys button').count(), 0);
    assert.deepEqual(page.errors, []);
    await shot(page, '9-viewer-keys');
    // Disabled by an admin: the next refresh (10 s on this page, 1 s on Live) signs it out.
    await page.locator('#nav-live').click();
    assert.equal((await request(`${gw.url}/admin/keys/ui-viewer/disable`, { method: 'POST', headers: admin })).status, 200);
    await page.locator('#signin-error').filter({ hasText: 'Signed out' }).waitFor();
    assert.equal(await page.evaluate(() => sessionStorage.getItem('sluice.console.key')), null);
    await page.context().close();
  });

  test('on the admin listener the console asks no key', async () => {
    const page = await open(browser, `${gw.adminUrl}/console/#history`);
    await page.locator('#nav').waitFor({ state: 'visible' });
    assert.equal(await page.locator('#who').textContent(), 'admin-listener (admin) · it-gw');
    assert.equal(await page.locator('#signout').isVisible(), false);
    await page.locator('#history tbody tr').first().waitFor(); // /history on the admin listener
    await page.locator('#nav-keys').click();
    await row(page, '#keys', 'admin').waitFor();
    await shot(page, '10-admin-listener');
    assert.deepEqual(page.errors, []);
    await page.context().close();
  });
});
