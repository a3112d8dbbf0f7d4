#!/usr/bin/env node
// Checks a Grafana dashboard's PromQL (and optionally a Prometheus rules file) against a
// real Prometheus text page: every metric a query uses must be exposed, and every label a
// query relies on must exist on that metric.
//
//   node check-dashboard.mjs [options] PAGE
//
//   PAGE                 a Prometheus text-format page: a file path or an http(s) URL
//                        (e.g. http://127.0.0.1:8080/metrics)
//   --dashboard FILE     the dashboard JSON (default: sluice-dashboard.json next to this file)
//   --rules FILE         also check the `expr:` of a Prometheus rules file (repeatable)
//   --optional PATTERN   a metric (glob, `*` = any characters) that may be absent from the
//                        page without failing, e.g. 'sluice_gpu_*' on a host without GPUs
//                        (repeatable)
//   --verbose            print every query with the metrics it uses
//
// Exit status: 0 nothing missing, 1 something missing (listed), 2 usage or load error.
//
// No dependencies (Node 20). Everything is exported so tests can import it:
//   parsePage(text)           -> page model (families, series and their label names)
//   parsePromQL(expr)         -> AST (throws PromQLSyntaxError)
//   metricNames(expr)         -> metric names used by the expression (as written)
//   familyName(name)          -> the family a sample name belongs to (strips _bucket/_sum/_count)
//   dashboardQueries(json)    -> [{panel, refId, expr, kind}] for every target and variable
//   rulesQueries(yamlText)    -> [{panel, refId, expr, kind}] for every rule expr
//   checkExpr(expr, page)     -> {metrics: [...], problems: [...]}
//   checkQueries(queries, page, {optional}) -> {checked, metrics, problems, skipped}
//   checkDashboard(json, page, opts) -> same, for a dashboard
//
// How an expression is checked: it is parsed into an AST (a real PromQL grammar, not a
// regular expression), then evaluated against the page as a "label calculus": each node
// yields the set of label names its result series can carry. A selector yields the label
// names seen on that metric's samples in the page (plus `instance` and `job`, which
// Prometheus adds at scrape). Then:
//   - a selector's metric must exist in the page (as a `# TYPE` family or a sample name;
//     `x_bucket`, `x_sum`, `x_count` resolve to histogram/summary family `x`);
//   - a matcher's label `{label="..."}` must exist on that metric;
//   - `by (l)` / `without (l)` labels must exist on the aggregated expression (so `le`
//     is accepted only over `_bucket` series), and the aggregation's result carries only
//     the `by` labels, which is what a surrounding `by` or `on` is checked against;
//   - `on (l)` labels must exist on both sides; `group_left (l)` / `group_right (l)` on the
//     side they are copied from; `ignoring (l)` on at least one side;
//   - `histogram_quantile` needs `le` on its vector and removes it; `label_replace` and
//     `label_join` need their source labels and add their destination label.
// Grafana variables ($model, ${model:regex}, [[model]], $__rate_interval...) are replaced
// by neutral values before parsing; inside strings they are left alone.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

// ---- PromQL vocabulary ---------------------------------------------------------------

export const AGGREGATIONS = new Set([
  'sum', 'min', 'max', 'avg', 'group', 'stddev', 'stdvar', 'count', 'count_values',
  'bottomk', 'topk', 'quantile', 'limitk', 'limit_ratio',
]);

// Functions and the 0-based index of the argument whose labels the result keeps
// (-1: the result has no labels, e.g. scalar(), time(), vector()).
const FUNCTIONS = new Map(
  Object.entries({
    abs: 0, absent: 0, absent_over_time: 0, acos: 0, acosh: 0, asin: 0, asinh: 0, atan: 0,
    atanh: 0, avg_over_time: 0, ceil: 0, changes: 0, clamp: 0, clamp_max: 0, clamp_min: 0,
    cos: 0, cosh: 0, count_over_time: 0, day_of_month: 0, day_of_week: 0, day_of_year: 0,
    days_in_month: 0, deg: 0, delta: 0, deriv: 0, exp: 0, floor: 0, group_over_time: 0,
    histogram_count: 0, histogram_fraction: 2, histogram_quantile: 1, histogram_sum: 0,
    histogram_stddev: 0, histogram_stdvar: 0, holt_winters: 0, double_exponential_smoothing: 0,
    hour: 0, idelta: 0, increase: 0, irate: 0, label_join: 0, label_replace: 0,
    last_over_time: 0, ln: 0, log10: 0, log2: 0, mad_over_time: 0, max_over_time: 0,
    min_over_time: 0, minute: 0, month: 0, pi: -1, predict_linear: 0, present_over_time: 0,
    quantile_over_time: 1, rad: 0, rate: 0, resets: 0, round: 0, scalar: -1, sgn: 0, sin: 0,
    sinh: 0, sort: 0, sort_by_label: 0, sort_by_label_desc: 0, sort_desc: 0, sqrt: 0,
    stddev_over_time: 0, stdvar_over_time: 0, sum_over_time: 0, tan: 0, tanh: 0, time: -1,
    timestamp: 0, vector: -1, year: 0,
  }),
);
const SCALAR_FUNCTIONS = new Set(['scalar', 'time', 'pi']);

const SET_OPS = new Set(['and', 'or', 'unless']);
const COMPARISONS = new Set(['==', '!=', '<=', '<', '>=', '>']);
// Binary operator precedence, lowest first; '^' is right-associative.
const PRECEDENCE = new Map([
  ['or', 1], ['and', 2], ['unless', 2],
  ['==', 3], ['!=', 3], ['<=', 3], ['<', 3], ['>=', 3], ['>', 3],
  ['+', 4], ['-', 4], ['*', 5], ['/', 5], ['%', 5], ['atan2', 5], ['^', 6],
]);

// Labels every scraped series carries (added by Prometheus at scrape time).
export const TARGET_LABELS = ['instance', 'job'];
// Series Prometheus makes itself for every target.
export const SYNTHETIC_METRICS = new Set([
  'up', 'scrape_duration_seconds', 'scrape_samples_scraped', 'scrape_samples_post_metric_relabeling',
  'scrape_series_added',
]);

export class PromQLSyntaxError extends Error {}

// ---- Grafana variables -----------------------------------------------------------------

// Replaces Grafana template variables outside string literals: interval variables by a
// duration, anything else by a number (a variable outside a string can only stand for a
// value there). Strings are kept as they are (`{model=~"$model"}` stays valid).
export function substituteVariables(expr) {
  let out = '';
  let i = 0;
  const durationVars = /^(__rate_interval|__interval|__range|__interval_ms|__range_s|__range_ms)$/;
  while (i < expr.length) {
    const c = expr[i];
    if (c === '"' || c === "'" || c === '`') {
      const end = endOfString(expr, i);
      out += expr.slice(i, end);
      i = end;
      continue;
    }
    let m;
    const rest = expr.slice(i);
    if ((m = rest.match(/^\$\{([A-Za-z0-9_]+)(?::[^}]*)?\}/)) || (m = rest.match(/^\$([A-Za-z0-9_]+)/)) ||
        (m = rest.match(/^\[\[([A-Za-z0-9_]+)(?::[^\]]*)?\]\]/))) {
      const name = m[1];
      if (durationVars.test(name)) out += name.endsWith('_ms') || name.endsWith('_s') ? '300' : '5m';
      else out += '1';
      i += m[0].length;
      continue;
    }
    out += c;
    i += 1;
  }
  return out;
}

function endOfString(s, start) {
  const q = s[start];
  let i = start + 1;
  while (i < s.length) {
    if (s[i] === '\\' && q !== '`') {
      i += 2;
      continue;
    }
    if (s[i] === q) return i + 1;
    i += 1;
  }
  throw new PromQLSyntaxError(`unterminated string starting at offset ${start}`);
}

// ---- lexer ---------------------------------------------------------------------------

const DURATION_RE = /^(?:[0-9]+(?:ms|[smhdwy]))+/;
const NUMBER_RE = /^(?:0[xX][0-9a-fA-F]+|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)/;
const IDENT_RE = /^[A-Za-z_:][A-Za-z0-9_:]*/;
const OPERATORS = ['==', '!=', '<=', '>=', '=~', '!~', '<', '>', '=', '+', '-', '*', '/', '%', '^', '@'];

export function tokenize(expr) {
  const toks = [];
  let i = 0;
  let inRange = false;
  while (i < expr.length) {
    const c = expr[i];
    if (/\s/.test(c)) {
      i += 1;
      continue;
    }
    if (c === '#') {
      while (i < expr.length && expr[i] !== '\n') i += 1;
      continue;
    }
    const rest = expr.slice(i);
    if (c === '"' || c === "'" || c === '`') {
      const end = endOfString(expr, i);
      toks.push({ t: 'str', v: unquote(expr.slice(i, end)), pos: i });
      i = end;
      continue;
    }
    let m;
    if ((m = rest.match(DURATION_RE)) && !/^[A-Za-z0-9_]/.test(rest.slice(m[0].length))) {
      toks.push({ t: 'dur', v: m[0], pos: i });
      i += m[0].length;
      continue;
    }
    if ((m = rest.match(NUMBER_RE))) {
      toks.push({ t: 'num', v: m[0], pos: i });
      i += m[0].length;
      continue;
    }
    if (c === ':' && inRange) {
      // [range:step]: a separator, not the start of a recording-rule name
      toks.push({ t: ':', v: ':', pos: i });
      i += 1;
      continue;
    }
    if ((m = rest.match(IDENT_RE))) {
      toks.push({ t: 'id', v: m[0], pos: i });
      i += m[0].length;
      continue;
    }
    if ('(){}[],:'.includes(c)) {
      if (c === '[') inRange = true;
      if (c === ']') inRange = false;
      toks.push({ t: c, v: c, pos: i });
      i += 1;
      continue;
    }
    const op = OPERATORS.find((o) => rest.startsWith(o));
    if (op) {
      toks.push({ t: 'op', v: op, pos: i });
      i += op.length;
      continue;
    }
    throw new PromQLSyntaxError(`unexpected character '${c}' at offset ${i}`);
  }
  toks.push({ t: 'eof', v: '', pos: expr.length });
  return toks;
}

function unquote(s) {
  if (s[0] === '`') return s.slice(1, -1);
  return s.slice(1, -1).replace(/\\(.)/g, (_, ch) => ({ n: '\n', t: '\t', '\\': '\\', '"': '"', "'": "'" })[ch] ?? ch);
}

// ---- parser --------------------------------------------------------------------------
//
// Node shapes:
//   {type:'num'} {type:'str', value}
//   {type:'selector', name|null, matchers:[{label, op, value}]}
//   {type:'range'|'subquery'|'offset', expr}        (modifiers; labels pass through)
//   {type:'paren', expr} {type:'unary', op, expr}
//   {type:'call', fn, args:[node]}
//   {type:'agg', op, grouping:{kind:'by'|'without', labels}|null, param|null, expr}
//   {type:'binary', op, bool, lhs, rhs, matching:{kind:'on'|'ignoring', labels}|null,
//    group:{kind:'group_left'|'group_right', labels}|null}

export function parsePromQL(expr) {
  const p = new Parser(tokenize(substituteVariables(expr)), expr);
  const node = p.expr(0);
  p.expect('eof');
  return node;
}

class Parser {
  constructor(toks, src) {
    this.toks = toks;
    this.i = 0;
    this.src = src;
  }
  peek(k = 0) {
    return this.toks[this.i + k];
  }
  next() {
    return this.toks[this.i++];
  }
  fail(msg, tok = this.peek()) {
    throw new PromQLSyntaxError(`${msg} at offset ${tok.pos} (near '${this.src.slice(tok.pos, tok.pos + 20)}')`);
  }
  expect(t, v) {
    const tok = this.peek();
    if (tok.t !== t || (v !== undefined && tok.v !== v)) this.fail(`expected ${v ?? (t === 'eof' ? 'end of expression' : t)}, got '${tok.v || tok.t}'`);
    return this.next();
  }
  isId(v, k = 0) {
    const tok = this.peek(k);
    return tok.t === 'id' && tok.v.toLowerCase() === v;
  }

  binaryOp() {
    const tok = this.peek();
    if (tok.t === 'op' && PRECEDENCE.has(tok.v)) return tok.v;
    if (tok.t === 'id') {
      const v = tok.v.toLowerCase();
      if (SET_OPS.has(v) || v === 'atan2') return v;
    }
    return null;
  }

  expr(minPrec) {
    let lhs = this.unary();
    for (;;) {
      const op = this.binaryOp();
      if (!op) return lhs;
      const prec = PRECEDENCE.get(op);
      if (prec < minPrec) return lhs;
      this.next();
      let bool = false;
      if (this.isId('bool')) {
        if (!COMPARISONS.has(op)) this.fail(`'bool' after non-comparison operator '${op}'`);
        this.next();
        bool = true;
      }
      let matching = null;
      let group = null;
      if (this.isId('on') || this.isId('ignoring')) {
        const kind = this.next().v.toLowerCase();
        matching = { kind, labels: this.labelList() };
        if (this.isId('group_left') || this.isId('group_right')) {
          const gk = this.next().v.toLowerCase();
          group = { kind: gk, labels: this.peek().t === '(' ? this.labelList() : [] };
        }
      }
      const rhs = this.expr(op === '^' ? prec : prec + 1);
      lhs = { type: 'binary', op, bool, lhs, rhs, matching, group };
    }
  }

  unary() {
    const tok = this.peek();
    if (tok.t === 'op' && (tok.v === '-' || tok.v === '+')) {
      this.next();
      // -a^b is -(a^b): the operand takes '^' with it.
      return { type: 'unary', op: tok.v, expr: this.expr(PRECEDENCE.get('^')) };
    }
    return this.postfix(this.primary());
  }

  postfix(node) {
    for (;;) {
      const tok = this.peek();
      if (tok.t === '[') {
        this.next();
        this.duration();
        if (this.peek().t === ':') {
          this.next();
          if (this.peek().t !== ']') this.duration();
          this.expect(']');
          node = { type: 'subquery', expr: node };
        } else {
          this.expect(']');
          if (node.type !== 'selector') this.fail('a range [..] applies to a plain selector only (use a subquery [range:step])', tok);
          node = { type: 'range', expr: node };
        }
      } else if (this.isId('offset')) {
        this.next();
        if (this.peek().t === 'op' && (this.peek().v === '-' || this.peek().v === '+')) this.next();
        this.duration();
        node = { type: 'offset', expr: node };
      } else if (tok.t === 'op' && tok.v === '@') {
        this.next();
        if (this.isId('start') || this.isId('end')) {
          this.next();
          this.expect('(');
          this.expect(')');
        } else {
          if (this.peek().t === 'op' && (this.peek().v === '-' || this.peek().v === '+')) this.next();
          this.expect('num');
        }
        node = { type: 'offset', expr: node };
      } else {
        return node;
      }
    }
  }

  duration() {
    const tok = this.peek();
    if (tok.t === 'dur' || tok.t === 'num') return this.next().v;
    this.fail(`expected a duration, got '${tok.v || tok.t}'`);
  }

  labelList() {
    this.expect('(');
    const labels = [];
    while (this.peek().t !== ')') {
      const tok = this.peek();
      if (tok.t !== 'id' && tok.t !== 'str') this.fail(`expected a label name, got '${tok.v || tok.t}'`);
      labels.push(this.next().v);
      if (this.peek().t === ',') this.next();
      else break;
    }
    this.expect(')');
    return labels;
  }

  matchers() {
    this.expect('{');
    const ms = [];
    while (this.peek().t !== '}') {
      const tok = this.peek();
      if (tok.t === 'str' && (this.peek(1).t === ',' || this.peek(1).t === '}')) {
        // {"metric.name"}: a quoted metric name (Prometheus 3).
        this.next();
        ms.push({ label: '__name__', op: '=', value: tok.v });
      } else {
        if (tok.t !== 'id' && tok.t !== 'str') this.fail(`expected a label name, got '${tok.v || tok.t}'`);
        const label = this.next().v;
        const op = this.peek();
        if (op.t !== 'op' || !['=', '!=', '=~', '!~'].includes(op.v)) this.fail(`expected a label matcher operator after '${label}'`);
        this.next();
        const value = this.expect('str').v;
        ms.push({ label, op: op.v, value });
      }
      if (this.peek().t === ',') this.next();
      else break;
    }
    this.expect('}');
    return ms;
  }

  primary() {
    const tok = this.peek();
    if (tok.t === 'num') {
      this.next();
      return { type: 'num' };
    }
    if (tok.t === 'dur') {
      // a bare duration is a number of seconds in recent PromQL; treat as a number
      this.next();
      return { type: 'num' };
    }
    if (tok.t === 'str') {
      this.next();
      return { type: 'str', value: tok.v };
    }
    if (tok.t === '(') {
      this.next();
      const e = this.expr(0);
      this.expect(')');
      return { type: 'paren', expr: e };
    }
    if (tok.t === '{') {
      return { type: 'selector', name: null, matchers: this.matchers(), pos: tok.pos };
    }
    if (tok.t === 'id') {
      const lower = tok.v.toLowerCase();
      if (lower === 'inf' || lower === 'nan') {
        this.next();
        return { type: 'num' };
      }
      if (AGGREGATIONS.has(lower) && (this.peek(1).t === '(' || this.isId('by', 1) || this.isId('without', 1))) {
        return this.aggregation();
      }
      if (this.peek(1).t === '(') {
        if (!FUNCTIONS.has(tok.v)) this.fail(`unknown function '${tok.v}'`);
        this.next();
        this.next();
        const args = [];
        while (this.peek().t !== ')') {
          args.push(this.expr(0));
          if (this.peek().t === ',') this.next();
          else break;
        }
        this.expect(')');
        return { type: 'call', fn: tok.v, args, pos: tok.pos };
      }
      if (['by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'bool', 'offset'].includes(lower)) {
        this.fail(`unexpected keyword '${tok.v}'`);
      }
      this.next();
      const node = { type: 'selector', name: tok.v, matchers: [], pos: tok.pos };
      if (this.peek().t === '{') node.matchers = this.matchers();
      return node;
    }
    this.fail(`unexpected '${tok.v || tok.t}'`);
  }

  aggregation() {
    const op = this.next().v.toLowerCase();
    let grouping = null;
    if (this.isId('by') || this.isId('without')) {
      grouping = { kind: this.next().v.toLowerCase(), labels: this.labelList() };
    }
    this.expect('(');
    let param = null;
    let e = this.expr(0);
    if (this.peek().t === ',') {
      this.next();
      param = e;
      e = this.expr(0);
    }
    this.expect(')');
    if (this.isId('by') || this.isId('without')) {
      if (grouping) this.fail(`'${op}' has two grouping clauses`);
      grouping = { kind: this.next().v.toLowerCase(), labels: this.labelList() };
    }
    return { type: 'agg', op, grouping, param, expr: e };
  }
}

// ---- the text exposition format --------------------------------------------------------

// Returns {families: Map(name -> type), series: Map(sampleName -> Set(labelNames)),
// samples: Map(sampleName -> count)}.
export function parsePage(text) {
  const families = new Map();
  const series = new Map();
  const samples = new Map();
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (line === '') continue;
    if (line.startsWith('#')) {
      const m = line.match(/^#\s+TYPE\s+(\S+)\s+(\S+)/);
      if (m) families.set(m[1], m[2]);
      continue;
    }
    const nm = line.match(/^[A-Za-z_:][A-Za-z0-9_:]*/);
    if (!nm) continue;
    const name = nm[0];
    const labels = new Set();
    let i = name.length;
    if (line[i] === '{') {
      i += 1;
      for (;;) {
        while (line[i] === ' ' || line[i] === ',') i += 1;
        if (line[i] === '}' || i >= line.length) break;
        const lm = line.slice(i).match(/^[A-Za-z_][A-Za-z0-9_]*/);
        if (!lm) break;
        labels.add(lm[0]);
        i += lm[0].length;
        while (line[i] === ' ') i += 1;
        if (line[i] !== '=') break;
        i += 1;
        while (line[i] === ' ') i += 1;
        if (line[i] !== '"') break;
        i += 1;
        while (i < line.length && line[i] !== '"') i += line[i] === '\\' ? 2 : 1;
        i += 1;
      }
    }
    if (!series.has(name)) series.set(name, new Set());
    for (const l of labels) series.get(name).add(l);
    samples.set(name, (samples.get(name) ?? 0) + 1);
  }
  return { families, series, samples };
}

const HISTOGRAM_SUFFIXES = ['_bucket', '_sum', '_count'];

// The family a sample name belongs to, lexically: x_bucket/x_sum/x_count -> x.
export function familyName(name, page) {
  for (const s of HISTOGRAM_SUFFIXES) {
    if (name.endsWith(s)) {
      const base = name.slice(0, -s.length);
      if (!page) return base;
      const type = page.families.get(base);
      if (type === 'histogram' || type === 'summary' || type === 'gaugehistogram') return base;
    }
  }
  return name;
}

// How a metric name used in a query resolves in the page:
// {found, family, labels: Set|null (null = present but no samples to learn labels from)}.
export function lookupMetric(name, page) {
  if (SYNTHETIC_METRICS.has(name)) return { found: true, family: name, labels: new Set(TARGET_LABELS), synthetic: true };
  const family = familyName(name, page);
  if (page.series.has(name)) return { found: true, family, labels: withTargetLabels(page.series.get(name)) };
  if (page.families.has(name) || family !== name) return { found: true, family, labels: null };
  // A counter declared as `# TYPE x counter` with samples x_total (OpenMetrics style).
  if (name.endsWith('_total') && page.families.get(name.slice(0, -6)) === 'counter') {
    return { found: true, family: name.slice(0, -6), labels: null };
  }
  return { found: false, family: familyName(name), labels: null };
}

function withTargetLabels(set) {
  const s = new Set(set);
  for (const l of TARGET_LABELS) s.add(l);
  return s;
}

// ---- the label calculus ----------------------------------------------------------------

// Every metric name an expression selects (as written, e.g. x_bucket), in order, unique.
export function metricNames(expr) {
  const ast = typeof expr === 'string' ? parsePromQL(expr) : expr;
  const out = [];
  walk(ast, (n) => {
    if (n.type === 'selector') {
      const name = selectorName(n);
      if (name && !out.includes(name)) out.push(name);
    }
  });
  return out;
}

function selectorName(n) {
  if (n.name) return n.name;
  const m = n.matchers.find((x) => x.label === '__name__' && x.op === '=');
  return m ? m.value : null;
}

function walk(n, fn) {
  if (!n || typeof n !== 'object') return;
  fn(n);
  for (const k of ['expr', 'lhs', 'rhs', 'param']) if (n[k]) walk(n[k], fn);
  if (n.args) for (const a of n.args) walk(a, fn);
}

const fmt = (set) => (set.size ? [...set].sort().join(', ') : 'no labels');

// Checks one expression. Returns {metrics: [{name, family, found}], problems: [string],
// notes: [string]}. Parse errors are problems too.
export function checkExpr(expr, page, { optional = [] } = {}) {
  const problems = [];
  const notes = [];
  const metrics = [];
  const isOptional = (name) => optional.some((p) => globMatch(p, name) || globMatch(p, familyName(name)));
  let ast;
  try {
    ast = parsePromQL(expr);
  } catch (e) {
    if (!(e instanceof PromQLSyntaxError)) throw e;
    return { metrics, problems: [`syntax error: ${e.message}`], notes, skipped: [] };
  }
  const skipped = [];

  // Returns {labels: Set|null, scalar: bool, sources: [metric names]}.
  const ev = (n) => {
    switch (n.type) {
      case 'num':
        return { labels: new Set(), scalar: true, sources: [] };
      case 'str':
        return { labels: new Set(), scalar: true, sources: [], str: n.value };
      case 'paren':
      case 'range':
      case 'subquery':
      case 'offset':
      case 'unary':
        return ev(n.expr);
      case 'selector': {
        const name = selectorName(n);
        if (!name) {
          notes.push('a selector without a metric name: its labels cannot be checked');
          return { labels: null, scalar: false, sources: [] };
        }
        const r = lookupMetric(name, page);
        metrics.push({ name, family: r.family, found: r.found });
        if (!r.found) {
          if (isOptional(name)) skipped.push(name);
          else problems.push(`metric ${name} is not exposed${r.family !== name ? ` (nor its family ${r.family})` : ''}`);
          return { labels: null, scalar: false, sources: [name] };
        }
        if (!r.labels) {
          notes.push(`metric ${name} has no samples in the page: its labels cannot be checked`);
          return { labels: null, scalar: false, sources: [name] };
        }
        for (const m of n.matchers) {
          if (m.label === '__name__') continue;
          if (!r.labels.has(m.label)) problems.push(`label ${m.label} is not on metric ${name} (it has: ${fmt(r.labels)})`);
        }
        return { labels: r.labels, scalar: false, sources: [name] };
      }
      case 'call': {
        const args = n.args.map(ev);
        const sources = args.flatMap((a) => a.sources);
        if (SCALAR_FUNCTIONS.has(n.fn)) return { labels: new Set(), scalar: true, sources };
        const idx = FUNCTIONS.get(n.fn);
        if (idx < 0) return { labels: new Set(), scalar: false, sources };
        const v = args[idx] ?? { labels: null, sources: [] };
        let labels = v.labels ? new Set(v.labels) : null;
        const where = `${n.fn}() over ${v.sources.join(', ') || 'its argument'}`;
        if (n.fn === 'histogram_quantile' || n.fn === 'histogram_fraction') {
          if (labels && !labels.has('le')) problems.push(`${where}: label le is missing (aggregate with by (le, ...) over a _bucket series)`);
          if (labels) labels.delete('le');
        } else if (n.fn === 'label_replace' || n.fn === 'label_join') {
          const dst = args[1]?.str;
          const srcs = n.fn === 'label_replace' ? [args[3]?.str] : args.slice(3).map((a) => a.str);
          for (const s of srcs) {
            if (labels && s && !labels.has(s)) problems.push(`${where}: source label ${s} is not there (it has: ${fmt(labels)})`);
          }
          if (labels && dst) labels.add(dst);
        } else if (n.fn === 'absent' || n.fn === 'absent_over_time') {
          labels = null; // labels from the equality matchers; nothing to check downstream
        }
        return { labels, scalar: false, sources };
      }
      case 'agg': {
        const inner = ev(n.expr);
        if (n.param) ev(n.param);
        const where = `${n.op} ${n.grouping ? `${n.grouping.kind} (${n.grouping.labels.join(', ')})` : ''} over ${inner.sources.join(', ') || 'an expression'}`;
        if (n.grouping && inner.labels) {
          for (const l of n.grouping.labels) {
            if (!inner.labels.has(l)) problems.push(`${where.replace(/\s+/g, ' ')}: label ${l} is not there (it has: ${fmt(inner.labels)})`);
          }
        }
        let labels;
        if (['topk', 'bottomk', 'limitk', 'limit_ratio'].includes(n.op)) labels = inner.labels;
        else if (!n.grouping) labels = new Set();
        else if (n.grouping.kind === 'by') labels = new Set(n.grouping.labels);
        else labels = inner.labels ? new Set([...inner.labels].filter((l) => !n.grouping.labels.includes(l))) : null;
        if (n.op === 'count_values' && n.param?.type === 'str' && labels) labels.add(n.param.value);
        return { labels, scalar: false, sources: inner.sources };
      }
      case 'binary': {
        const l = ev(n.lhs);
        const r = ev(n.rhs);
        const sources = [...l.sources, ...r.sources];
        if (l.scalar && r.scalar) return { labels: new Set(), scalar: true, sources };
        if (l.scalar) return { labels: r.labels, scalar: false, sources };
        if (r.scalar) return { labels: l.labels, scalar: false, sources };
        const side = (v) => v.sources.join(', ') || 'an expression';
        if (n.matching) {
          const { kind, labels } = n.matching;
          for (const lab of labels) {
            const inL = !l.labels || l.labels.has(lab);
            const inR = !r.labels || r.labels.has(lab);
            if (kind === 'on') {
              if (!inL) problems.push(`on (${lab}): label ${lab} is not on the left side (${side(l)}; it has: ${fmt(l.labels)})`);
              if (!inR) problems.push(`on (${lab}): label ${lab} is not on the right side (${side(r)}; it has: ${fmt(r.labels)})`);
            } else if (!inL && !inR) {
              problems.push(`ignoring (${lab}): label ${lab} is on neither side`);
            }
          }
        }
        if (n.group) {
          const from = n.group.kind === 'group_left' ? r : l;
          for (const lab of n.group.labels) {
            if (from.labels && !from.labels.has(lab)) {
              problems.push(`${n.group.kind} (${lab}): label ${lab} is not on ${side(from)} (it has: ${fmt(from.labels)})`);
            }
          }
        }
        const op = n.op;
        if (op === 'or') return { labels: l.labels && r.labels ? new Set([...l.labels, ...r.labels]) : null, scalar: false, sources };
        if (op === 'and' || op === 'unless') return { labels: l.labels, scalar: false, sources };
        const many = n.group?.kind === 'group_right' ? r : l;
        let labels = many.labels ? new Set(many.labels) : null;
        if (n.group) {
          if (labels) for (const lab of n.group.labels) labels.add(lab);
        } else if (n.matching?.kind === 'on') {
          labels = new Set(n.matching.labels);
        } else if (n.matching?.kind === 'ignoring' && labels) {
          for (const lab of n.matching.labels) labels.delete(lab);
        }
        return { labels, scalar: false, sources };
      }
      default:
        throw new Error(`unknown node ${n.type}`);
    }
  };
  ev(ast);
  return { metrics, problems, notes: [...new Set(notes)], skipped: [...new Set(skipped)] };
}

export function globMatch(pattern, name) {
  const re = new RegExp(`^${pattern.split('*').map((s) => s.replace(/[.+?^${}()|[\]\\]/g, '\\$&')).join('.*')}$`);
  return re.test(name);
}

// ---- where the queries are -------------------------------------------------------------

// Every PromQL query of a dashboard: panel targets (rows, collapsed rows' panels, library
// panels inlined), and the `label_values(...)`/`query_result(...)` queries of variables.
export function dashboardQueries(dash) {
  const out = [];
  const visit = (panels, parentRow) => {
    let row = parentRow; // an expanded row's panels follow it as siblings
    for (const p of panels ?? []) {
      if (p.type === 'row') {
        row = p.title;
        visit(p.panels, p.title);
        continue;
      }
      for (const t of p.targets ?? []) {
        if (typeof t.expr === 'string' && t.expr.trim() !== '') {
          out.push({ kind: 'panel', panel: `${row ? `${row} / ` : ''}${p.title ?? `panel ${p.id}`}`, refId: t.refId ?? '', expr: t.expr });
        }
      }
      if (p.panels) visit(p.panels, row);
    }
  };
  visit(dash.panels, null);
  for (const r of dash.rows ?? []) visit(r.panels, r.title); // pre-5.0 layout
  for (const v of dash.templating?.list ?? []) {
    if (v.type !== 'query') continue;
    const q = typeof v.query === 'string' ? v.query : v.query?.query;
    if (!q) continue;
    const lv = q.match(/^\s*label_values\(\s*(.*?)\s*,\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$/s);
    if (lv) {
      out.push({ kind: 'variable', panel: `variable $${v.name}`, refId: '', expr: lv[1], label: lv[2] });
      continue;
    }
    const qr = q.match(/^\s*query_result\((.*)\)\s*$/s);
    if (qr) out.push({ kind: 'variable', panel: `variable $${v.name}`, refId: '', expr: qr[1] });
    const mv = q.match(/^\s*(?:metrics|label_names)\(/);
    if (!lv && !qr && !mv) out.push({ kind: 'variable', panel: `variable $${v.name}`, refId: '', expr: q });
  }
  return out;
}

// The `expr:` of every rule in a Prometheus rules file. A small reader for the shapes rule
// files use (`expr: one line`, `expr: |` or `>` block, quoted scalars), not a YAML parser.
export function rulesQueries(text) {
  const out = [];
  const lines = text.split('\n');
  let name = '';
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    const nm = line.match(/^\s*-?\s*(alert|record):\s*(.+?)\s*$/);
    if (nm) name = `${nm[1]} ${nm[2].replace(/^["']|["']$/g, '')}`;
    const m = line.match(/^(\s*)(-\s*)?expr:\s*(.*)$/);
    if (!m) continue;
    const indent = m[1].length + (m[2] ? m[2].length : 0);
    let value = m[3].replace(/\s+#.*$/, '').trim();
    if (/^[|>][-+]?$/.test(value)) {
      const block = [];
      while (i + 1 < lines.length && (lines[i + 1].trim() === '' || lines[i + 1].search(/\S/) > indent)) {
        block.push(lines[++i]);
      }
      value = block.join('\n');
    } else if (value.startsWith('"')) {
      value = JSON.parse(value);
    } else if (value.startsWith("'")) {
      value = value.slice(1, -1).replace(/''/g, "'");
    }
    out.push({ kind: 'rule', panel: name || `rule at line ${i + 1}`, refId: '', expr: value });
  }
  return out;
}

// ---- checking ------------------------------------------------------------------------

// Checks queries from dashboardQueries()/rulesQueries(). Returns
// {checked, metrics: [family names used], problems: [{where, expr, problem}],
//  missing: [metric names not exposed], skipped: [optional names absent], notes}.
export function checkQueries(queries, page, { optional = [] } = {}) {
  const problems = [];
  const notes = [];
  const families = new Set();
  const missing = new Set();
  const skipped = new Set();
  for (const q of queries) {
    const r = checkExpr(q.expr, page, { optional });
    const where = `${q.panel}${q.refId ? ` [${q.refId}]` : ''}`;
    for (const m of r.metrics) {
      families.add(m.family);
      if (!m.found && !r.skipped.includes(m.name)) missing.add(m.name);
    }
    for (const s of r.skipped) skipped.add(s);
    for (const p of r.problems) problems.push({ where, expr: q.expr, problem: p });
    for (const n of r.notes) notes.push({ where, note: n });
    if (q.kind === 'variable' && q.label && r.metrics.length > 0) {
      const lm = lookupMetric(r.metrics[0].name, page);
      if (lm.found && lm.labels && !lm.labels.has(q.label)) {
        problems.push({ where, expr: q.expr, problem: `label_values: label ${q.label} is not on metric ${r.metrics[0].name} (it has: ${fmt(lm.labels)})` });
      }
    }
  }
  return {
    checked: queries.length,
    metrics: [...families].sort(),
    problems,
    missing: [...missing].sort(),
    skipped: [...skipped].sort(),
    notes,
  };
}

export function checkDashboard(dash, page, opts = {}) {
  return checkQueries(dashboardQueries(dash), page, opts);
}

export async function loadPage(source) {
  if (/^https?:\/\//.test(source)) {
    const res = await fetch(source, { signal: AbortSignal.timeout(10000) });
    if (!res.ok) throw new Error(`GET ${source}: HTTP ${res.status}`);
    return res.text();
  }
  return fs.readFileSync(source, 'utf8');
}

// A readable report; `ok` is false when anything is missing.
export function formatReport(result) {
  const lines = [];
  lines.push(`checked ${result.checked} queries using ${result.metrics.length} metric families`);
  if (result.skipped.length) lines.push(`optional, absent from the page (not an error): ${result.skipped.join(', ')}`);
  if (result.missing.length) {
    lines.push(`MISSING metrics (${result.missing.length}):`);
    for (const m of result.missing) lines.push(`  ${m}`);
  }
  const other = result.problems.filter((p) => !/^metric \S+ is not exposed/.test(p.problem));
  if (other.length) {
    lines.push(`PROBLEMS (${other.length}):`);
    for (const p of other) lines.push(`  ${p.where}: ${p.problem}\n    ${p.expr.replace(/\s+/g, ' ')}`);
  }
  if (result.missing.length) {
    lines.push('queries using missing metrics:');
    for (const p of result.problems.filter((x) => /^metric \S+ is not exposed/.test(x.problem))) {
      lines.push(`  ${p.where}: ${p.problem}`);
    }
  }
  for (const n of result.notes) lines.push(`note: ${n.where}: ${n.note}`);
  if (result.problems.length === 0) lines.push('OK: every metric and label the queries use is exposed');
  return lines.join('\n');
}

// ---- command line --------------------------------------------------------------------

async function main(argv) {
  const here = path.dirname(fileURLToPath(import.meta.url));
  let dashboard = path.join(here, 'sluice-dashboard.json');
  const rules = [];
  const optional = [];
  let verbose = false;
  let page = null;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const val = () => {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    if (a === '--dashboard') dashboard = val();
    else if (a === '--rules') rules.push(val());
    else if (a === '--optional') optional.push(val());
    else if (a === '--verbose' || a === '-v') verbose = true;
    else if (a === '--help' || a === '-h') {
      process.stdout.write('usage: check-dashboard.mjs [--dashboard FILE] [--rules FILE]... [--optional GLOB]... [--verbose] PAGE(file|URL)\n');
      return 0;
    } else if (a.startsWith('--')) throw new Error(`unknown option ${a}`);
    else if (page === null) page = a;
    else throw new Error(`unexpected argument ${a}`);
  }
  if (!page) throw new Error('no page given: pass a file with a Prometheus text page, or a /metrics URL');
  const model = parsePage(await loadPage(page));
  if (model.families.size === 0 && model.series.size === 0) throw new Error(`${page} holds no metrics`);
  let dash;
  try {
    dash = JSON.parse(fs.readFileSync(dashboard, 'utf8'));
  } catch (e) {
    throw new Error(`cannot read the dashboard ${dashboard}: ${e.message}`);
  }
  const queries = dashboardQueries(dash);
  for (const r of rules) queries.push(...rulesQueries(fs.readFileSync(r, 'utf8')));
  if (verbose) {
    for (const q of queries) {
      let names;
      try {
        names = metricNames(q.expr).join(', ');
      } catch (e) {
        names = `(syntax error: ${e.message})`;
      }
      process.stdout.write(`${q.panel}${q.refId ? ` [${q.refId}]` : ''}: ${names}\n`);
    }
  }
  const result = checkQueries(queries, model, { optional });
  process.stdout.write(formatReport(result) + '\n');
  return result.problems.length === 0 ? 0 : 1;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (e) => {
      process.stderr.write(`check-dashboard: ${e.message}\n`);
      process.exit(2);
    },
  );
}
