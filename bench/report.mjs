#!/usr/bin/env node
// Turns the raw results of bench/run.sh (JSON lines) into the Markdown report.
// Usage: BENCH_META='{...}' node bench/report.mjs RAW.jsonl > report.md
// Figures are medians over the rounds; "added" figures and the sluice/nginx ratio are
// medians of the per-round differences/ratios (each round measures all targets back to
// back, so pairing within a round removes part of the machine's drift).
// The helpers are exported for bench/report-limits.mjs.
import fs from 'node:fs';
import { pathToFileURL } from 'node:url';

export const median = (xs) => {
  const v = xs.filter((x) => x !== null && x !== undefined && Number.isFinite(x)).sort((a, b) => a - b);
  if (v.length === 0) return null;
  const m = v.length >> 1;
  return v.length % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
};
export const fmt = (x, digits = 2, unit = '') => (x === null || x === undefined ? '—' : `${x.toFixed(digits)}${unit}`);
export const signed = (x, digits, unit) => (x === null ? '—' : `${x >= 0 ? '+' : ''}${x.toFixed(digits)}${unit}`);
export const int = (x) => (x === null || x === undefined ? '—' : Math.round(x).toLocaleString('en-US'));
export const table = (head, body) => [
  `| ${head.join(' | ')} |`, `|${head.map(() => '---').join('|')}|`,
  ...body.map((r) => `| ${r.join(' | ')} |`)].join('\n');
export const readRows = (file) => fs.readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
export const rps = (r) => r.requests / (r.duration_us / 1e6);
export const secs = (r) => r.duration_us / 1e6;
export const wrkUse = (r) => (r.wrk_cpu_ms === undefined ? null : r.wrk_cpu_ms / 1000 / secs(r));

// The first lines of a report: title, then date, commit, machine, load, tool versions.
// The "nonstream" rows of a run, and the medians over rounds that the reports use:
// perTarget(fn) per target; ratio(a, b, fn) and diff(a, b, fn) of the per-round values of
// target a against target b (each round measures every target back to back).
export const rounds = (rows, targets) => {
  const ns = rows.filter((r) => r.phase === 'nonstream');
  const ids = [...new Set(ns.map((r) => r.round))];
  const get = (round, t) => ns.find((r) => r.round === round && r.target === t);
  const perRound = (fn) => median(ids.map(fn));
  const pair = (a, b, combine) => perRound((rd) => {
    const x = get(rd, a);
    const y = get(rd, b);
    return x && y ? combine(x, y) : null;
  });
  return {
    ns,
    ids,
    get,
    perTarget: (fn) => Object.fromEntries(targets.map((t) => [t, median(ns.filter((r) => r.target === t).map(fn))])),
    ratio: (a, b, fn = rps) => pair(a, b, (x, y) => fn(x) / fn(y)),
    diff: (a, b, fn) => pair(a, b, (x, y) => (fn(x) !== null && fn(y) !== null ? fn(x) - fn(y) : null)),
  };
};

export const metaLines = (title, meta) => [`# ${title}`, '',
  `- date: ${meta.date}; commit ${meta.git}; binary built ${meta.binary_mtime}`,
  `- machine: ${meta.nproc} CPUs, ${meta.cpu}, Linux ${meta.kernel} (shared, noisy: compare targets within this run only)`,
  `- load average (1/5/15 min) before the run: ${meta.load_start}; after: ${meta.load_end}`,
  `- nginx ${meta.nginx}, wrk ${meta.wrk}, node ${meta.node}; sluice workers = nginx worker_processes = ${meta.workers}; simulator workers ${meta.sim_workers}`];

function report(rows, meta) {
  const CLK = meta.clk_tck || 100;
  const TARGETS = ['direct', 'nginx', 'sluice'];
  const NAMES = { direct: 'direct (simulator)', nginx: 'nginx', sluice: 'sluice' };

  const out = [];
  out.push(...metaLines('sluice benchmark results', meta));
  out.push('');

  // ---- non-streaming
  const ns = rows.filter((r) => r.phase === 'nonstream');
  const rounds = [...new Set(ns.map((r) => r.round))];
  const get = (rs, round, t) => rs.find((r) => r.round === round && r.target === t);
  // CPU used by everything else on the machine during the run (other processes, and kernel
  // time not charged to a process); measured as machine busy minus proxy, simulator, wrk.
  const otherUse = (r) => (r.busy_ticks === undefined ? null
    : (r.busy_ticks - (r.target === 'direct' ? 0 : r.proxy_ticks) - r.sim_ticks) / CLK / secs(r) - wrkUse(r));
  const perTarget = (fn) => Object.fromEntries(TARGETS.map((t) => [t, median(ns.filter((r) => r.target === t).map(fn))]));
  const paired = (rs, t, fn) => median(rounds.map((rd) => {
    const a = get(rs, rd, t); const d = get(rs, rd, 'direct');
    return a && d ? fn(a) - fn(d) : null;
  }));

  if (ns.length) {
    const R = perTarget(rps);
    const p50 = perTarget((r) => r.p50_us / 1000);
    const p99 = perTarget((r) => r.p99_us / 1000);
    const cpu = perTarget((r) => (r.proxy_ticks * 1e6 / CLK) / r.requests);
    const simCores = perTarget((r) => r.sim_ticks / CLK / (r.duration_us / 1e6));
    const simCpu = perTarget((r) => (r.sim_ticks * 1e6 / CLK) / r.requests);
    const wrkCores = perTarget(wrkUse);
    const otherCores = perTarget(otherUse);
    const errs = Object.fromEntries(TARGETS.map((t) => [t, ns.filter((r) => r.target === t).reduce((s, r) => s + r.errors, 0)]));
    const ratio = median(rounds.map((rd) => {
      const s = get(ns, rd, 'sluice'); const n = get(ns, rd, 'nginx');
      return s && n ? rps(s) / rps(n) : null;
    }));
    out.push(`## Non-streaming: wrk -t${meta.wrk_threads} -c${meta.wrk_conns} -d${meta.wrk_duration}s, median of ${rounds.length} rounds`, '');
    out.push('POST /v1/chat/completions, max_tokens 8, simulator with zero delays (sluice: auth on, access log on).', '');
    const row = (label, f) => [label, ...TARGETS.map(f)];
    out.push(table(['', ...TARGETS.map((t) => NAMES[t])], [
      row('requests/s', (t) => int(R[t])),
      row('latency p50', (t) => fmt(p50[t], 3, ' ms')),
      row('latency p99', (t) => fmt(p99[t], 3, ' ms')),
      row('added latency p50 vs direct', (t) => (t === 'direct' ? '—' : signed(paired(ns, t, (r) => r.p50_us / 1000), 3, ' ms'))),
      row('added latency p99 vs direct', (t) => (t === 'direct' ? '—' : signed(paired(ns, t, (r) => r.p99_us / 1000), 3, ' ms'))),
      row('proxy CPU per request', (t) => (t === 'direct' ? '—' : fmt(cpu[t], 1, ' µs'))),
      row('simulator CPU per request', (t) => fmt(simCpu[t], 1, ' µs')),
      row('proxy CPU use (cores)', (t) => (t === 'direct' ? '—' : fmt(cpu[t] * R[t] / 1e6, 2))),
      row('simulator CPU use (cores)', (t) => fmt(simCores[t], 2)),
      row('wrk CPU use (cores)', (t) => fmt(wrkCores[t], 2)),
      row('rest of the machine (cores)', (t) => fmt(otherCores[t], 2)),
      row('errors (all rounds)', (t) => String(errs[t])),
    ]));
    out.push('', `**sluice / nginx requests/s: ${fmt(ratio, 2)}** (median of per-round ratios)`, '');

    if (ns.some((r) => r.light_p50_us !== null)) {
      const l50 = perTarget((r) => r.light_p50_us / 1000);
      const l99 = perTarget((r) => r.light_p99_us / 1000);
      out.push(`### Light load: 1 connection, ${meta.light_duration}s per target and round`, '');
      out.push(table(['', ...TARGETS.map((t) => NAMES[t])], [
        row('latency p50', (t) => fmt(l50[t], 3, ' ms')),
        row('latency p99', (t) => fmt(l99[t], 3, ' ms')),
        row('added latency p50 vs direct', (t) => (t === 'direct' ? '—' : signed(paired(ns, t, (r) => r.light_p50_us / 1000), 3, ' ms'))),
        row('added latency p99 vs direct', (t) => (t === 'direct' ? '—' : signed(paired(ns, t, (r) => r.light_p99_us / 1000), 3, ' ms'))),
      ]));
      out.push('');
    }
    const al = rows.find((r) => r.phase === 'access_log');
    if (al) {
      out.push(`sluice access log after this phase (warm-ups and light-load runs included): ${al.lines} lines, ` +
        `by status: ${Object.entries(al.statuses || {}).map(([k, v]) => `${k}: ${v}`).join(', ') || 'none'}. ` +
        'wrk closes its connections with requests in flight when a run ends; sluice logs those as 499.', '');
    }
  }

  // ---- streaming
  const st = rows.filter((r) => r.phase === 'stream').map((r) => ({
    round: r.round, target: r.target, ...r.result,
    // CPU (cores) over the whole client run (bench/streams.cpp, warm-up included) of: the proxy, the
    // simulator, the client, and the rest of the machine.
    proxyCores: r.run_ms ? (r.target === 'direct' ? null : r.proxy_ticks / CLK / (r.run_ms / 1000)) : null,
    simCores: r.run_ms ? r.sim_ticks / CLK / (r.run_ms / 1000) : null,
    clientCores: r.run_ms ? r.client_cpu_ms / r.run_ms : null,
    restCores: r.run_ms ? (r.busy_ticks - (r.target === 'direct' ? 0 : r.proxy_ticks) - r.sim_ticks) / CLK / (r.run_ms / 1000)
      - r.client_cpu_ms / r.run_ms : null,
  }));
  if (st.length) {
    const srounds = [...new Set(st.map((r) => r.round))];
    const sTarget = (fn) => Object.fromEntries(TARGETS.map((t) => [t, median(st.filter((r) => r.target === t).map(fn))]));
    const spaired = (t, fn) => median(srounds.map((rd) => {
      const a = get(st, rd, t); const d = get(st, rd, 'direct');
      return a && d && fn(a) !== null && fn(d) !== null ? fn(a) - fn(d) : null;
    }));
    const n = meta.streams;
    const minOk = Object.fromEntries(TARGETS.map((t) => [t, Math.min(...st.filter((r) => r.target === t).map((r) => r.ok))]));
    const errs = Object.fromEntries(TARGETS.map((t) => [t, st.filter((r) => r.target === t).reduce((s, r) => s + r.errors, 0)]));
    const minOpen = Object.fromEntries(TARGETS.map((t) => [t, Math.min(...st.filter((r) => r.target === t).map((r) => r.open_at_sample ?? 0))]));
    const t50 = sTarget((r) => r.ttft_p50_ms);
    const t99 = sTarget((r) => r.ttft_p99_ms);
    const idle = sTarget((r) => r.rss_idle_kb);
    const peak = sTarget((r) => r.rss_peak_kb);
    const per = sTarget((r) => r.rss_per_stream_kb);
    const row = (label, f) => [label, ...TARGETS.map(f)];
    out.push(`## Streaming: ${n} concurrent streams, median of ${srounds.length} rounds`, '');
    out.push(`Simulator: TTFT ${meta.stream_ttft}, inter-token ${meta.stream_inter_token}, jitter ${meta.stream_jitter}, ${meta.stream_tokens} output tokens. Client: bench/streams.cpp (one thread, epoll, non-blocking connects), all streams started at once.`, '');
    out.push(table(['', ...TARGETS.map((t) => NAMES[t])], [
      row('streams ok (worst round)', (t) => `${minOk[t]} / ${n}`),
      row('errors (all rounds)', (t) => String(errs[t])),
      row('TTFT p50', (t) => fmt(t50[t], 1, ' ms')),
      row('TTFT p99', (t) => fmt(t99[t], 1, ' ms')),
      row('added TTFT p50 vs direct', (t) => (t === 'direct' ? '—' : signed(spaired(t, (r) => r.ttft_p50_ms), 1, ' ms'))),
      row('added TTFT p99 vs direct', (t) => (t === 'direct' ? '—' : signed(spaired(t, (r) => r.ttft_p99_ms), 1, ' ms'))),
      row('proxy RSS idle', (t) => (t === 'direct' ? '—' : fmt(idle[t] / 1024, 1, ' MiB'))),
      row('proxy RSS, highest during the batch', (t) => (t === 'direct' ? '—' : fmt(peak[t] / 1024, 1, ' MiB'))),
      row('proxy RSS per open stream', (t) => (t === 'direct' ? '—' : fmt(per[t], 1, ' KiB'))),
      row('streams open together (worst round)', (t) => `${minOpen[t]} / ${n}`),
    ]));
    out.push('', 'Each round starts fresh simulator, nginx and sluice processes; the client sends 20 warm-up streams, reads the ' +
      'idle RSS, then starts all streams at once and samples RSS every 10 ms. Per open stream = (highest RSS − idle RSS) / ' +
      'streams. "Streams open together" counts the streams still open when the last one got its first token; when it is ' +
      'below the total, not all streams were held at once and the per-stream figure is not exact. nginx RSS is the sum ' +
      'over its worker processes.', '');
    const partial = TARGETS.filter((t) => minOpen[t] < n);
    if (partial.length) out.push(`**Warning:** not all streams were open together for ${partial.join(', ')} in some round (see per-round table).`, '');
  }

  // ---- per round
  out.push('## Per round', '');
  if (ns.length) {
    out.push(table(['round', 'target', 'requests/s', 'p50 ms', 'p99 ms', 'proxy CPU µs/req', 'proxy cores', 'sim cores', 'wrk cores', 'rest cores', 'errors', '1-conn p50 ms', '1-conn p99 ms'],
      ns.map((r) => [r.round, r.target, int(rps(r)), fmt(r.p50_us / 1000, 3), fmt(r.p99_us / 1000, 3),
        r.target === 'direct' ? '—' : fmt((r.proxy_ticks * 1e6 / CLK) / r.requests, 1),
        r.target === 'direct' ? '—' : fmt(r.proxy_ticks / CLK / secs(r), 2),
        fmt(r.sim_ticks / CLK / secs(r), 2), fmt(wrkUse(r), 2), fmt(otherUse(r), 2), r.errors,
        r.light_p50_us === null ? '—' : fmt(r.light_p50_us / 1000, 3),
        r.light_p99_us === null ? '—' : fmt(r.light_p99_us / 1000, 3)])));
    out.push('');
  }
  if (st.length) {
    const mib = (kb) => (kb === null || kb === undefined ? '—' : fmt(kb / 1024, 1));
    out.push(table(['round', 'target', 'ok', 'errors', 'TTFT p50 ms', 'TTFT p99 ms', 'TTFT max ms', 'open together', 'RSS idle MiB', 'RSS all open MiB', 'RSS highest MiB', 'KiB/stream', 'proxy cores', 'sim cores', 'client cores', 'rest cores'],
      st.map((r) => [r.round, r.target, r.ok, r.errors + (r.errors ? ` ${JSON.stringify(r.error_kinds)}` : ''),
        fmt(r.ttft_p50_ms, 1), fmt(r.ttft_p99_ms, 1), fmt(r.ttft_max_ms, 1), r.open_at_sample ?? '—',
        mib(r.rss_idle_kb), mib(r.rss_all_first_kb), mib(r.rss_peak_kb), fmt(r.rss_per_stream_kb, 1),
        fmt(r.proxyCores, 2), fmt(r.simCores, 2), fmt(r.clientCores, 2), fmt(r.restCores, 2)])));
    out.push('');
  }
  return out.join('\n');
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  process.stdout.write(report(readRows(process.argv[2]), JSON.parse(process.env.BENCH_META || '{}')));
}

// The four latency rows of a report's main table (medians per target: p50 and p99 with
// `conns` connections, then with one).
export function latencyRows(row, conns, p50, p99, l50, l99) {
  return [
    row(`latency p50, ${conns} connections`, (t) => fmt(p50[t], 3, ' ms')),
    row(`latency p99, ${conns} connections`, (t) => fmt(p99[t], 3, ' ms')),
    row('latency p50, 1 connection', (t) => fmt(l50[t], 3, ' ms')),
    row('latency p99, 1 connection', (t) => fmt(l99[t], 3, ' ms')),
  ];
}
