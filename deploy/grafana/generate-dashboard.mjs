#!/usr/bin/env node
// Writes sluice-dashboard.json (the Grafana dashboard) from the compact panel list below.
//
//   node deploy/grafana/generate-dashboard.mjs           # rewrite sluice-dashboard.json
//   node deploy/grafana/generate-dashboard.mjs --check   # exit 1 if the file differs
//
// Edit the panels here rather than the JSON, then regenerate; the integration test
// (tests/integration/dashboard.test.mjs) fails when the two differ. Every query is checked
// against a live gateway's /metrics by check-dashboard.mjs.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const DS = { type: 'prometheus', uid: '${DS_PROMETHEUS}' };
const I = 'instance=~"$instance"';
const IM = 'instance=~"$instance", model=~"$model"';
const W = '[$__rate_interval]';

// ---- panel builders --------------------------------------------------------------------

// A target: [expr, legend] or {expr, legend, instant, format}.
function targets(list) {
  return list.map((t, i) => {
    const o = Array.isArray(t) ? { expr: t[0], legend: t[1] } : t;
    const out = { datasource: DS, refId: String.fromCharCode(65 + i), expr: o.expr };
    if (o.instant) Object.assign(out, { instant: true, range: false, format: 'table' });
    else Object.assign(out, { range: true, instant: false });
    if (o.legend !== undefined) out.legendFormat = o.legend;
    return out;
  });
}

const UP_MAPPINGS = [
  {
    type: 'value',
    options: {
      0: { text: 'down', color: 'red', index: 0 },
      1: { text: 'up', color: 'green', index: 1 },
    },
  },
];

function thresholds(steps) {
  return { mode: 'absolute', steps: steps.map(([value, color]) => ({ value, color })) };
}

function timeseries(title, description, tlist, { unit = 'short', min = 0, max, stack = false, w = 8, h = 8, decimals } = {}) {
  const defaults = {
    unit,
    color: { mode: 'palette-classic' },
    custom: {
      drawStyle: 'line',
      lineInterpolation: 'linear',
      lineWidth: 1,
      fillOpacity: stack ? 30 : 10,
      gradientMode: 'none',
      showPoints: 'never',
      pointSize: 4,
      spanNulls: false,
      axisPlacement: 'auto',
      axisSoftMin: min,
      stacking: { mode: stack ? 'normal' : 'none', group: 'A' },
      thresholdsStyle: { mode: 'off' },
    },
    thresholds: thresholds([[null, 'green']]),
  };
  if (max !== undefined) defaults.max = max;
  if (decimals !== undefined) defaults.decimals = decimals;
  return {
    type: 'timeseries',
    title,
    description,
    w,
    h,
    fieldConfig: { defaults, overrides: [] },
    options: {
      legend: { displayMode: 'list', placement: 'bottom', showLegend: true, calcs: [] },
      tooltip: { mode: 'multi', sort: 'desc' },
    },
    targets: targets(tlist),
  };
}

function stat(title, description, tlist, { unit = 'short', steps = [[null, 'green']], mappings = [], w = 4, h = 4, decimals, graph = true } = {}) {
  const defaults = { unit, color: { mode: 'thresholds' }, thresholds: thresholds(steps), mappings };
  if (decimals !== undefined) defaults.decimals = decimals;
  return {
    type: 'stat',
    title,
    description,
    w,
    h,
    fieldConfig: { defaults, overrides: [] },
    options: {
      reduceOptions: { calcs: ['lastNotNull'], fields: '', values: false },
      colorMode: 'value',
      graphMode: graph ? 'area' : 'none',
      justifyMode: 'auto',
      orientation: 'auto',
      textMode: 'auto',
    },
    targets: targets(tlist),
  };
}

function upStat(title, description, expr, legend, opts = {}) {
  return stat(title, description, [[expr, legend]], {
    steps: [[null, 'red'], [1, 'green']],
    mappings: UP_MAPPINGS,
    graph: false,
    ...opts,
  });
}

function table(title, description, expr, { w = 12, h = 8, hide = ['Time'], unit = 'short' } = {}) {
  return {
    type: 'table',
    title,
    description,
    w,
    h,
    fieldConfig: { defaults: { unit, custom: { align: 'auto' }, thresholds: thresholds([[null, 'green']]) }, overrides: [] },
    options: { showHeader: true, cellHeight: 'sm', footer: { show: false, reducer: ['sum'], fields: '' } },
    transformations: [{ id: 'organize', options: { excludeByName: Object.fromEntries(hide.map((k) => [k, true])) } }],
    targets: targets([{ expr, instant: true }]),
  };
}

const q = (p, metric, by, sel = IM) =>
  `histogram_quantile(${p}, sum by (${['le', ...by].join(', ')}) (rate(${metric}_bucket{${sel}}${W})))`;

// ---- the rows ----------------------------------------------------------------------------

const ROWS = [
  {
    title: 'Overview',
    panels: [
      stat('Requests/s', 'Finished requests per second (all statuses).', [[`sum(rate(sluice_requests_total{${IM}}${W}))`, 'req/s']], { unit: 'reqps' }),
      stat('5xx ratio', 'Share of finished requests answered with a 5xx status.', [
        [`sum(rate(sluice_requests_total{${IM}, status=~"5.."}${W})) / sum(rate(sluice_requests_total{${IM}}${W}))`, '5xx'],
      ], { unit: 'percentunit', steps: [[null, 'green'], [0.01, 'orange'], [0.05, 'red']], decimals: 2 }),
      stat('In flight', 'Requests being handled now, all selected instances.', [[`sum(sluice_requests_in_flight{${I}})`, 'in flight']]),
      stat('p95 latency', 'p95 of request duration (arrival to last byte).', [[q(0.95, 'sluice_request_duration_seconds', []), 'p95']], {
        unit: 's', steps: [[null, 'green'], [10, 'orange'], [30, 'red']],
      }),
      stat('p95 TTFT', 'p95 time to first token of streamed requests.', [[q(0.95, 'sluice_ttft_seconds', []), 'p95']], {
        unit: 's', steps: [[null, 'green'], [2, 'orange'], [5, 'red']],
      }),
      stat('Tokens/s', 'Prompt plus completion tokens per second.', [
        [`sum(rate(sluice_prompt_tokens_total{${IM}}${W})) + sum(rate(sluice_completion_tokens_total{${IM}}${W}))`, 'tokens/s'],
      ]),
      timeseries('Requests/s by status', 'Finished requests per second by HTTP status.', [
        [`sum by (status) (rate(sluice_requests_total{${IM}}${W}))`, '{{status}}'],
      ], { unit: 'reqps', stack: true }),
      timeseries('Requests/s by model', 'Finished requests per second by model alias, split by streaming.', [
        [`sum by (model, stream) (rate(sluice_requests_total{${IM}}${W}))`, '{{model}} stream={{stream}}'],
      ], { unit: 'reqps' }),
      timeseries('Error ratio', 'Share of finished requests with a 5xx (gateway or upstream failure) and a 4xx (refused: auth, validation, limits) status.', [
        [`sum(rate(sluice_requests_total{${IM}, status=~"5.."}${W})) / sum(rate(sluice_requests_total{${IM}}${W}))`, '5xx'],
        [`sum(rate(sluice_requests_total{${IM}, status=~"4.."}${W})) / sum(rate(sluice_requests_total{${IM}}${W}))`, '4xx'],
      ], { unit: 'percentunit' }),
      timeseries('Request latency', 'Request duration quantiles (arrival to last byte), from the histogram.', [
        [q(0.5, 'sluice_request_duration_seconds', []), 'p50'],
        [q(0.95, 'sluice_request_duration_seconds', []), 'p95'],
        [q(0.99, 'sluice_request_duration_seconds', []), 'p99'],
      ], { unit: 's' }),
      timeseries('Time to first token', 'TTFT quantiles of streamed requests.', [
        [q(0.5, 'sluice_ttft_seconds', []), 'p50'],
        [q(0.95, 'sluice_ttft_seconds', []), 'p95'],
        [q(0.99, 'sluice_ttft_seconds', []), 'p99'],
      ], { unit: 's' }),
      timeseries('In flight by instance', 'Requests being handled now, per gateway instance.', [
        [`sum by (instance) (sluice_requests_in_flight{${I}})`, '{{instance}}'],
      ]),
      timeseries('p95 latency by model', 'p95 request duration per model alias.', [
        [q(0.95, 'sluice_request_duration_seconds', ['model']), '{{model}}'],
      ], { unit: 's' }),
      timeseries('p95 TTFT by model', 'p95 time to first token per model alias (streams only).', [
        [q(0.95, 'sluice_ttft_seconds', ['model']), '{{model}}'],
      ], { unit: 's' }),
      timeseries('Tokens/s by model', 'Prompt and completion tokens per second per model alias.', [
        [`sum by (model) (rate(sluice_prompt_tokens_total{${IM}}${W}))`, '{{model}} prompt'],
        [`sum by (model) (rate(sluice_completion_tokens_total{${IM}}${W}))`, '{{model}} completion'],
      ]),
    ],
  },
  {
    title: 'Routing and limits',
    panels: [
      timeseries('Rate-limit decisions/s', 'Admission decisions of the rate limiter by decision and reason.', [
        [`sum by (decision, reason) (rate(sluice_ratelimit_decisions_total{${I}}${W}))`, '{{decision}} {{reason}}'],
      ], { unit: 'ops' }),
      timeseries('Where decisions were counted', 'redis: counted in Redis; lease: from units taken from Redis in advance; local: counted per instance (Redis down or memory backend).', [
        [`sum by (backend) (rate(sluice_ratelimit_counted_total{${I}}${W}))`, '{{backend}}'],
      ], { unit: 'ops', stack: true }),
      upStat('Limiter backend up', '1 when the configured limiter backend is fully working, per instance.', `min by (instance) (sluice_ratelimit_backend_up{${I}})`, '{{instance}}', { h: 8 }),
      upStat('Limiter Redis up', '1 when every worker of the instance has its Redis connection up.', `min by (instance) (sluice_redis_up{${I}})`, '{{instance}}', { h: 8 }),
      table('Limiter backend in use', 'The configured limiter backend and the one active now (they differ while Redis is down and counting fell back to local).', `max by (instance, configured, active) (sluice_ratelimit_backend{${I}})`, { w: 8, h: 8, hide: ['Time', 'Value'] }),
      timeseries('Limiter Redis failures/s', 'Admission checks and token settlements Redis failed.', [
        [`sum(rate(sluice_ratelimit_redis_errors_total{${I}}${W}))`, 'admission errors'],
        [`sum(rate(sluice_ratelimit_settle_errors_total{${I}}${W}))`, 'settle errors'],
      ], { unit: 'ops' }),
      timeseries('Limiter script calls/s', 'Script calls sent to Redis: admissions decided there, leases refilled in the background, settlement batches. With leases, far fewer than requests.', [
        [`sum(rate(sluice_ratelimit_counted_total{backend="redis",${I}}${W}))`, 'admissions'],
        [`sum(rate(sluice_ratelimit_lease_refills_total{${I}}${W}))`, 'lease refills'],
        [`sum(rate(sluice_ratelimit_settle_batches_total{${I}}${W}))`, 'settlement batches'],
      ], { unit: 'ops', stack: true }),
      timeseries('Tokens reserved / charged / refunded', 'Token ledger flow per second: reserved at admission, charged and refunded at settlement.', [
        [`sum(rate(sluice_tokens_reserved_total{${I}}${W}))`, 'reserved'],
        [`sum(rate(sluice_tokens_charged_total{${I}}${W}))`, 'charged'],
        [`sum(rate(sluice_tokens_refunded_total{${I}}${W}))`, 'refunded'],
      ]),
      timeseries('Queue depth by class', 'Requests waiting in the concurrency gate, by priority class.', [
        [`sum by (class) (sluice_queue_depth{${I}})`, '{{class}}'],
      ], { stack: true }),
      timeseries('Gate in flight', 'Requests holding concurrency slots, per instance.', [
        [`sum by (instance) (sluice_gate_in_flight{${I}})`, '{{instance}}'],
      ]),
      timeseries('Queue wait p95 by class', 'p95 time queued requests waited, by the class they left the queue in.', [
        [q(0.95, 'sluice_queue_wait_seconds', ['class'], I), '{{class}}'],
      ], { unit: 's' }),
      timeseries('Gate admissions/s', 'Requests let through the gate at once (queued=false) or after queueing, by class.', [
        [`sum by (queued, class) (rate(sluice_gate_admitted_total{${I}}${W}))`, 'queued={{queued}} {{class}}'],
      ], { unit: 'ops', w: 12 }),
      timeseries('Gate rejections and demotions/s', 'Requests refused by the gate (queue_full 429, queue_timeout 503, client_closed), and queued requests demoted to standard.', [
        [`sum by (reason) (rate(sluice_gate_rejected_total{${I}}${W}))`, 'rejected {{reason}}'],
        [`sum by (class) (rate(sluice_gate_demoted_total{${I}}${W}))`, 'demoted {{class}}'],
      ], { unit: 'ops', w: 12 }),
      upStat('Backends up', 'Backends that get requests (healthy by their probes, not ejected, breakers not open); the lowest over the selected instances.', `min by (backend) (sluice_backend_up{${I}})`, '{{backend}}', { w: 6, h: 8 }),
      timeseries('Circuit breakers', 'Breaker state per backend and provider endpoint: 0 closed, 1 open, 2 half-open (the highest over the instances).', [
        [`max by (scope, name) (sluice_breaker_state{${I}})`, '{{scope}} {{name}}'],
      ], { max: 2, decimals: 0, w: 6 }),
      timeseries('Retries, fallbacks and exhaustion/s', 'Further attempts on another backend of the model, attempts on a fallback model, and requests no backend could answer (503 or the canned reply), per model.', [
        [`sum by (model) (rate(sluice_route_retries_total{${I}}${W}))`, 'retry {{model}}'],
        [`sum by (model) (rate(sluice_route_fallbacks_total{${I}}${W}))`, 'fallback {{model}}'],
        [`sum by (model) (rate(sluice_route_exhausted_total{${I}}${W}))`, 'exhausted {{model}}'],
      ], { unit: 'ops', w: 6 }),
      timeseries('Probes and ejections', 'Failed active health probes per second, and passive ejections in the interval, per backend.', [
        [`sum by (backend) (rate(sluice_backend_probes_total{${I},result="failed"}${W}))`, 'probe failed {{backend}}'],
        [`sum by (backend) (increase(sluice_backend_ejections_total{${I}}${W}))`, 'ejected {{backend}}'],
      ], { w: 6 }),
      timeseries('Canary share', 'Share of a model\'s requests sent to its canary first, and whether the canary is active (0 after an automatic rollback).', [
        [`sum by (model) (rate(sluice_canary_requests_total{${I},set="canary"}${W})) / sum by (model) (rate(sluice_canary_requests_total{${I}}${W}))`, 'canary share {{model}}'],
        [`min by (model) (sluice_canary_active{${I}})`, 'active {{model}}'],
      ], { unit: 'percentunit', w: 12 }),
      timeseries('Configuration reloads', 'Reloads (SIGHUP) in the interval by result, and the routing table version in use, per instance.', [
        [`sum by (result) (increase(sluice_config_reloads_total{${I}}${W}))`, 'reload {{result}}'],
        [`max by (instance) (sluice_routing_table_version{${I}})`, 'table version {{instance}}'],
      ], { w: 12 }),
    ],
  },
  {
    title: 'Savings and business',
    panels: [
      timeseries('Stream completion rate', 'Share of streamed answers that reached their end, per model (the rest: the client left first, or the stream failed).', [
        [`sum by (model) (rate(sluice_streams_total{${IM}, outcome="completed"}${W})) / sum by (model) (rate(sluice_streams_total{${IM}}${W}))`, '{{model}}'],
      ], { unit: 'percentunit', max: 1, w: 6 }),
      timeseries('Streams ended/s by outcome', 'Streamed answers that ended per second: completed, client_left, failed.', [
        [`sum by (outcome) (rate(sluice_streams_total{${IM}}${W}))`, '{{outcome}}'],
      ], { unit: 'ops', stack: true, w: 6 }),
      timeseries('Cache hit ratio', 'Share of cacheable requests answered from the response cache (exact or semantic).', [
        [`sum(rate(sluice_cache_hits_total{${I}}${W})) / (sum(rate(sluice_cache_hits_total{${I}}${W})) + sum(rate(sluice_cache_misses_total{${I}}${W})))`, 'hit ratio'],
      ], { unit: 'percentunit', max: 1, w: 6 }),
      timeseries('Tokens saved/s', 'Tokens not generated, by what answered instead: the cache, its semantic stage, a shared generation.', [
        [`sum by (by) (rate(sluice_saved_tokens_total{${IM}}${W}))`, '{{by}}'],
      ], { stack: true, w: 6 }),
      stat('Spent in range (USD)', 'Estimated spend of the tokens charged in the selected range, at the routes\' prices.', [
        [`sum(increase(sluice_spent_usd_total{${IM}}[$__range]))`, 'spent'],
      ], { unit: 'currencyUSD', decimals: 2, w: 6, h: 6, graph: false }),
      stat('Saved in range (USD)', 'Estimated cost of the tokens the cache and coalescing saved in the selected range.', [
        [`sum(increase(sluice_saved_usd_total{${IM}}[$__range]))`, 'saved'],
      ], { unit: 'currencyUSD', decimals: 2, w: 6, h: 6, graph: false }),
      timeseries('Saved USD/h by model', 'Estimated money saved per hour, by model and by what answered instead.', [
        [`sum by (model, by) (rate(sluice_saved_usd_total{${IM}}${W})) * 3600`, '{{model}} {{by}}'],
      ], { unit: 'currencyUSD', w: 6, h: 6 }),
      timeseries('Guardrail findings/s', 'Guardrail findings per second, by kind and action (block, redact, flag).', [
        [`sum by (kind, action) (rate(sluice_guardrail_findings_total{${I}}${W}))`, '{{kind}} {{action}}'],
      ], { unit: 'ops', w: 6, h: 6 }),
    ],
  },
  {
    title: 'Errors',
    panels: [
      timeseries('Errors/s by reason (status >= 400)', 'Requests answered with a status of 400 or more, by status and reason code.', [
        [`sum by (status, reason) (rate(sluice_requests_total{${IM}, status=~"[4-9].."}${W}))`, '{{status}} {{reason}}'],
      ], { unit: 'reqps', w: 12 }),
      table('Errors in the time range', 'Requests with status >= 400 over the whole selected range, by status and reason.', `sort_desc(sum by (status, reason) (increase(sluice_requests_total{${IM}, status=~"[4-9].."}[$__range])))`, { w: 12 }),
      timeseries('5xx ratio by model', 'Share of each model alias\'s requests answered with a 5xx status.', [
        [`sum by (model) (rate(sluice_requests_total{${IM}, status=~"5.."}${W})) / sum by (model) (rate(sluice_requests_total{${IM}}${W}))`, '{{model}}'],
      ], { unit: 'percentunit', w: 12 }),
      timeseries('Upstream error ratio by backend', 'Share of upstream requests without a usable answer (connect failure, 5xx, timeout, broken stream), per backend.', [
        [`sum by (backend) (rate(sluice_upstream_errors_total{${I}}${W})) / sum by (backend) (rate(sluice_upstream_requests_total{${I}}${W}))`, '{{backend}}'],
      ], { unit: 'percentunit', w: 12 }),
    ],
  },
  {
    title: 'Upstreams',
    panels: [
      timeseries('Upstream in flight', 'Upstream requests open now, per backend.', [
        [`sum by (backend) (sluice_upstream_in_flight{${I}})`, '{{backend}}'],
      ], { w: 6 }),
      timeseries('Upstream requests/s', 'Upstream requests finished per second, per backend.', [
        [`sum by (backend) (rate(sluice_upstream_requests_total{${I}}${W}))`, '{{backend}}'],
      ], { unit: 'reqps', w: 6 }),
      timeseries('Upstream latency p95', 'p95 upstream request time until its answer ended, per backend.', [
        [q(0.95, 'sluice_upstream_duration_seconds', ['backend'], I), '{{backend}}'],
      ], { unit: 's', w: 6 }),
      timeseries('Upstream errors/s', 'Upstream requests without a usable answer per second, per backend.', [
        [`sum by (backend) (rate(sluice_upstream_errors_total{${I}}${W}))`, '{{backend}}'],
      ], { unit: 'reqps', w: 6 }),
    ],
  },
  {
    title: 'Resources',
    panels: [
      timeseries('CPU', 'CPU time per second (1 = one core busy), per instance.', [
        [`rate(process_cpu_seconds_total{${I}}${W})`, '{{instance}}'],
      ], { unit: 'short', w: 6 }),
      timeseries('Memory', 'Resident (and virtual) memory, per instance.', [
        [`process_resident_memory_bytes{${I}}`, '{{instance}} rss'],
        [`process_virtual_memory_bytes{${I}}`, '{{instance}} virtual'],
      ], { unit: 'bytes', w: 6 }),
      timeseries('File descriptors', 'Open file descriptors against the limit, per instance.', [
        [`process_open_fds{${I}}`, '{{instance}} open'],
        [`process_max_fds{${I}}`, '{{instance}} max'],
      ], { w: 6 }),
      stat('Fd use', 'Highest share of the fd limit in use among the selected instances.', [
        [`max(process_open_fds{${I}} / process_max_fds{${I}})`, 'fds'],
      ], { unit: 'percentunit', steps: [[null, 'green'], [0.7, 'orange'], [0.9, 'red']], w: 3, h: 8 }),
      stat('Uptime', 'Time since the most recently started selected instance started.', [
        [`min(time() - process_start_time_seconds{${I}})`, 'uptime'],
      ], { unit: 's', w: 3, h: 8, graph: false }),
      table('Build', 'Version and compiler of each instance.', `max by (instance, version, compiler) (sluice_build_info{${I}})`, { w: 8, h: 6, hide: ['Time', 'Value'] }),
      stat('GPUs', 'GPUs visible through NVML, per instance (0 without NVML).', [
        [`sum by (instance) (sluice_gpu_devices{${I}})`, '{{instance}}'],
      ], { w: 4, h: 6, graph: false }),
      timeseries('GPU utilisation', 'GPU busy time over NVML\'s last sample period, per instance and GPU (only hosts with GPUs).', [
        [`max by (instance, gpu) (sluice_gpu_utilization_ratio{${I}})`, '{{instance}} gpu{{gpu}}'],
      ], { unit: 'percentunit', max: 1, w: 6, h: 6 }),
      timeseries('GPU memory', 'GPU memory used as a share of the total, per instance and GPU.', [
        [`max by (instance, gpu) (sluice_gpu_memory_used_bytes{${I}}) / max by (instance, gpu) (sluice_gpu_memory_total_bytes{${I}})`, '{{instance}} gpu{{gpu}}'],
      ], { unit: 'percentunit', max: 1, w: 6, h: 6 }),
    ],
  },
  {
    title: 'Infrastructure',
    panels: [
      upStat('Redis up', 'Limiter Redis connections up, per instance.', `min by (instance) (sluice_redis_up{${I}})`, '{{instance}}', { w: 4, h: 6 }),
      timeseries('Redis connections', 'Redis connections (one per worker) by state, and reconnects.', [
        [`sum by (state) (sluice_redis_connections{${I}})`, '{{state}}'],
        [`sum(increase(sluice_redis_reconnects_total{${I}}${W}))`, 'reconnects'],
      ], { w: 8, h: 6 }),
      upStat('History backend up', 'The request-history database is reachable and writable, per instance and backend.', `min by (instance, backend) (sluice_history_backend_up{${I}})`, '{{instance}} {{backend}}', { w: 4, h: 6 }),
      upStat('Events up', 'The Kafka event producer is connected, per instance.', `min by (instance) (sluice_events_up{${I}})`, '{{instance}}', { w: 4, h: 6 }),
      stat('History drops', 'History rows dropped in the selected range (queue full). Should be 0.', [
        [`sum(increase(sluice_history_rows_dropped_total{${I}}[$__range]))`, 'dropped'],
      ], { steps: [[null, 'green'], [1, 'red']], w: 4, h: 6, graph: false, decimals: 0 }),
      timeseries('History rows/s', 'History rows written and dropped per second, and batches written.', [
        [`sum(rate(sluice_history_rows_written_total{${I}}${W}))`, 'written'],
        [`sum(rate(sluice_history_rows_dropped_total{${I}}${W}))`, 'dropped'],
        [`sum(rate(sluice_history_batches_total{${I}}${W}))`, 'batches'],
      ], { unit: 'ops' }),
      timeseries('History queue', 'History rows waiting to be written, per instance.', [
        [`sum by (instance) (sluice_history_queue_rows{${I}})`, '{{instance}}'],
      ]),
      timeseries('History write errors and reconnects', 'Failed history writes per second and database reconnects.', [
        [`sum(rate(sluice_history_write_errors_total{${I}}${W}))`, 'write errors/s'],
        [`sum(increase(sluice_history_reconnects_total{${I}}${W}))`, 'reconnects'],
      ]),
      timeseries('Events/s', 'Request events produced, delivered to Kafka, failed, written to the fallback file, and dropped, per second.', [
        [`sum(rate(sluice_events_produced_total{${I}}${W}))`, 'produced'],
        [`sum(rate(sluice_events_delivered_total{${I}}${W}))`, 'delivered'],
        [`sum(rate(sluice_events_failed_total{${I}}${W}))`, 'failed'],
        [`sum(rate(sluice_events_fallback_total{${I}}${W}))`, 'fallback'],
        [`sum(rate(sluice_events_dropped_total{${I}}${W}))`, 'dropped'],
      ], { unit: 'ops', w: 12 }),
      timeseries('Events queue', 'Events waiting to be delivered, per instance.', [
        [`sum by (instance) (sluice_events_queue{${I}})`, '{{instance}}'],
      ], { w: 12 }),
    ],
  },
];

// ---- layout --------------------------------------------------------------------------------

function layout(rows) {
  const panels = [];
  let id = 1;
  let y = 0;
  for (const row of rows) {
    panels.push({ type: 'row', title: row.title, id: id++, collapsed: false, gridPos: { h: 1, w: 24, x: 0, y }, panels: [] });
    y += 1;
    // Flow panels left to right; a panel that does not fit starts a new line below the
    // tallest panel of the line.
    let x = 0;
    let lineH = 0;
    for (const p of row.panels) {
      const { w, h, ...rest } = p;
      if (x + w > 24) {
        y += lineH;
        x = 0;
        lineH = 0;
      }
      panels.push({ id: id++, datasource: DS, gridPos: { h, w, x, y }, ...rest });
      x += w;
      lineH = Math.max(lineH, h);
    }
    y += lineH;
  }
  return panels;
}

function variable(name, label, query, extra = {}) {
  return {
    name,
    label,
    type: 'query',
    datasource: DS,
    query, // the string form: Grafana 8 to 11 all read it (10+ migrate it to their editor)
    definition: query,
    refresh: 2,
    includeAll: true,
    multi: true,
    allValue: '.*',
    current: { selected: true, text: ['All'], value: ['$__all'] },
    options: [],
    regex: '',
    sort: 1,
    hide: 0,
    skipUrlSync: false,
    ...extra,
  };
}

export function dashboard() {
  return {
    title: 'sluice',
    uid: 'sluice-gateway',
    description: 'sluice LLM gateway: traffic, latency, limits, errors, upstreams, resources and infrastructure. Generated by deploy/grafana/generate-dashboard.mjs.',
    tags: ['sluice', 'llm-gateway'],
    timezone: '',
    editable: true,
    graphTooltip: 1,
    fiscalYearStartMonth: 0,
    liveNow: false,
    refresh: '30s',
    schemaVersion: 38,
    version: 1,
    time: { from: 'now-1h', to: 'now' },
    timepicker: {},
    weekStart: '',
    links: [],
    annotations: {
      list: [
        {
          builtIn: 1,
          datasource: { type: 'grafana', uid: '-- Grafana --' },
          enable: true,
          hide: true,
          iconColor: 'rgba(0, 211, 255, 1)',
          name: 'Annotations & Alerts',
          type: 'dashboard',
        },
      ],
    },
    templating: {
      list: [
        {
          name: 'DS_PROMETHEUS',
          label: 'Data source',
          type: 'datasource',
          query: 'prometheus',
          current: {},
          hide: 0,
          includeAll: false,
          multi: false,
          options: [],
          refresh: 1,
          regex: '',
          skipUrlSync: false,
        },
        variable('instance', 'Instance', 'label_values(sluice_build_info, instance)'),
        variable('model', 'Model', 'label_values(sluice_requests_total{instance=~"$instance"}, model)'),
      ],
    },
    panels: layout(ROWS),
  };
}

export const DASHBOARD_PATH = path.join(path.dirname(fileURLToPath(import.meta.url)), 'sluice-dashboard.json');

export function render() {
  return JSON.stringify(dashboard(), null, 2) + '\n';
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const text = render();
  if (process.argv.includes('--check')) {
    const current = fs.existsSync(DASHBOARD_PATH) ? fs.readFileSync(DASHBOARD_PATH, 'utf8') : '';
    if (current !== text) {
      process.stderr.write(`${DASHBOARD_PATH} is not what generate-dashboard.mjs writes: run node ${path.relative(process.cwd(), fileURLToPath(import.meta.url))}\n`);
      process.exit(1);
    }
    process.stdout.write('sluice-dashboard.json is up to date\n');
  } else {
    fs.writeFileSync(DASHBOARD_PATH, text);
    process.stdout.write(`wrote ${DASHBOARD_PATH}\n`);
  }
}
