#!/usr/bin/env node
// Turns the raw results of bench/cluster.sh (JSON lines) into the Markdown report.
// Usage: BENCH_META='{...}' node bench/report-cluster.mjs RAW.jsonl > report.md
import {
  median, fmt, signed, int, table, readRows, rps, wrkUse, metaLines, rounds as roundsOf, latencyRows,
} from './report.mjs';

const meta = JSON.parse(process.env.BENCH_META || '{}');
const rows = readRows(process.argv[2]);
const CLK = meta.clk_tck || 100;
const TARGETS = ['nginx', 'direct', 'cluster'];
const NAMES = {
  nginx: 'nginx, plain proxy',
  direct: `one sluice (${meta.workers} workers)`,
  cluster: `nginx → ${meta.cluster_size} sluice (${meta.cluster_workers} worker each)`,
};
const { ns, ids, perTarget, ratio, diff } = roundsOf(rows, TARGETS);
const us = (r) => ((r.proxy_ticks ?? 0) * 1e6) / CLK / r.requests;
const ms = (k) => (r) => (r[k] === null ? null : r[k] / 1000);

const out = [...metaLines('sluice as a fleet: three instances behind nginx against one direct', meta), ''];
if (!ns.length) {
  out.push('No measurements.');
  process.stdout.write(out.join('\n'));
  process.exit(0);
}
out.push(`## Non-streaming: wrk -t${meta.wrk_threads} -c${meta.wrk_conns} -d${meta.wrk_duration}s, median of ${ids.length} rounds`, '');
out.push('POST /v1/chat/completions, max_tokens 8, simulator with zero delays; sluice with auth and access log on. ' +
  'Every process shares the same cores: the cluster measures the cost of the extra hop and of more processes, ' +
  'not more capacity. "proxy CPU" of the cluster is its nginx workers and all its instances.', '');
const row = (label, f) => [label, ...TARGETS.map(f)];
const errs = Object.fromEntries(TARGETS.map((t) => [t, ns.filter((r) => r.target === t).reduce((s, r) => s + r.errors, 0)]));
out.push(table(['', ...TARGETS.map((t) => NAMES[t])], [
  row('requests/s', (t) => int(perTarget(rps)[t])),
  ...latencyRows(row, meta.wrk_conns, perTarget(ms('p50_us')), perTarget(ms('p99_us')), perTarget(ms('light_p50_us')), perTarget(ms('light_p99_us'))),
  row('proxy CPU per request', (t) => fmt(perTarget(us)[t], 1, ' µs')),
  row('wrk CPU use (cores)', (t) => fmt(median(ns.filter((r) => r.target === t).map(wrkUse)), 2)),
  row('errors (all rounds)', (t) => String(errs[t])),
]), '');
out.push('## The cluster against one instance (median of the per-round figures)', '');
out.push(table(['', 'value'], [
  ['requests/s, cluster / direct', fmt(ratio('cluster', 'direct'), 3)],
  ['requests/s, direct / nginx', fmt(ratio('direct', 'nginx'), 3)],
  [`added by the nginx hop, p50 at ${meta.wrk_conns} connections`, signed(diff('cluster', 'direct', ms('p50_us')), 3, ' ms')],
  [`added by the nginx hop, p99 at ${meta.wrk_conns} connections`, signed(diff('cluster', 'direct', ms('p99_us')), 3, ' ms')],
  ['added by the nginx hop, p50 at 1 connection', signed(diff('cluster', 'direct', ms('light_p50_us')), 3, ' ms')],
  ['added by the nginx hop, p99 at 1 connection', signed(diff('cluster', 'direct', ms('light_p99_us')), 3, ' ms')],
  ['CPU per request, cluster / direct', fmt(ratio('cluster', 'direct', us), 2)],
]), '');
const spread = rows.find((r) => r.phase === 'spread');
if (spread) out.push(`Requests per instance over the run (access logs): ${spread.lines.map(int).join(', ')}.`, '');

const roll = rows.find((r) => r.phase === 'rolling');
if (roll) {
  out.push(`## Rolling restart: ${int(roll.streams_open)} streams open, ${int(roll.rate)} requests/s`, '');
  out.push(`\`${roll.command.replace(/^.*\/deploy\//, 'deploy/')}\` replaced every instance in ${fmt(roll.restart_ms / 1000, 1, ' s')} ` +
    `(each: a new process sharing the instance's port, ready, then the old one's drain delay and drain; nginx is not reloaded). Streams of ${roll.stream_tokens} ` +
    'tokens at 20 ms, each replaced by a new one when it ends.', '');
  out.push(table(['', 'all', 'during the restart'], [
    ['requests sent', int(roll.requests), int(roll.during.requests)],
    ['requests failed', int(roll.requests_failed), int(roll.during.requests_failed)],
    ['streams ended', int(roll.streams), int(roll.during.streams_ended)],
    ['streams cut or failed', int(roll.streams_cut + roll.streams_failed), int(roll.during.streams_cut)],
    ['request latency p50 / p99', '', `${fmt(roll.p50_ms_during, 1)} / ${fmt(roll.p99_ms_during, 1)} ms`],
  ]), '');
  const f = Object.entries(roll.failures);
  out.push(f.length ? `Failures: ${f.map(([k, v]) => `${k}: ${v}`).join('; ')}.` : 'No failure.', '');
}
out.push('## Per round', '');
out.push(table(['round', 'target', 'requests/s', 'p50 ms', 'p99 ms', '1-conn p50 ms', '1-conn p99 ms', 'proxy CPU µs/req', 'errors'],
  ns.map((r) => [r.round, r.target, int(rps(r)), fmt(r.p50_us / 1000, 3), fmt(r.p99_us / 1000, 3),
    r.light_p50_us === null ? '—' : fmt(r.light_p50_us / 1000, 3), r.light_p99_us === null ? '—' : fmt(r.light_p99_us / 1000, 3),
    fmt(us(r), 1), r.errors])), '');

process.stdout.write(out.join('\n'));
