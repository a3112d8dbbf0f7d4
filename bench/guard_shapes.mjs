#!/usr/bin/env node
// What the guardrails' screen costs on large hostile messages (docs/guardrails.md, "Cost"):
// one request per shape, about 1 MB of text each, through a gateway whose route has a
// policy with every detector on (the screen, and e-mail, phone, card and IBAN redaction),
// the simulator answering at once. Prints each shape's client time in ms (the screen
// dominates it; the same request without a policy is printed first for reference).
//
// Usage: node bench/guard_shapes.mjs
import { request, startGateway, startSim } from '../tests/integration/lib.mjs';

const KEY = 'sk-bench-0123456789abcdef';
const sim = await startSim({ ttft: '0ms', 'inter-token': '0ms' });
const gw = await startGateway({
  keys: [{ name: 'b', key: KEY, tenant: 't', models: ['*'] }],
  access_log: '',
  limits: { max_body_bytes: 4000000 },
  guardrails: [{ name: 'g', email: 'redact', phone: 'redact', card: 'redact', iban: 'redact', base64: 'flag', system_size: 'flag' }],
  models: [
    { alias: 'plain', provider: 'openai', base_url: `${sim.url}/v1` },
    { alias: 'guarded', provider: 'openai', base_url: `${sim.url}/v1`, guardrails: 'g' },
  ],
});
const shapes = {
  words: 'hello world '.repeat(80000),
  'spaced digits': '1 2 3 4 5 6 7 8 9 0 '.repeat(50000),
  'dashed digits': '1-2-3-4-5-6-7-8-9-0-'.repeat(50000),
  'a@ repeated': 'a@'.repeat(500000),
  'a. repeated': 'a.'.repeat(500000),
  'AB12 repeated': 'AB12 '.repeat(200000),
  '"ignore the" repeated': 'ignore the '.repeat(90000),
  '(1) repeated': '(1)'.repeat(300000),
  '140,000 e-mail addresses': 'a@b.co '.repeat(140000),
  '45,000 phone numbers': 'call 415 555 2671 now '.repeat(45000),
  '35,000 IBANs': 'GB82 WEST 1234 5698 7654 32 '.repeat(35000),
};
const time = async (model, text) => {
  const t0 = performance.now();
  const r = await request(`${gw.url}/v1/chat/completions`, { method: 'POST', key: KEY, timeout: 120000, body: { model, max_tokens: 1, messages: [{ role: 'user', content: text }] } });
  if (r.status !== 200) throw new Error(`HTTP ${r.status}: ${r.text.slice(0, 200)}`);
  return Math.round(performance.now() - t0);
};
console.log('| shape | bytes | no policy ms | screened ms |');
console.log('|---|---|---|---|');
for (const [name, text] of Object.entries(shapes)) {
  await time('guarded', text.slice(0, 1000)); // warm
  console.log(`| ${name} | ${text.length} | ${await time('plain', text)} | ${await time('guarded', text)} |`);
}
await gw.stop();
await sim.stop();
