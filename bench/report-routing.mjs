#!/usr/bin/env node
// Turns the raw results of bench/routing.sh (JSON lines) into the Markdown report.
// Usage: BENCH_META='{...}' node bench/report-routing.mjs RAW.jsonl > report.md
// Per-target figures are medians over the rounds; ratios and "added" figures are medians
// of the per-round ratios/differences (each round measures all targets back to back).
import {
  median, fmt, signed, int, table, readRows, rps, secs, wrkUse, metaLines, rounds as roundsOf,
  latencyRows,
} from './report.mjs';

const meta = JSON.parse(process.env.BENCH_META || '{}');
const rows = readRows(process.argv[2]);
const CLK = meta.clk_tck || 100;
const TARGETS = ['nginx', 'single', 'defaults', 'set', 'canary'];
const NAMES = {
  nginx: 'nginx',
  single: 'sluice, one backend, breakers and ejection off',
  defaults: 'sluice, one backend, routing defaults',
  set: 'sluice, 3 backends, least_connections',
  canary: 'sluice, 3 backends + 10 % canary',
};

const { ns, ids: rounds, perTarget, ratio, diff } = roundsOf(rows, TARGETS);
const us = (r, k) => ((r[k] ?? 0) * 1e6) / CLK / r.requests;   // CPU µs per request
const cores = (r, k) => (r[k] ?? 0) / CLK / secs(r);
const otherUse = (r) => (r.busy_ticks - r.proxy_ticks - r.sim_ticks) / CLK / secs(r) - wrkUse(r);
const ms = (k) => (r) => (r[k] === null ? null : r[k] / 1000);

const out = [...metaLines('sluice routing benchmark: what routing costs on the data path', meta), ''];
if (!ns.length) {
  out.push('No measurements.');
  process.stdout.write(out.join('\n'));
  process.exit(0);
}

out.push('Every variant runs in front of the same simulator; every route is `sluice-sim`, the model the ' +
  'requests name. `single` is the config of bench/run.sh (one backend, short form) with', '',
  '```yaml', meta.routing_off, '```', '',
  '`defaults` is the same backend with the routing defaults (backend and provider breakers on, passive ' +
  'ejection after 5 failures, no active probes). `set` is the first route below alone; `canary` is both routes ' +
  '(routing defaults; the simulator\'s URL shown as it was in this run):', '',
  '```yaml', 'models:', meta.canary_routes, '```', '');
out.push(`## Non-streaming: wrk -t${meta.wrk_threads} -c${meta.wrk_conns} -d${meta.wrk_duration}s, median of ${rounds.length} rounds`, '');
out.push('POST /v1/chat/completions, max_tokens 8, simulator with zero delays; sluice with auth and access log on. ' +
  `Then ${meta.light_duration}s with 1 connection per target and round (latency without queueing).`, '');
const row = (label, f) => [label, ...TARGETS.map(f)];
const R = perTarget(rps);
const p50 = perTarget(ms('p50_us'));
const p99 = perTarget(ms('p99_us'));
const l50 = perTarget(ms('light_p50_us'));
const l99 = perTarget(ms('light_p99_us'));
const gwUs = perTarget((r) => us(r, 'proxy_ticks'));
const errs = Object.fromEntries(TARGETS.map((t) => [t, ns.filter((r) => r.target === t).reduce((s, r) => s + r.errors, 0)]));
const medUse = (f) => (t) => fmt(median(ns.filter((r) => r.target === t).map(f)), 2);
out.push(table(['', ...TARGETS.map((t) => NAMES[t])], [
  row('requests/s', (t) => int(R[t])),
  ...latencyRows(row, meta.wrk_conns, p50, p99, l50, l99),
  row('proxy CPU per request', (t) => fmt(gwUs[t], 1, ' µs')),
  row('proxy CPU use (cores)', medUse((r) => cores(r, 'proxy_ticks'))),
  row('simulator CPU use (cores)', medUse((r) => cores(r, 'sim_ticks'))),
  row('wrk CPU use (cores)', medUse(wrkUse)),
  row('rest of the machine (cores)', medUse(otherUse)),
  row('errors (all rounds)', (t) => String(errs[t])),
]), '');

out.push('## Ratios (median of the per-round ratios)', '');
const cost = (x) => (x === null ? '—' : fmt((1 - x) * 100, 1, ' %'));
const ratioRow = (a, b, bold = false) => {
  const x = ratio(a, b);
  const cells = [`${a} / ${b}`, fmt(x, 3), b === 'nginx' ? '—' : cost(x),
    fmt(ratio(a, b, (r) => us(r, 'proxy_ticks')), 2)];
  return bold ? cells.map((c) => `**${c}**`) : cells;
};
out.push(table(['', 'requests/s ratio', 'throughput cost', 'CPU per request, ratio'], [
  ratioRow('defaults', 'single', true),
  ratioRow('set', 'single', true),
  ratioRow('canary', 'single', true),
  ratioRow('single', 'nginx'),
]), '');

out.push('## Added by routing (median of the per-round differences to `single`)', '');
const added = (t) => [
  signed(diff(t, 'single', ms('p50_us')), 3, ' ms'), signed(diff(t, 'single', ms('p99_us')), 3, ' ms'),
  signed(diff(t, 'single', ms('light_p50_us')), 3, ' ms'), signed(diff(t, 'single', ms('light_p99_us')), 3, ' ms'),
  signed(diff(t, 'single', (r) => us(r, 'proxy_ticks')), 1, ' µs')];
out.push(table(['', `p50, ${meta.wrk_conns} conn.`, `p99, ${meta.wrk_conns} conn.`, 'p50, 1 conn.', 'p99, 1 conn.',
  'sluice CPU / request'], ['defaults', 'set', 'canary'].map((t) => [NAMES[t], ...added(t)])), '');

const logs = rows.filter((r) => r.phase === 'access_log');
const cn = rows.find((r) => r.phase === 'canary');
out.push('Checks after the run (the access logs, warm-ups and 1-connection runs included):');
for (const l of logs) {
  const by = Object.entries(l.backends || {});
  out.push(`- ${NAMES[l.target]}: ${int(l.lines)} lines, by status: ` +
    `${Object.entries(l.statuses || {}).map(([k, v]) => `${k}: ${int(v)}`).join(', ') || 'none'}; by backend: ` +
    `${by.map(([k, v]) => `${k} ${int(v)} (${fmt((100 * v) / l.lines, 1, ' %')})`).join(', ') || 'none'}` +
    (l.target === 'canary' ? `; "served_by":"${cn?.alias}" ${int(l.served_by_canary)} ` +
      `(${fmt((100 * l.served_by_canary) / l.lines, 1, ' %')})` : ''));
}
if (cn) {
  out.push(`- canary (its /metrics at the end): weight ${cn.weight} %, active ${cn.active_at_end === 1 ? 'yes' : 'no'}, ` +
    `${cn.rollbacks ?? '—'} rollbacks; set chosen first: canary ${int(cn.canary_first)}, stable ${int(cn.stable_first)} ` +
    `(${cn.canary_first !== null && cn.stable_first !== null
      ? fmt((100 * cn.canary_first) / (cn.canary_first + cn.stable_first), 1, ' %') : '—'} canary)`);
}
out.push('', 'wrk closes its connections with requests in flight when a run ends; sluice logs those as 499.', '');

out.push('## Per round', '');
out.push(table(['round', 'target', 'requests/s', 'p50 ms', 'p99 ms', '1-conn p50 ms', '1-conn p99 ms', 'proxy CPU µs/req',
  'proxy cores', 'sim cores', 'wrk cores', 'rest cores', 'errors'],
ns.map((r) => [r.round, r.target, int(rps(r)), fmt(r.p50_us / 1000, 3), fmt(r.p99_us / 1000, 3),
  r.light_p50_us === null ? '—' : fmt(r.light_p50_us / 1000, 3),
  r.light_p99_us === null ? '—' : fmt(r.light_p99_us / 1000, 3),
  fmt(us(r, 'proxy_ticks'), 1), fmt(cores(r, 'proxy_ticks'), 2), fmt(cores(r, 'sim_ticks'), 2),
  fmt(wrkUse(r), 2), fmt(otherUse(r), 2), r.errors])));
out.push('');
process.stdout.write(out.join('\n'));
