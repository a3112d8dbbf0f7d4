#!/usr/bin/env node
// Turns the raw results of bench/limits.sh (JSON lines) into the Markdown report.
// Usage: BENCH_META='{...}' node bench/report-limits.mjs RAW.jsonl > report.md
// Per-target figures are medians over the rounds; ratios and "added" figures are medians
// of the per-round ratios/differences (each round measures all targets back to back).
import {
  median, fmt, signed, int, table, readRows, rps, secs, wrkUse, metaLines, rounds as roundsOf,
  latencyRows,
} from './report.mjs';

const meta = JSON.parse(process.env.BENCH_META || '{}');
const rows = readRows(process.argv[2]);
const CLK = meta.clk_tck || 100;
const AIM = 0.10;   // the aim: the Redis limiter costs at most 10 % of the throughput
const TARGETS = ['nginx', 'off', 'redis', 'redis1', 'memory'];
const NAMES = { nginx: 'nginx', off: 'sluice, no limits', redis: 'sluice, Redis limiter', redis1: 'sluice, Redis, one limit', memory: 'sluice, memory limiter' };

const { ns, ids: rounds, perTarget, ratio, diff } = roundsOf(rows, TARGETS);
const ticks = (r, k) => r[k] ?? 0;
const us = (r, k) => (ticks(r, k) * 1e6 / CLK) / r.requests;   // CPU µs per request
const cores = (r, k) => ticks(r, k) / CLK / secs(r);
const otherUse = (r) => (r.busy_ticks - r.proxy_ticks - r.sim_ticks - ticks(r, 'redis_ticks')) / CLK / secs(r) - wrkUse(r);
const ms = (k) => (r) => (r[k] === null ? null : r[k] / 1000);
const gwRedisUs = (r) => us(r, 'proxy_ticks') + (r.target.startsWith('redis') ? us(r, 'redis_ticks') : 0);

const out = [...metaLines('sluice admission benchmark: Redis limiter on vs off', meta), ''];
if (!ns.length) {
  out.push('No measurements.');
  process.stdout.write(out.join('\n'));
  process.exit(0);
}

const R = perTarget(rps);
const thr = ratio('redis', 'off');
const cost = (x) => (x === null ? '—' : fmt((1 - x) * 100, 1, ' %'));
out.push(`Redis ${meta.redis}, started for the run (\`--save '' --appendonly no\`), one connection per sluice worker. ` +
  'Limits of the redis and memory variants (every request passes; the token quota makes every request settle):', '',
  '```yaml', 'rate_limits:', '  backend: redis   # memory', meta.limits, '```', '');
out.push(`## Non-streaming: wrk -t${meta.wrk_threads} -c${meta.wrk_conns} -d${meta.wrk_duration}s, median of ${rounds.length} rounds`, '');
out.push('POST /v1/chat/completions, max_tokens 8, simulator with zero delays; sluice with auth and access log on. ' +
  `Then ${meta.light_duration}s with 1 connection per target and round (latency without queueing).`, '');
const row = (label, f) => [label, ...TARGETS.map(f)];
const sluiceOnly = (f) => (t) => (t === 'nginx' ? '—' : f(t));
const redisOnly = (f) => (t) => (t.startsWith('redis') ? f(t) : '—');
const p50 = perTarget(ms('p50_us'));
const p99 = perTarget(ms('p99_us'));
const l50 = perTarget(ms('light_p50_us'));
const l99 = perTarget(ms('light_p99_us'));
const gwUs = perTarget((r) => us(r, 'proxy_ticks'));
const rdUs = perTarget((r) => us(r, 'redis_ticks'));
const bothUs = perTarget(gwRedisUs);
const errs = Object.fromEntries(TARGETS.map((t) => [t, ns.filter((r) => r.target === t).reduce((s, r) => s + r.errors, 0)]));
out.push(table(['', ...TARGETS.map((t) => NAMES[t])], [
  row('requests/s', (t) => int(R[t])),
  ...latencyRows(row, meta.wrk_conns, p50, p99, l50, l99),
  row('proxy CPU per request', (t) => fmt(gwUs[t], 1, ' µs')),
  row('redis-server CPU per request', redisOnly((t) => fmt(rdUs[t], 1, ' µs'))),
  row('sluice + redis-server CPU per request', sluiceOnly((t) => fmt(bothUs[t], 1, ' µs'))),
  row('proxy CPU use (cores)', (t) => fmt(median(ns.filter((r) => r.target === t).map((r) => cores(r, 'proxy_ticks'))), 2)),
  row('redis-server CPU use (cores)', (t) => fmt(median(ns.filter((r) => r.target === t).map((r) => cores(r, 'redis_ticks'))), 2)),
  row('simulator CPU use (cores)', (t) => fmt(median(ns.filter((r) => r.target === t).map((r) => cores(r, 'sim_ticks'))), 2)),
  row('wrk CPU use (cores)', (t) => fmt(median(ns.filter((r) => r.target === t).map(wrkUse)), 2)),
  row('rest of the machine (cores)', (t) => fmt(median(ns.filter((r) => r.target === t).map(otherUse)), 2)),
  row('errors (all rounds)', (t) => String(errs[t])),
]), '');

out.push('## Ratios (median of the per-round ratios)', '');
out.push(table(['', 'requests/s ratio', 'throughput cost'], [
  ['**sluice Redis limiter / sluice no limits**', `**${fmt(thr, 3)}**`, `**${cost(thr)}**`],
  ['sluice Redis, one limit / sluice no limits', fmt(ratio('redis1', 'off'), 3), cost(ratio('redis1', 'off'))],
  ['sluice memory limiter / sluice no limits', fmt(ratio('memory', 'off'), 3), cost(ratio('memory', 'off'))],
  ['sluice no limits / nginx', fmt(ratio('off', 'nginx'), 3), '—'],
  ['sluice Redis limiter / nginx', fmt(ratio('redis', 'nginx'), 3), '—'],
  ['sluice memory limiter / nginx', fmt(ratio('memory', 'nginx'), 3), '—'],
]), '');
out.push(thr === null ? 'Aim (Redis limiter costs at most 10 % of the throughput): not measured.'
  : `Aim (the Redis limiter costs at most ${AIM * 100} % of the throughput): **${1 - thr <= AIM ? 'met' : 'not met'}** ` +
    `(${cost(thr)}).`, '');

out.push('## Added by the limiter (median of the per-round differences to sluice without limits)', '');
const added = (t) => [
  signed(diff(t, 'off', ms('p50_us')), 3, ' ms'), signed(diff(t, 'off', ms('p99_us')), 3, ' ms'),
  signed(diff(t, 'off', ms('light_p50_us')), 3, ' ms'), signed(diff(t, 'off', ms('light_p99_us')), 3, ' ms'),
  signed(diff(t, 'off', (r) => us(r, 'proxy_ticks')), 1, ' µs'),
  signed(diff(t, 'off', gwRedisUs), 1, ' µs'),
  fmt(ratio(t, 'off', gwRedisUs), 2)];
out.push(table(['', `p50, ${meta.wrk_conns} conn.`, `p99, ${meta.wrk_conns} conn.`, 'p50, 1 conn.', 'p99, 1 conn.',
  'sluice CPU / request', 'sluice + redis-server CPU / request', 'CPU per request, ratio to no limits'], [
  ['Redis limiter', ...added('redis')],
  ['Redis, one limit', ...added('redis1')],
  ['memory limiter', ...added('memory')],
]), '');

const rd = rows.find((r) => r.phase === 'redis');
const logs = rows.filter((r) => r.phase === 'access_log');
if (rd) {
  const served = rd.decided_both - rd.counted_before;
  out.push(`Checks of the redis variant after the run (its /metrics, Redis, the access logs): ${int(rd.counted_redis)} ` +
    `decisions by a script call, ${int(rd.counted_lease)} from leases, ${rd.counted_local} locally, ` +
    `${rd.redis_errors} Redis errors, ${rd.settle_errors} settlement errors, ${int(rd.tokens_charged)} tokens charged; ` +
    `${rd.keys} keys in Redis. Script calls (EVALSHA/EVAL: admissions, lease refills and settlement batches) of both ` +
    `Redis variants: ${int(rd.script_calls)} for ${int(served)} requests (warm-ups and 1-connection runs included): ` +
    `${fmt(rd.script_calls / served, 4)} per request.`);
}
for (const l of logs) {
  out.push(`- access log of ${NAMES[l.target]}: ${int(l.lines)} lines, by status: ` +
    `${Object.entries(l.statuses || {}).map(([k, v]) => `${k}: ${int(v)}`).join(', ') || 'none'}; ` +
    `"limiter":"redis" ${int(l.limiter_redis)}, "limiter":"local" ${int(l.limiter_local)}`);
}
out.push('', 'wrk closes its connections with requests in flight when a run ends; sluice logs those as 499.', '');

out.push('## Per round', '');
out.push(table(['round', 'target', 'requests/s', 'p50 ms', 'p99 ms', '1-conn p50 ms', '1-conn p99 ms', 'proxy CPU µs/req',
  'redis CPU µs/req', 'proxy cores', 'redis cores', 'sim cores', 'wrk cores', 'rest cores', 'errors'],
ns.map((r) => [r.round, r.target, int(rps(r)), fmt(r.p50_us / 1000, 3), fmt(r.p99_us / 1000, 3),
  r.light_p50_us === null ? '—' : fmt(r.light_p50_us / 1000, 3),
  r.light_p99_us === null ? '—' : fmt(r.light_p99_us / 1000, 3),
  fmt(us(r, 'proxy_ticks'), 1), fmt(us(r, 'redis_ticks'), 1), fmt(cores(r, 'proxy_ticks'), 2),
  fmt(cores(r, 'redis_ticks'), 2), fmt(cores(r, 'sim_ticks'), 2), fmt(wrkUse(r), 2), fmt(otherUse(r), 2), r.errors])));
out.push('');
process.stdout.write(out.join('\n'));
