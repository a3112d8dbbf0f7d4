#!/usr/bin/env node
// Turns the raw results of bench/binaries.sh (JSON lines) into the Markdown report.
// Usage: BENCH_META='{...}' node bench/report-binaries.mjs RAW.jsonl > report.md
// Per-target figures are medians over the rounds; ratios are medians of the per-round
// ratios (each round measures the three targets back to back).
import { median, fmt, int, table, readRows, rps, metaLines, rounds as roundsOf } from './report.mjs';

const meta = JSON.parse(process.env.BENCH_META || '{}');
const rows = readRows(process.argv[2]);
const CLK = meta.clk_tck || 100;
const TARGETS = ['nginx', 'base', 'new'];
const NAMES = { nginx: 'nginx', base: 'sluice, base', new: 'sluice, new' };
const { ns, ids, perTarget, ratio } = roundsOf(rows, TARGETS);
const cpu = (r) => (r.proxy_ticks * 1e6) / CLK / r.requests;  // the proxy's CPU µs per request

const out = [...metaLines('sluice: two binaries side by side', meta), ''];
if (!ns.length) {
  out.push('No measurements.');
  process.stdout.write(out.join('\n') + '\n');
  process.exit(0);
}
out.push(`Base: \`${meta.base_bin}\`; new: the binary of the commit above. Profile \`${meta.profile}\`` +
  (meta.extra ? ':' : ' (auth, access log, metrics).'), '');
if (meta.extra) out.push('```yaml', meta.extra, '```', '');
out.push(`## Non-streaming: wrk -t${meta.wrk_threads} -c${meta.wrk_conns} -d${meta.wrk_duration}s, median of ${ids.length} rounds`, '');
const R = perTarget(rps);
const C = perTarget(cpu);
const errors = Object.fromEntries(TARGETS.map((t) => [t, ns.filter((r) => r.target === t).reduce((s, r) => s + r.errors, 0)]));
out.push(table(['', ...TARGETS.map((t) => NAMES[t])], [
  ['requests/s', ...TARGETS.map((t) => int(R[t]))],
  ['proxy CPU per request', ...TARGETS.map((t) => fmt(C[t], 1, ' µs'))],
  ['errors (all rounds)', ...TARGETS.map((t) => String(errors[t]))],
]), '');
out.push('## Ratios (median of the per-round ratios)', '');
out.push(table(['', 'requests/s', 'CPU per request'], [
  ['**new / base**', `**${fmt(ratio('new', 'base'), 3)}**`, `**${fmt(ratio('new', 'base', cpu), 3)}**`],
  ['base / nginx', fmt(ratio('base', 'nginx'), 3), fmt(ratio('base', 'nginx', cpu), 3)],
  ['new / nginx', fmt(ratio('new', 'nginx'), 3), fmt(ratio('new', 'nginx', cpu), 3)],
]), '');
out.push('## Per round', '');
out.push(table(['round', 'target', 'requests/s', 'proxy CPU µs/req', 'p50 ms', 'p99 ms', 'errors'],
  ns.map((r) => [String(r.round), r.target, int(rps(r)), fmt(cpu(r), 1), fmt(r.p50_us / 1000, 3), fmt(r.p99_us / 1000, 3), String(r.errors)])), '');
const logs = rows.filter((r) => r.phase === 'access_log');
if (logs.length) {
  out.push('Access logs: ' + logs.map((l) => `${l.target} ${int(l.lines)} lines`).join(', ') + '.', '');
}
process.stdout.write(out.join('\n') + '\n');
