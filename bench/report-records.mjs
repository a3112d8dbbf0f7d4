#!/usr/bin/env node
// Turns the raw results of bench/records.sh (JSON lines) into the Markdown report.
// Usage: BENCH_META='{...}' node bench/report-records.mjs RAW.jsonl > report.md
// Per-target figures are medians over the rounds; ratios are medians of the per-round
// ratios (each round measures all targets back to back).
import {
  median, fmt, int, table, readRows, rps, secs, wrkUse, metaLines, rounds as roundsOf, latencyRows,
} from './report.mjs';

const meta = JSON.parse(process.env.BENCH_META || '{}');
const rows = readRows(process.argv[2]);
const CLK = meta.clk_tck || 100;
const AIM = 0.05; // the aim: history, events and metrics cost less than 5 % of the throughput
const TARGETS = ['nginx', 'off', 'sqlite', 'postgres'];
const NAMES = {
  nginx: 'nginx',
  off: 'sluice, recording off',
  sqlite: 'sluice, SQLite history + Kafka events',
  postgres: 'sluice, PostgreSQL history + Kafka events',
};

const { ns, ids: rounds, perTarget, ratio } = roundsOf(rows, TARGETS);
const us = (r, k) => ((r[k] ?? 0) * 1e6) / CLK / r.requests;
const cores = (r, k) => (r[k] ?? 0) / CLK / secs(r);
const ms = (k) => (r) => (r[k] === null ? null : r[k] / 1000);
// The dependencies' CPU belongs to the variants that use them.
const withDeps = (r) => us(r, 'proxy_ticks') + (r.target === 'sqlite' || r.target === 'postgres' ? us(r, 'deps_ticks') : 0);

const out = [...metaLines('sluice records benchmark: access log, history, events and metrics on vs off', meta), ''];
if (!ns.length) {
  out.push('No measurements.');
  process.stdout.write(out.join('\n'));
  process.exit(0);
}
out.push(`PostgreSQL ${meta.postgres} (fsync off) and librdkafka ${meta.librdkafka}'s mock cluster, started for the run. ` +
  'The recording variants write one history row and one Kafka event per request; /metrics is scraped every second. ' +
  'Every variant writes the access log and collects metrics.', '');
out.push(`## Non-streaming: wrk -t${meta.wrk_threads} -c${meta.wrk_conns} -d${meta.wrk_duration}s, median of ${rounds.length} rounds`, '');
const R = perTarget(rps);
const row = (label, f) => [label, ...TARGETS.map(f)];
const p50 = perTarget(ms('p50_us'));
const p99 = perTarget(ms('p99_us'));
const l50 = perTarget(ms('light_p50_us'));
const l99 = perTarget(ms('light_p99_us'));
const gw = perTarget((r) => us(r, 'proxy_ticks'));
const all = perTarget(withDeps);
const errs = Object.fromEntries(TARGETS.map((t) => [t, ns.filter((r) => r.target === t).reduce((s, r) => s + r.errors, 0)]));
out.push(table(['', ...TARGETS.map((t) => NAMES[t])], [
  row('requests/s', (t) => int(R[t])),
  ...latencyRows(row, meta.wrk_conns, p50, p99, l50, l99),
  row('proxy CPU per request', (t) => fmt(gw[t], 1, ' µs')),
  row('proxy + Kafka mock + PostgreSQL CPU per request', (t) => (t === 'nginx' || t === 'off' ? '—' : fmt(all[t], 1, ' µs'))),
  row('simulator CPU use (cores)', (t) => fmt(median(ns.filter((r) => r.target === t).map((r) => cores(r, 'sim_ticks'))), 2)),
  row('wrk CPU use (cores)', (t) => fmt(median(ns.filter((r) => r.target === t).map(wrkUse)), 2)),
  row('errors (all rounds)', (t) => String(errs[t])),
]), '');
const cost = (x) => (x === null ? '—' : fmt((1 - x) * 100, 1, ' %'));
const sq = ratio('sqlite', 'off');
const pg = ratio('postgres', 'off');
// Where each sluice variant's CPU goes, by thread role (the threads' names: docs/phases.md).
const SLUICE = TARGETS.filter((t) => t !== 'nginx');
const roles = [...new Set(ns.filter((r) => SLUICE.includes(r.target) && r.threads).flatMap((r) => Object.keys(r.threads)))].sort();
if (roles.length) {
  out.push('### CPU per request by thread (µs, median of the rounds)', '');
  const perRole = (t, role) => median(ns.filter((r) => r.target === t && r.threads).map((r) => ((r.threads[role] ?? 0) * 1e6) / CLK / r.requests));
  out.push(table(['thread', ...SLUICE.map((t) => NAMES[t])], roles.map((role) => [role, ...SLUICE.map((t) => fmt(perRole(t, role), 2))])), '');
}
out.push('## Ratios (median of the per-round ratios)', '');
out.push(table(['', 'requests/s ratio', 'throughput cost', 'p99 ratio'], [
  ['**SQLite history + events / recording off**', `**${fmt(sq, 3)}**`, `**${cost(sq)}**`, fmt(ratio('sqlite', 'off', ms('p99_us')), 2)],
  ['**PostgreSQL history + events / recording off**', `**${fmt(pg, 3)}**`, `**${cost(pg)}**`, fmt(ratio('postgres', 'off', ms('p99_us')), 2)],
  ['recording off / nginx', fmt(ratio('off', 'nginx'), 3), '—', fmt(ratio('off', 'nginx', ms('p99_us')), 2)],
]), '');
const worst = sq === null || pg === null ? null : Math.min(sq, pg);
out.push(worst === null ? 'Aim: not measured.'
  : `Aim (less than ${AIM * 100} % throughput cost): **${1 - worst < AIM ? 'met' : 'not met'}** (worst: ${cost(worst)}).`, '');
for (const r of rows.filter((x) => x.phase === 'records')) {
  const h = r.infra.history;
  const e = r.infra.events.counts;
  out.push(`- ${NAMES[r.target]}: ${int(h.written)} history rows in ${int(h.batches)} batches (dropped ${h.dropped}, write errors ` +
    `${h.write_errors}); ${int(e.delivered)} of ${int(e.produced)} events delivered (fallback ${e.fallback_written}, dropped ${e.dropped}).`);
}
out.push('', '## Per round', '');
out.push(table(['round', 'target', 'requests/s', 'p50 ms', 'p99 ms', 'proxy CPU µs/req', 'with deps µs/req', 'errors'],
  ns.map((r) => [r.round, r.target, int(rps(r)), fmt(r.p50_us / 1000, 3), fmt(r.p99_us / 1000, 3), fmt(us(r, 'proxy_ticks'), 1),
    fmt(withDeps(r), 1), r.errors])));
out.push('');
process.stdout.write(out.join('\n'));
