#!/usr/bin/env node
// Turns the raw results of bench/api.sh (JSON lines) into the Markdown report.
// Usage: BENCH_META='{...}' node bench/report-api.mjs RAW.jsonl > report.md
// Per-target figures are medians over the rounds; ratios are medians of the per-round
// ratios (each round measures every target back to back): to the gateway's chat
// completions, and to nginx carrying the same upstream request (nginx-chat for chat and
// responses, which become a chat completion upstream; nginx with the same embeddings body).
import { median, fmt, int, table, readRows, rps, secs, wrkUse, metaLines, rounds as roundsOf } from './report.mjs';

const meta = JSON.parse(process.env.BENCH_META || '{}');
const rows = readRows(process.argv[2]);
const CLK = meta.clk_tck || 100;
const GATEWAYS = ['chat', 'responses', 'responses-store', 'embeddings-float', 'embeddings-base64'];
const NGINX = ['nginx-chat', 'nginx-embeddings-float', 'nginx-embeddings-base64'];
const TARGETS = [...GATEWAYS, ...NGINX];
const REF = {
  chat: 'nginx-chat', responses: 'nginx-chat', 'responses-store': 'nginx-chat',
  'embeddings-float': 'nginx-embeddings-float', 'embeddings-base64': 'nginx-embeddings-base64',
};
const NAMES = {
  chat: 'chat completions', responses: 'responses, store false', 'responses-store': 'responses, store true (default)',
  'embeddings-float': 'embeddings, float', 'embeddings-base64': 'embeddings, base64',
  'nginx-chat': 'nginx: chat completions', 'nginx-embeddings-float': 'nginx: embeddings, float',
  'nginx-embeddings-base64': 'nginx: embeddings, base64',
};
const { ns, ids, perTarget, ratio } = roundsOf(rows, TARGETS);
const cpu = (r) => (r.proxy_ticks * 1e6) / CLK / r.requests;       // the proxy's CPU µs per request
const simCpu = (r) => (r.sim_ticks * 1e6) / CLK / r.requests;      // the simulator's
const rest = (r) => (r.busy_ticks - r.proxy_ticks - r.sim_ticks) / CLK / secs(r) - wrkUse(r);  // cores

const out = [...metaLines('sluice: responses and embeddings against chat completions', meta), ''];
out.push(`Binary: \`${meta.binary}\`${meta.git ? ` (commit ${meta.git})` : ''}.`, '');
if (!ns.length) {
  out.push('No measurements.');
  process.stdout.write(out.join('\n') + '\n');
  process.exit(0);
}

const checks = Object.fromEntries(rows.filter((r) => r.phase === 'check').map((r) => [r.target, r]));
const wrkRuns = rows.filter((r) => r.phase === 'wrk');
const non2xx = (t) => wrkRuns.filter((r) => r.target === t).reduce((s, r) => s + r.non2xx, 0);
const otherErr = (t) => wrkRuns.filter((r) => r.target === t).reduce((s, r) => s + r.errors - r.non2xx, 0);
const R = perTarget(rps);
const C = perTarget(cpu);
const S = perTarget(simCpu);
const p50 = perTarget((r) => r.p50_us / 1000);
const p99 = perTarget((r) => r.p99_us / 1000);
const l50 = perTarget((r) => r.light_p50_us / 1000);
const restC = perTarget(rest);

out.push(`## Non-streaming: wrk -t${meta.wrk_threads} -c${meta.wrk_conns} -d${meta.wrk_duration}s per target and round, median of ${ids.length} rounds`, '');
out.push('Simulator with zero delays; every answer carries 16 output tokens (or one embedding). ' +
  'Ratios: medians of the per-round ratios; "÷ nginx" is to nginx carrying the same upstream request ' +
  '(nginx-chat for chat and responses).', '');
out.push(table(['variant', 'requests/s', 'requests/s ÷ chat', 'gateway CPU µs/request', 'CPU ÷ chat',
  'requests/s ÷ nginx', 'CPU ÷ nginx', 'non-2xx (all wrk runs)'], [
  ...GATEWAYS.map((t) => [NAMES[t], int(R[t]), fmt(ratio(t, 'chat'), 3), fmt(C[t], 1), fmt(ratio(t, 'chat', cpu), 3),
    fmt(ratio(t, REF[t]), 3), fmt(ratio(t, REF[t], cpu), 3), String(non2xx(t))]),
  ...NGINX.map((t) => [NAMES[t], int(R[t]), '—', fmt(C[t], 1) + ' (nginx workers)', '—', '—', '—', String(non2xx(t))]),
]), '');

out.push('## Details (medians over the rounds)', '');
const rss = Object.fromEntries(rows.filter((r) => r.phase === 'rss').map((r) => [r.target, r.rss_kib]));
out.push(table(['variant', 'path', 'answer bytes', 'latency p50 / p99, ' + meta.wrk_conns + ' conns', 'p50, 1 conn',
  'simulator CPU µs/request', 'rest of the machine (cores)', 'other wrk errors', 'gateway RSS at the end'],
  TARGETS.map((t) => [NAMES[t], checks[t] ? `\`${checks[t].path}\`` : '—', checks[t] ? int(checks[t].bytes) : '—',
    `${fmt(p50[t], 3)} / ${fmt(p99[t], 3)} ms`, fmt(l50[t], 3, ' ms'), fmt(S[t], 1), fmt(restC[t], 2),
    String(otherErr(t)), rss[t] ? `${fmt(rss[t] / 1024, 1)} MiB` : '—'])), '');

out.push('Request bodies:', '');
for (const t of TARGETS.filter((x) => checks[x] && !x.startsWith('nginx-'))) {
  out.push(`- ${NAMES[t]}: \`POST ${checks[t].path}\` \`${JSON.stringify(checks[t].body)}\``);
}
out.push('');

out.push('## Per round', '');
out.push(table(['round', 'target', 'requests/s', 'proxy CPU µs/req', 'sim CPU µs/req', 'p50 ms', 'p99 ms', 'rest (cores)', 'errors'],
  ns.map((r) => [String(r.round), r.target, int(rps(r)), fmt(cpu(r), 1), fmt(simCpu(r), 1), fmt(r.p50_us / 1000, 3),
    fmt(r.p99_us / 1000, 3), fmt(rest(r), 2), String(r.errors)])), '');
const per = (t, fn) => ids.map((rd) => {
  const x = ns.find((r) => r.round === rd && r.target === t);
  const y = ns.find((r) => r.round === rd && r.target === 'chat');
  return x && y ? fn(x) / fn(y) : null;
});
out.push('Per-round ratios to chat (requests/s; CPU per request): ' + GATEWAYS.filter((t) => t !== 'chat').map((t) =>
  `${t} ${per(t, rps).map((v) => fmt(v, 3)).join(', ')}; ${per(t, cpu).map((v) => fmt(v, 3)).join(', ')}`).join(' · ') + '.', '');

const logs = rows.filter((r) => r.phase === 'access_log');
if (logs.length) {
  out.push('Access logs (all requests, warm-ups and checks included; the check reads a stored response back from ' +
    'each responses gateway, which the store-false one answers 404): ' + logs.map((l) =>
    `${l.target} ${int(l.lines)} lines, ${int(l.non200)} not 200 ${JSON.stringify(l.statuses)}`).join('; ') + '.', '');
}
process.stdout.write(out.join('\n') + '\n');
