#!/usr/bin/env node
// Turns the raw results of bench/latency.sh (JSON lines) into the Markdown report.
// Usage: BENCH_META='{...}' node bench/report-latency.mjs RAW.jsonl > report.md
// Per-target figures are medians over the rounds; "added" figures are medians of the
// per-round differences from the simulator direct (each round measures the three targets
// back to back).
import { median, fmt, int, table, readRows, metaLines } from './report.mjs';

const meta = JSON.parse(process.env.BENCH_META || '{}');
const rows = readRows(process.argv[2]).filter((r) => r.phase === 'latency');
const TARGETS = ['direct', 'nginx', 'sluice'];
const NAMES = { direct: 'simulator direct', nginx: 'nginx', sluice: `sluice (${meta.profile})` };
const ids = [...new Set(rows.map((r) => r.round))];
const get = (rd, t) => rows.find((r) => r.round === rd && r.target === t);
const per = (t, fn) => median(rows.filter((r) => r.target === t).map(fn));
const added = (t, fn) => median(ids.map((rd) => (get(rd, t) && get(rd, 'direct') ? fn(get(rd, t)) - fn(get(rd, 'direct')) : null)));
const ms = (us) => (us === null ? null : us / 1000);

const out = [...metaLines('sluice: latency at light load', meta), ''];
if (!rows.length) {
  out.push('No measurements.');
  process.stdout.write(out.join('\n') + '\n');
  process.exit(0);
}
out.push(`Profile \`${meta.profile}\`` + (meta.extra ? ':' : ' (auth, access log, metrics).'), '');
if (meta.extra) out.push('```yaml', meta.extra, '```', '');

const section = (title, cols) => {
  out.push(`## ${title}, median of ${ids.length} rounds`, '');
  out.push(table(['', ...TARGETS.map((t) => NAMES[t])], cols.map(([name, fn]) => [name, ...TARGETS.map((t) => fmt(ms(per(t, fn)), 3, ' ms'))])), '');
  out.push(table(['added over the simulator direct', 'nginx', `sluice (${meta.profile})`, 'sluice − nginx'],
    cols.map(([name, fn]) => {
      const n = ms(added('nginx', fn));
      const s = ms(added('sluice', fn));
      return [name, fmt(n, 3, ' ms'), fmt(s, 3, ' ms'), n === null || s === null ? '—' : fmt(s - n, 3, ' ms')];
    })), '');
};
section(`One connection: wrk -t1 -c1 -d${meta.light_duration}s`, [['p50', (r) => r.one_p50_us], ['p99', (r) => r.one_p99_us]]);
section(`Fixed rate: ${int(meta.rate)} requests/s for ${meta.rate_duration} s over ${meta.rate_conns} connections (bench/rate.cpp, open loop)`,
  [['p50', (r) => r.rate_p50_us], ['p90', (r) => r.rate_p90_us], ['p99', (r) => r.rate_p99_us], ['p99.9', (r) => r.rate_p999_us]]);

out.push('## Per round', '');
out.push(table(['round', 'target', '1 conn: requests', 'p50 ms', 'p99 ms', 'rate: requests', 'p50 ms', 'p99 ms', 'p99.9 ms', 'max ms', 'waited for a connection', 'errors', 'generator CPU'],
  rows.map((r) => [String(r.round), r.target, int(r.one_requests), fmt(r.one_p50_us / 1000, 3), fmt(r.one_p99_us / 1000, 3),
    int(r.rate_requests), fmt(r.rate_p50_us / 1000, 3), fmt(r.rate_p99_us / 1000, 3), fmt(r.rate_p999_us / 1000, 3),
    fmt(r.rate_max_us / 1000, 3), int(r.rate_late), String(r.one_errors + r.rate_errors),
    `${fmt((100 * r.rate_cpu_ms) / (r.rate_duration_us / 1000), 1)} %`])), '');
process.stdout.write(out.join('\n') + '\n');
