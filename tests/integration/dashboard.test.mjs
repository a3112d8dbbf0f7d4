// The Grafana dashboard and the Prometheus config in deploy/: every query of the dashboard
// and of the alert rules uses metrics and labels a real gateway exposes (checked with
// deploy/grafana/check-dashboard.mjs against a live /metrics page), the page passes
// `promtool check metrics`, the config and rules pass promtool, and a real Prometheus
// scrapes the gateway, loads the rules and runs every dashboard query.
//
// The gateway runs with rate limits counted in a real Redis, the concurrency gate, the
// request history (SQLite) and events (an unreachable broker), so that every metric family
// the dashboard shows is present.
import assert from 'node:assert/strict';
import { execFile, execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import {
  BAD_KEY,
  BIN,
  KEY,
  REPO,
  chat,
  closedPort,
  delay,
  rawRequest,
  sse,
  startGateway,
  startRedis,
  tempDir,
  USER,
  waitFor,
} from './lib.mjs';
import {
  checkExpr,
  checkQueries,
  dashboardQueries,
  formatReport,
  metricNames,
  parsePage,
  parsePromQL,
  PromQLSyntaxError,
  rulesQueries,
  substituteVariables,
} from '../../deploy/grafana/check-dashboard.mjs';
import { render as renderDashboard } from '../../deploy/grafana/generate-dashboard.mjs';

const DASHBOARD = path.join(REPO, 'deploy', 'grafana', 'sluice-dashboard.json');
const PROM_CONFIG = path.join(REPO, 'deploy', 'prometheus', 'prometheus.yml');
const RULES = path.join(REPO, 'deploy', 'prometheus', 'sluice-rules.yml');
const RULES_TEST = path.join(REPO, 'deploy', 'prometheus', 'sluice-rules.test.yml');
const PROMTOOL = process.env.PROMTOOL || 'promtool';
const PROMETHEUS = process.env.PROMETHEUS || 'prometheus';

// Per-GPU families exist only on hosts where NVML finds a GPU; the TLS listener's only with
// `tls` on (listener_tls.test.mjs reads them).
const OPTIONAL = ['sluice_gpu_utilization_ratio', 'sluice_gpu_memory_used_bytes', 'sluice_gpu_memory_total_bytes',
  'sluice_tls_certificate_expiry_timestamp_seconds', 'sluice_tls_handshake_failures_total'];
// Families of the request history and the event producer (their own subsystems).
const HISTORY_EVENTS = /\bsluice_(history|events)_[a-z_]+/;

const dashboard = () => JSON.parse(fs.readFileSync(DASHBOARD, 'utf8'));

// Runs a command with a bounded time; resolves {code, stdout, stderr}.
function run(cmd, args, { input, timeout = 30000 } = {}) {
  return new Promise((resolve, reject) => {
    const child = execFile(cmd, args, { timeout, maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
      if (err && err.code === 'ENOENT') return reject(new Error(`${cmd} is not installed`));
      if (err && err.killed) return reject(new Error(`${cmd} ${args.join(' ')} did not finish within ${timeout} ms`));
      resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, stdout, stderr });
    });
    if (input !== undefined) child.stdin.end(input);
  });
}

// Builds build/sluice when it is missing (never when SLUICE_BIN names another binary).
function ensureBinary() {
  if (fs.existsSync(BIN) || process.env.SLUICE_BIN) return;
  execFileSync('cmake', ['--build', path.join(REPO, 'build'), '-j2', '--target', 'sluice'], { stdio: 'inherit', timeout: 30 * 60 * 1000 });
}

// ---- the checker itself (no processes) ---------------------------------------------------

const PAGE = `# HELP a_requests_total Requests.
# TYPE a_requests_total counter
a_requests_total{model="m",status="200"} 3
# TYPE a_duration_seconds histogram
a_duration_seconds_bucket{model="m",le="0.1"} 1
a_duration_seconds_bucket{model="m",le="+Inf"} 2
a_duration_seconds_sum{model="m"} 0.3
a_duration_seconds_count{model="m"} 2
# TYPE a_up gauge
a_up 1
# TYPE a_backend_requests_total counter
a_backend_requests_total{backend="x"} 1
# TYPE a_declared_only gauge
`;

describe('check-dashboard.mjs', () => {
  const page = parsePage(PAGE);
  const problems = (expr) => checkExpr(expr, page).problems;

  test('extracts metric names, not functions, keywords, labels or variables', () => {
    assert.deepEqual(
      metricNames(
        'histogram_quantile(0.95, sum by (le, model) (rate(a_duration_seconds_bucket{model=~"$model", instance=~"${instance:regex}"}[$__rate_interval])))' +
          ' / on (model) group_left sum without (status) (increase(a_requests_total[1h] offset 5m)) or vector(0)',
      ),
      ['a_duration_seconds_bucket', 'a_requests_total'],
    );
    assert.deepEqual(metricNames('sum(rate(x[5m:30s])) > bool 1 and up == 1 unless {__name__="y"}'), ['x', 'up', 'y']);
  });

  test('accepts the right metrics and labels', () => {
    assert.deepEqual(problems('sum by (model, instance, job) (rate(a_requests_total{status=~"5.."}[5m]))'), []);
    assert.deepEqual(problems('histogram_quantile(0.9, sum by (le, model) (rate(a_duration_seconds_bucket[5m])))'), []);
    assert.deepEqual(problems('sum(rate(a_duration_seconds_sum[5m])) / sum(rate(a_duration_seconds_count[5m]))'), []);
    assert.deepEqual(problems('a_up == 0 and on (instance, job) up == 1'), []);
    assert.deepEqual(problems('label_replace(a_backend_requests_total, "host", "$1", "backend", "(.*)") * on (host) group_left sum by (host) (label_replace(a_up, "host", "x", "", ""))'), []);
  });

  test('reports metrics that are not exposed', () => {
    assert.deepEqual(problems('rate(a_nope_total[5m])'), ['metric a_nope_total is not exposed']);
    assert.match(problems('rate(a_nope_bucket[5m])')[0], /a_nope_bucket is not exposed/);
    // a family declared by # TYPE without samples is exposed (its labels cannot be checked)
    assert.deepEqual(problems('a_declared_only{whatever="1"}'), []);
  });

  test('reports labels the metric does not have: matchers, by, without, on, le, group_left', () => {
    assert.match(problems('a_requests_total{backend="x"}')[0], /label backend is not on metric a_requests_total/);
    assert.match(problems('sum by (backend) (a_requests_total)')[0], /label backend is not there/);
    assert.match(problems('sum without (tier) (a_requests_total)')[0], /label tier is not there/);
    assert.match(problems('sum by (le) (rate(a_duration_seconds_sum[5m]))')[0], /label le is not there/);
    assert.match(problems('histogram_quantile(0.9, sum by (model) (rate(a_duration_seconds_bucket[5m])))')[0], /label le is missing/);
    // an aggregation keeps only its `by` labels: `model` is gone after `sum by (status)`
    assert.match(problems('sum by (model) (sum by (status) (a_requests_total))')[0], /label model is not there \(it has: status\)/);
    assert.equal(problems('a_requests_total / on (backend) a_backend_requests_total').length, 1);
    assert.match(problems('a_requests_total * on (instance) group_left (backend) a_up')[0], /group_left \(backend\)/);
  });

  test('reports syntax errors and unknown functions', () => {
    assert.match(problems('sum(rate(a_requests_total[5m])')[0], /syntax error/);
    assert.match(problems('rated(a_requests_total[5m])')[0], /unknown function 'rated'/);
    assert.match(problems('sum(a_requests_total) by')[0], /syntax error/);
    assert.throws(() => parsePromQL('a{b="c}'), PromQLSyntaxError);
  });

  test('Grafana variables are neutral outside strings and untouched inside', () => {
    assert.equal(substituteVariables('rate(x{m=~"$model"}[$__rate_interval]) > $threshold'), 'rate(x{m=~"$model"}[5m]) > 1');
    assert.equal(substituteVariables('increase(x[${__range}]) * [[factor]]'), 'increase(x[5m]) * 1');
  });

  test('finds the queries of panels in expanded and collapsed rows, variables and rule files', () => {
    const dash = {
      panels: [
        { type: 'row', title: 'R1', panels: [] },
        { type: 'timeseries', title: 'P1', targets: [{ refId: 'A', expr: 'a_up' }] },
        { type: 'row', title: 'R2', collapsed: true, panels: [{ type: 'stat', title: 'P2', targets: [{ refId: 'A', expr: 'a_requests_total' }] }] },
      ],
      templating: { list: [{ type: 'query', name: 'model', query: { query: 'label_values(a_requests_total, model)' } }, { type: 'datasource', name: 'ds' }] },
    };
    const qs = dashboardQueries(dash);
    assert.deepEqual(qs.map((q) => q.panel), ['R1 / P1', 'R2 / P2', 'variable $model']);
    const bad = { templating: { list: [{ type: 'query', name: 'v', query: 'label_values(a_up, model)' }] } };
    assert.match(checkQueries(dashboardQueries(bad), page).problems[0].problem, /label model is not on metric a_up/);
    const rules = rulesQueries('groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: a_up == 0\n      - alert: B\n        expr: |\n          sum(rate(a_requests_total[5m]))\n            > 1\n        for: 1m\n');
    assert.deepEqual(rules.map((r) => [r.panel, r.expr.trim()]), [['alert A', 'a_up == 0'], ['alert B', 'sum(rate(a_requests_total[5m]))\n            > 1']]);
  });
});

// ---- the dashboard file ----------------------------------------------------------------

describe('sluice-dashboard.json', () => {
  test('is what generate-dashboard.mjs writes', () => {
    assert.equal(fs.readFileSync(DASHBOARD, 'utf8'), renderDashboard(), 'run: node deploy/grafana/generate-dashboard.mjs');
  });

  test('is a Grafana dashboard with the datasource, instance and model variables and the six rows', () => {
    const d = dashboard();
    assert.ok(d.schemaVersion >= 36 && d.schemaVersion <= 39, `schemaVersion ${d.schemaVersion}`);
    const vars = Object.fromEntries(d.templating.list.map((v) => [v.name, v]));
    assert.equal(vars.DS_PROMETHEUS.type, 'datasource');
    assert.equal(vars.DS_PROMETHEUS.query, 'prometheus');
    assert.match(vars.instance.query, /^label_values\(sluice_build_info, instance\)$/);
    assert.match(vars.model.query, /^label_values\(sluice_requests_total(\{[^}]*\})?, model\)$/);
    const rows = d.panels.filter((p) => p.type === 'row').map((p) => p.title);
    assert.deepEqual(rows, ['Overview', 'Routing and limits', 'Savings and business', 'Errors', 'Upstreams', 'Resources', 'Infrastructure']);
    const ids = new Set();
    for (const p of d.panels) {
      assert.ok(!ids.has(p.id), `panel id ${p.id} repeated`);
      ids.add(p.id);
      assert.ok(p.gridPos.x >= 0 && p.gridPos.x + p.gridPos.w <= 24, `${p.title}: gridPos ${JSON.stringify(p.gridPos)}`);
      if (p.type === 'row') continue;
      assert.deepEqual(p.datasource, { type: 'prometheus', uid: '${DS_PROMETHEUS}' }, p.title);
      assert.ok(p.targets.length > 0, `${p.title} has no query`);
      for (const t of p.targets) {
        assert.deepEqual(t.datasource, { type: 'prometheus', uid: '${DS_PROMETHEUS}' }, `${p.title} ${t.refId}`);
        // counters only through rate()/increase(); every series filtered by $instance
        for (const m of t.expr.matchAll(/\b(sluice_[a-z_]+_total|process_cpu_seconds_total)\b(\{[^}]*\})?(\[[^\]]*\])?/g)) {
          assert.ok(m[3], `${p.title} ${t.refId}: counter ${m[1]} used without a range (rate/increase): ${t.expr}`);
        }
        for (const name of metricNames(t.expr)) {
          assert.match(t.expr, new RegExp(`${name}\\{[^}]*instance=~"\\$instance"`), `${p.title} ${t.refId}: ${name} not filtered by $instance`);
        }
      }
    }
  });

  test('uses every metric family the gateway documents', () => {
    const used = new Set(dashboardQueries(dashboard()).flatMap((q) => metricNames(q.expr).map((n) => n.replace(/_(bucket|sum|count)$/, ''))));
    const expected = [
      'sluice_requests_total', 'sluice_requests_in_flight', 'sluice_request_duration_seconds', 'sluice_ttft_seconds',
      'sluice_prompt_tokens_total', 'sluice_completion_tokens_total', 'sluice_upstream_in_flight', 'sluice_upstream_requests_total',
      'sluice_upstream_errors_total', 'sluice_upstream_duration_seconds', 'sluice_ratelimit_decisions_total',
      'sluice_ratelimit_counted_total', 'sluice_ratelimit_redis_errors_total', 'sluice_ratelimit_settle_errors_total',
      'sluice_ratelimit_lease_refills_total', 'sluice_ratelimit_settle_batches_total',
      'sluice_ratelimit_backend', 'sluice_ratelimit_backend_up', 'sluice_redis_up', 'sluice_redis_connections',
      'sluice_redis_reconnects_total', 'sluice_tokens_reserved_total', 'sluice_tokens_charged_total', 'sluice_tokens_refunded_total',
      'sluice_queue_depth', 'sluice_gate_in_flight', 'sluice_gate_admitted_total', 'sluice_gate_rejected_total',
      'sluice_gate_demoted_total', 'sluice_queue_wait_seconds', 'sluice_history_backend_up', 'sluice_history_queue_rows',
      'sluice_history_rows_written_total', 'sluice_history_rows_dropped_total', 'sluice_history_write_errors_total',
      'sluice_history_batches_total', 'sluice_history_reconnects_total', 'sluice_events_up', 'sluice_events_queue',
      'sluice_events_produced_total', 'sluice_events_delivered_total', 'sluice_events_failed_total', 'sluice_events_fallback_total',
      'sluice_events_dropped_total', 'process_cpu_seconds_total', 'process_resident_memory_bytes', 'process_virtual_memory_bytes',
      'process_open_fds', 'process_max_fds', 'process_start_time_seconds', 'sluice_build_info', 'sluice_gpu_devices',
      'sluice_gpu_utilization_ratio', 'sluice_gpu_memory_used_bytes', 'sluice_gpu_memory_total_bytes',
    ];
    assert.deepEqual(expected.filter((m) => !used.has(m)), []);
  });
});

// ---- promtool on the files --------------------------------------------------------------

describe('deploy/prometheus', () => {
  test('promtool check config accepts prometheus.yml (and the rules it loads)', async () => {
    const r = await run(PROMTOOL, ['check', 'config', PROM_CONFIG]);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    assert.match(r.stdout + r.stderr, /SUCCESS: 1 rule files found/);
  });

  test('promtool check rules and the rule unit tests pass', async () => {
    const c = await run(PROMTOOL, ['check', 'rules', RULES]);
    assert.equal(c.code, 0, c.stdout + c.stderr);
    const t = await run(PROMTOOL, ['test', 'rules', RULES_TEST]);
    assert.equal(t.code, 0, t.stdout + t.stderr);
  });
});

// ---- against a live gateway and a real Prometheus ------------------------------------------

describe('against a live gateway', () => {
  let redis;
  let gw;
  let page;
  let result;

  before(async () => {
    ensureBinary();
    redis = await startRedis();
    const dir = tempDir('sluice-dash-');
    gw = await startGateway({
      keys: [{ name: 'dash-app', key: KEY, tenant: 'acme', tier: 'gold' }],
      models: [
        // With a canary, so that the routing families have their series too.
        // With a cache, a price and guardrails: the savings row's families.
        { alias: 'demo', provider: 'simulated', max_in_flight: 4, sim: { ttft: '5ms', inter_token: '1ms', jitter: 0 }, canary: { alias: 'demo-v2', weight: 50 },
          cache: { any_temperature: true }, price: { input: 0.15, output: 0.6 }, guardrails: 'screen' },
        { alias: 'demo-v2', provider: 'simulated', sim: { ttft: '5ms', inter_token: '1ms', jitter: 0 } },
      ],
      redis: { url: redis.url, retry_interval: '500ms' },
      rate_limits: {
        backend: 'redis',
        requests: [{ scope: 'key', limit: 1000, window: '1m' }],
        tokens: [{ scope: 'key', limit: 1000000, per: 'minute' }],
      },
      concurrency: { queue_size: 16, tier_priority: { gold: 'premium' } },
      guardrails: [{ name: 'screen' }],
      data_dir: dir,
      history: { backend: 'sqlite', path: path.join(dir, 'history.db') },
      events: { brokers: '127.0.0.1:1' },
    });
    // Samples for every histogram: plain and streamed answers, and a refused request.
    const body = { model: 'demo', messages: USER, max_tokens: 3 };
    for (let i = 0; i < 3; i++) {
      assert.equal((await chat(gw, body)).status, 200);
      const s = await sse(`${gw.url}/v1/chat/completions`, { ...body, stream: true });
      assert.equal(s.status, 200);
      assert.ok(s.done, 'the stream did not end with [DONE]');
    }
    assert.equal((await chat(gw, body, { key: BAD_KEY })).status, 401);
    const r = await rawRequest({ port: gw.adminPort, path: '/metrics' });
    assert.equal(r.status, 200);
    page = r.body;
    const queries = [...dashboardQueries(dashboard()), ...rulesQueries(fs.readFileSync(RULES, 'utf8'))];
    result = checkQueries(queries, parsePage(page), { optional: OPTIONAL });
  });

  after(async () => {
    await gw?.stop();
    await redis?.stop();
  });

  test('the page has samples in the request, TTFT, upstream and limiter families', () => {
    assert.match(page, /^sluice_ttft_seconds_count\{model="demo"\} [1-9]/m);
    assert.match(page, /^sluice_request_duration_seconds_count\{model="demo"\} [1-9]/m);
    assert.match(page, /^sluice_upstream_duration_seconds_count\{backend="[^"]+"\} [1-9]/m);
    assert.match(page, /^sluice_ratelimit_decisions_total\{decision="allowed",reason="ok"\} [1-9]/m);
    assert.match(page, /^# TYPE sluice_queue_wait_seconds histogram$/m);
    assert.match(page, /^sluice_canary_requests_total\{model="demo",set="stable"\} [0-9]/m);
    assert.match(page, /^sluice_backend_up\{backend="simulated:demo-v2"\} 1$/m);
  });

  test('every metric and label the dashboard and the alert rules use is exposed (except history and events)', () => {
    const core = result.problems.filter((p) => !HISTORY_EVENTS.test(p.problem));
    assert.deepEqual(
      core.map((p) => `${p.where}: ${p.problem}`),
      [],
      formatReport({ ...result, problems: core, missing: result.missing.filter((m) => !HISTORY_EVENTS.test(m)) }),
    );
  });

  test('the history and events families the dashboard and the alert rules use are exposed', () => {
    const he = result.problems.filter((p) => HISTORY_EVENTS.test(p.problem));
    assert.deepEqual(
      result.missing.filter((m) => HISTORY_EVENTS.test(m)),
      [],
      `missing from ${BIN}'s /metrics (with history and events configured):\n` + formatReport({ ...result, problems: he, missing: result.missing.filter((m) => HISTORY_EVENTS.test(m)) }),
    );
    assert.deepEqual(he.map((p) => `${p.where}: ${p.problem}`), []);
  });

  test('promtool check metrics accepts the page', async () => {
    const r = await run(PROMTOOL, ['check', 'metrics'], { input: page });
    assert.equal(r.code, 0, `promtool check metrics failed:\n${r.stdout}${r.stderr}`);
  });

  describe('a real Prometheus', () => {
    let prom;
    let promUrl;

    before(async () => {
      const dir = tempDir('sluice-prom-');
      const port = await closedPort();
      promUrl = `http://127.0.0.1:${port}`;
      const config = [
        'global:',
        '  scrape_interval: 1s',
        '  evaluation_interval: 1s',
        'rule_files:',
        `  - ${JSON.stringify(RULES)}`,
        'scrape_configs:',
        '  - job_name: sluice',
        '    metrics_path: /metrics',
        '    scrape_timeout: 1s',
        '    static_configs:',
        `      - targets: ["127.0.0.1:${gw.adminPort}"]`,
        '',
      ].join('\n');
      const configPath = path.join(dir, 'prometheus.yml');
      fs.writeFileSync(configPath, config);
      const check = await run(PROMTOOL, ['check', 'config', configPath]);
      assert.equal(check.code, 0, check.stdout + check.stderr);
      prom = startPrometheus([
        `--config.file=${configPath}`,
        `--storage.tsdb.path=${path.join(dir, 'data')}`,
        `--web.listen-address=127.0.0.1:${port}`,
        '--log.level=warn',
      ]);
      await waitFor(
        async () => {
          const why = prom.failure();
          if (why) throw new Error(`prometheus did not start${why}`); // reported when the wait ends
          return (await fetch(`${promUrl}/-/ready`, { signal: AbortSignal.timeout(2000) })).ok;
        },
        { timeout: 30000, interval: 250, what: `prometheus (pid ${prom.pid}) to be ready on ${promUrl}` },
      );
    });

    after(async () => {
      if (prom) await prom.stop();
    });

    const api = async (p) => {
      const r = await fetch(`${promUrl}${p}`, { signal: AbortSignal.timeout(5000) });
      const j = await r.json();
      return j;
    };

    test('scrapes the gateway: target up, sluice_requests_total queryable', async () => {
      await waitFor(
        async () => {
          const t = await api('/api/v1/targets?state=active');
          const target = t.data.activeTargets.find((x) => x.scrapeUrl === `http://127.0.0.1:${gw.adminPort}/metrics`);
          if (!target) return false;
          if (target.health !== 'up') throw new Error(`target health ${target.health} ${target.lastError}`);
          return true;
        },
        { timeout: 30000, interval: 250, what: `the target 127.0.0.1:${gw.port} to be "up" in ${promUrl}/api/v1/targets` },
      );
      const data = await waitFor(
        async () => {
          const q = await api(`/api/v1/query?query=${encodeURIComponent('sluice_requests_total')}`);
          return q.status === 'success' && q.data.result.length > 0 ? q.data.result : false;
        },
        { timeout: 30000, interval: 250, what: 'sluice_requests_total to return data from Prometheus' },
      );
      const ok = data.find((s) => s.metric.status === '200' && s.metric.stream === 'true');
      assert.ok(ok, JSON.stringify(data));
      assert.equal(ok.metric.job, 'sluice');
      assert.equal(ok.metric.instance, `127.0.0.1:${gw.adminPort}`);
      assert.equal(Number(ok.value[1]), 3);
    });

    test('runs every dashboard query without an error', async () => {
      // Two scrapes at least, so rate() over the window has points.
      await delay(2500);
      const failures = [];
      const empty = [];
      for (const q of dashboardQueries(dashboard())) {
        const expr =
          q.kind === 'variable'
            ? q.expr.replace(/\$instance/g, '.*')
            : q.expr
                .replace(/\$__rate_interval/g, '1m')
                .replace(/\$__range/g, '5m')
                .replace(/\$instance/g, '.*')
                .replace(/\$model/g, '.*');
        const r = await api(`/api/v1/query?query=${encodeURIComponent(expr)}`);
        if (r.status !== 'success') failures.push(`${q.panel} [${q.refId}]: ${r.errorType}: ${r.error}\n    ${expr}`);
        else if (r.data.result.length === 0 && !HISTORY_EVENTS.test(expr) && !OPTIONAL.some((m) => expr.includes(m))) empty.push(`${q.panel} [${q.refId}]`);
      }
      assert.deepEqual(failures, []);
      // Panels that show "No data" on a healthy gateway are only the ratios with no error yet.
      for (const e of empty) assert.match(e, /5xx|Error ratio|GPU/, `no data for ${e}`);
    });

    test('loads the alert rules and evaluates each without an error', async () => {
      const rules = await waitFor(
        async () => {
          const r = await api('/api/v1/rules');
          const all = r.data.groups.flatMap((g) => g.rules);
          return all.length > 0 && all.every((x) => x.health !== 'unknown') ? all : false;
        },
        { timeout: 30000, interval: 250, what: 'Prometheus to evaluate every alert rule once' },
      );
      assert.equal(rules.length, rulesQueries(fs.readFileSync(RULES, 'utf8')).length);
      assert.deepEqual(rules.filter((x) => x.health !== 'ok').map((x) => `${x.name}: ${x.lastError}`), []);
    });
  });
});

// Starts prometheus as a child process; stop() ends it by its pid (SIGTERM, then SIGKILL).
function startPrometheus(args) {
  const child = spawn(PROMETHEUS, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let spawnError = null;
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (out += d));
  child.on('error', (e) => (spawnError = e));
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  const killOnExit = () => {
    try {
      child.kill('SIGKILL');
    } catch {
      /* gone */
    }
  };
  process.on('exit', killOnExit);
  return {
    pid: child.pid,
    failure() {
      if (spawnError) return ` (cannot start ${PROMETHEUS}: ${spawnError.message})`;
      if (child.exitCode !== null || child.signalCode !== null) return ` (it exited: ${child.exitCode ?? child.signalCode}):\n${out.slice(-2000)}`;
      return '';
    },
    async stop() {
      process.off('exit', killOnExit);
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      let timer;
      const done = await Promise.race([exited, new Promise((r) => (timer = setTimeout(() => r(null), 10000)))]);
      clearTimeout(timer);
      if (!done) {
        child.kill('SIGKILL');
        await exited;
      }
    },
  };
}
