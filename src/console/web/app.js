// The sluice web console (docs/console.md). One page, no build step, nothing from another
// origin. It reads and changes the gateway through its own API — /admin/, /metrics, /infra,
// /history — with the admin or viewer key signed in, which it keeps in this tab's session
// storage only. Everything shown is text (textContent), never markup from the server.

const KEY_SLOT = 'sluice.console.key';
const state = {
  key: sessionStorage.getItem(KEY_SLOT) || '',
  listener: 'main', // 'admin': the admin listener, which asks no key
  who: null, // GET /admin/whoami
  page: null,
  timer: 0,
  generation: 0, // bumped on every page change: a late answer for an old page is dropped
};

// ---- DOM -------------------------------------------------------------------------------

// h('td', {class: 'num'}, 'text', child...): children are strings (text nodes) or nodes.
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'text') el.textContent = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}
const $ = (sel, root = document) => root.querySelector(sel);

function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  for (const c of children.flat()) if (c) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

// A table: columns [{label, num?, cell(row) -> string|Node}], or a line saying it is empty.
function table(columns, rows, empty = 'none') {
  if (!rows.length) return h('p', { class: 'empty' }, empty);
  return h(
    'table',
    {},
    h('thead', {}, h('tr', {}, columns.map((c) => h('th', { class: c.num ? 'num' : undefined }, c.label)))),
    h(
      'tbody',
      {},
      rows.map((r) => h('tr', {}, columns.map((c) => h('td', { class: c.num ? 'num' : undefined }, c.cell(r) ?? '')))),
    ),
  );
}

function badge(text, kind = '') {
  return h('span', { class: `badge ${kind}` }, text);
}

function footer(text, error = false) {
  const f = $('#footer');
  f.textContent = text;
  f.className = error ? 'error' : '';
}

// ---- formatting ------------------------------------------------------------------------

const fmt = {
  n(v, digits = 0) {
    if (v === null || v === undefined || Number.isNaN(v)) return '–';
    return Number(v).toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
  },
  ms(v) {
    if (v === null || v === undefined) return '–';
    return v >= 1000 ? `${fmt.n(v / 1000, 2)} s` : `${fmt.n(v, v < 10 ? 1 : 0)} ms`;
  },
  time(ms) {
    if (!ms) return '–';
    const d = new Date(ms);
    return d.toISOString().replace('T', ' ').slice(0, 19);
  },
  age(ms) {
    if (ms < 1000) return `${ms} ms`;
    const s = Math.floor(ms / 1000);
    if (s < 120) return `${s} s`;
    const m = Math.floor(s / 60);
    return m < 120 ? `${m} min` : `${Math.floor(m / 60)} h ${m % 60} min`;
  },
};

// ---- the API ---------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function api(path, { method = 'GET', body } = {}) {
  const headers = {};
  if (state.key) headers.Authorization = `Bearer ${state.key}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: 'no-store',
    credentials: 'omit',
  });
  const text = await res.text();
  let data = text;
  if ((res.headers.get('content-type') || '').includes('json')) {
    try {
      data = JSON.parse(text);
    } catch {
      data = text;
    }
  }
  if (!res.ok) {
    const msg = data && typeof data === 'object' && data.error ? data.error.message : `${res.status} ${res.statusText}`;
    throw new ApiError(res.status, msg);
  }
  return { status: res.status, data };
}

const isAdmin = () => state.who && state.who.role === 'admin';

// ---- sign-in ---------------------------------------------------------------------------

async function start() {
  $('#signout').addEventListener('click', signOut);
  try {
    const env = await api('env.json');
    state.listener = env.data.listener;
  } catch {
    /* an older gateway: the main listener */
  }
  if (state.key || state.listener === 'admin') {
    try {
      state.who = (await api('/admin/whoami')).data;
    } catch (e) {
      // Refused: ask for a key. Anything else (a restart, the network) keeps it.
      if (e.status === 401 || e.status === 403 || state.listener === 'admin') return forget(e.message);
      $('#main').replaceChildren(h('p', { class: 'msg error' }, `${e.message} — reload to try again.`));
      return;
    }
    return enter();
  }
  showSignIn();
}

function showSignIn(error) {
  stopPage();
  $('#nav').hidden = true;
  $('#signout').hidden = true;
  $('#who').textContent = '';
  const input = h('input', { type: 'password', id: 'key', autocomplete: 'off', placeholder: 'sk-…', required: true });
  const msg = h('p', { class: 'msg error', id: 'signin-error' }, error || '');
  const form = h(
    'form',
    {
      class: 'panel signin',
      id: 'signin',
      onsubmit: async (ev) => {
        ev.preventDefault();
        state.key = input.value.trim();
        try {
          state.who = (await api('/admin/whoami')).data;
        } catch (e) {
          state.key = '';
          msg.textContent = e.status === 401 || e.status === 403 ? `Not signed in: ${e.message}` : e.message;
          return;
        }
        sessionStorage.setItem(KEY_SLOT, state.key);
        enter();
      },
    },
    h('h1', {}, 'Sign in'),
    h('p', { class: 'muted' }, 'An admin key (or a viewer key, to read). It is kept in this tab only, until you sign out or close it.'),
    h('label', { for: 'key' }, 'API key'),
    input,
    h('button', { class: 'primary', type: 'submit' }, 'Sign in'),
    msg,
  );
  $('#main').replaceChildren(form);
  input.focus();
}

// Forgets the key (signed out, or refused) and asks for one.
function forget(why) {
  state.key = '';
  state.who = null;
  sessionStorage.removeItem(KEY_SLOT);
  showSignIn(why);
}

function signOut() {
  location.hash = '';
  forget();
}

function enter() {
  const w = state.who;
  $('#who').textContent = `${w.name} (${w.role}) · ${w.instance}`;
  $('#signout').hidden = state.listener === 'admin';
  const nav = $('#nav');
  nav.replaceChildren(...Object.entries(PAGES).map(([id, p]) => h('a', { href: `#${id}`, id: `nav-${id}` }, p.title)));
  nav.hidden = false;
  window.onhashchange = route;
  route();
}

function route() {
  if (!state.who) return;
  const id = location.hash.slice(1) || 'overview';
  const page = Object.hasOwn(PAGES, id) ? id : 'overview';
  for (const a of document.querySelectorAll('#nav a')) a.classList.toggle('active', a.id === `nav-${page}`);
  openPage(page);
}

function stopPage() {
  clearTimeout(state.timer);
  state.timer = 0;
  state.generation++;
}

// A page: {title, build(root) -> refresh()}, polled every `every` ms while it is shown.
function openPage(id) {
  stopPage();
  const gen = state.generation;
  const p = PAGES[id];
  state.page = id;
  document.title = `${p.title} · sluice console`;
  const root = h('section', { id: `page-${id}` }, h('h1', {}, p.title));
  $('#main').replaceChildren(root);
  // Every reading of the page is numbered: an answer that is not the latest one asked (a
  // slow poll overtaken by a click's refresh) is dropped.
  let latest = 0;
  let refresh = null;
  const run = async () => {
    const mine = ++latest;
    await refresh(() => gen === state.generation && mine === latest);
  };
  const failed = (e) => {
    if (gen !== state.generation) return;
    if (e.status === 401) forget('Signed out: the key is no longer valid.');
    else footer(`${p.title}: ${e.message}`, true);
  };
  // Read again now (after a change, a new filter): errors shown as the poll's are.
  const again = () => run().then(() => footer(`Updated ${new Date().toLocaleTimeString()}`), failed);
  refresh = p.build(root, again);
  const tick = async () => {
    if (gen !== state.generation) return;
    // Not while the operator types in this page (a refresh would redraw the field).
    const el = document.activeElement;
    const busy = el && root.contains(el) && el.tagName === 'INPUT' && ['text', 'number', 'password'].includes(el.type);
    if (busy && p.every) {
      state.timer = setTimeout(tick, p.every);
      return;
    }
    try {
      await run();
      footer(`Updated ${new Date().toLocaleTimeString()}`);
    } catch (e) {
      failed(e);
      if (e.status === 401) return;
    }
    if (gen === state.generation && p.every) state.timer = setTimeout(tick, p.every);
  };
  tick();
}

// A line under a form: what a change did or why it failed.
function message(el, text, ok) {
  el.textContent = text;
  el.className = `msg ${ok ? 'ok' : 'error'}`;
}

async function change(msgEl, what, fn) {
  try {
    const r = await fn();
    message(msgEl, what, true);
    return r;
  } catch (e) {
    message(msgEl, e.message, false);
    return null;
  }
}

// ---- overview: this instance's counters from /metrics ----------------------------------

// The samples of a Prometheus text page: [{name, labels, value}].
function parseMetrics(text) {
  const out = [];
  for (const line of text.split('\n')) {
    if (!line || line[0] === '#') continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    if (m[2]) for (const l of m[2].matchAll(/([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
    out.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return out;
}

function summarize(samples) {
  const s = { requests: 0, errors5: 0, errors4: 0, prompt: 0, completion: 0, inFlight: 0, streams: 0, ttft: new Map() };
  for (const x of samples) {
    switch (x.name) {
      case 'sluice_requests_total': {
        s.requests += x.value;
        const code = Number(x.labels.status);
        if (code >= 500) s.errors5 += x.value;
        else if (code >= 400) s.errors4 += x.value;
        break;
      }
      case 'sluice_prompt_tokens_total':
        s.prompt += x.value;
        break;
      case 'sluice_completion_tokens_total':
        s.completion += x.value;
        break;
      case 'sluice_requests_in_flight':
        s.inFlight = x.value;
        break;
      case 'sluice_streams_open':
        s.streams = x.value;
        break;
      case 'sluice_ttft_seconds_bucket': {
        const le = x.labels.le === '+Inf' ? Infinity : Number(x.labels.le);
        s.ttft.set(le, (s.ttft.get(le) || 0) + x.value);
        break;
      }
      default:
    }
  }
  return s;
}

// A quantile of a cumulative histogram (bucket upper bound -> count), interpolated within
// its bucket as Prometheus' histogram_quantile does. In seconds; null without samples.
function quantile(buckets, q) {
  const les = [...buckets.keys()].sort((a, b) => a - b);
  const total = buckets.get(Infinity) || 0;
  if (total <= 0) return null;
  const rank = q * total;
  let prevLe = 0;
  let prevCount = 0;
  for (const le of les) {
    const c = buckets.get(le);
    if (c >= rank) {
      if (le === Infinity) return prevLe;
      return prevLe + ((le - prevLe) * (rank - prevCount)) / Math.max(c - prevCount, 1e-9);
    }
    prevLe = le;
    prevCount = c;
  }
  return prevLe;
}

function bucketDelta(now, then) {
  const d = new Map();
  for (const [le, c] of now) d.set(le, c - ((then && then.get(le)) || 0));
  return d;
}

function card(id, label) {
  return h('div', { class: 'card', id }, h('div', { class: 'label' }, label), h('div', { class: 'value' }, '–'), h('div', { class: 'sub' }, ''));
}
function setCard(root, id, value, sub = '') {
  const c = $(`#${id}`, root);
  $('.value', c).textContent = value;
  $('.sub', c).textContent = sub;
}

function sparkline(values, color) {
  const w = 300;
  const hgt = 40;
  const max = Math.max(...values, 1e-9);
  const pts = values.map((v, i) => `${((i / Math.max(values.length - 1, 1)) * w).toFixed(1)},${(hgt - (v / max) * (hgt - 4) - 2).toFixed(1)}`);
  return svg('svg', { class: 'spark', viewBox: `0 0 ${w} ${hgt}`, preserveAspectRatio: 'none' }, svg('polyline', { points: pts.join(' '), fill: 'none', stroke: color, 'stroke-width': 1.5 }));
}

function buildOverview(root) {
  const history = []; // {t, s}: the last two minutes of polls
  root.append(
    h('p', { class: 'muted' }, 'This instance, from its own counters (/metrics); rates over the last minute.'),
    h(
      'div',
      { class: 'cards' },
      card('ov-rps', 'Requests/s'),
      card('ov-errors', 'Errors/s (5xx)'),
      card('ov-ttft', 'Time to first token'),
      card('ov-tokens', 'Tokens/s'),
      card('ov-inflight', 'In flight'),
      card('ov-total', 'Requests since start'),
    ),
    h('div', { class: 'panel' }, h('div', { class: 'label muted' }, 'Requests/s, last 2 minutes'), h('div', { id: 'ov-spark' })),
  );
  return async (current) => {
    const { data } = await api('/metrics');
    if (!current()) return;
    const s = summarize(parseMetrics(data));
    const t = performance.now();
    history.push({ t, s });
    while (history.length > 2 && t - history[0].t > 120000) history.shift();
    const base = history.find((x) => t - x.t <= 60000) || history[0];
    const dt = (t - base.t) / 1000;
    const rate = (f) => (dt > 0 ? (f(s) - f(base.s)) / dt : null);
    const window = dt > 0 ? `over ${Math.round(dt)} s` : 'waiting for a second reading';
    setCard(root, 'ov-rps', dt > 0 ? fmt.n(rate((x) => x.requests), 2) : '–', window);
    setCard(root, 'ov-errors', dt > 0 ? fmt.n(rate((x) => x.errors5), 2) : '–', `4xx: ${dt > 0 ? fmt.n(rate((x) => x.errors4), 2) : '–'}/s`);
    let buckets = bucketDelta(s.ttft, base === history[history.length - 1] ? null : base.s.ttft);
    let scope = window;
    if (!(buckets.get(Infinity) > 0)) {
      buckets = s.ttft; // nothing new in the window: since the start
      scope = 'since start';
    }
    const p50 = quantile(buckets, 0.5);
    const p95 = quantile(buckets, 0.95);
    setCard(root, 'ov-ttft', p50 === null ? '–' : `p50 ${fmt.ms(p50 * 1000)}`, p95 === null ? 'no first token yet' : `p95 ${fmt.ms(p95 * 1000)} · ${scope}`);
    setCard(root, 'ov-tokens', dt > 0 ? fmt.n(rate((x) => x.prompt + x.completion), 1) : '–', `prompt ${fmt.n(s.prompt)} · completion ${fmt.n(s.completion)} since start`);
    setCard(root, 'ov-inflight', fmt.n(s.inFlight), `streams open: ${fmt.n(s.streams)}`);
    setCard(root, 'ov-total', fmt.n(s.requests), `5xx ${fmt.n(s.errors5)} · 4xx ${fmt.n(s.errors4)}`);
    const rates = [];
    for (let i = 1; i < history.length; i++) {
      const d = (history[i].t - history[i - 1].t) / 1000;
      rates.push(d > 0 ? (history[i].s.requests - history[i - 1].s.requests) / d : 0);
    }
    $('#ov-spark', root).replaceChildren(rates.length ? sparkline(rates, '#2456d6') : h('span', { class: 'muted' }, '…'));
  };
}

// ---- routes and backends ---------------------------------------------------------------

function stateBadge(st) {
  if (st === 'up') return badge(st, 'ok');
  if (st === 'drained') return badge(st, 'warn');
  return badge(st, 'bad');
}

function buildRoutes(root, again) {
  const msg = h('p', { class: 'msg', id: 'routes-msg' });
  const routesBox = h('div', { id: 'routes' });
  const backendsBox = h('div', { id: 'backends' });
  root.append(msg, h('h2', {}, 'Routes'), routesBox, h('h2', {}, 'Backends'), backendsBox);
  let refresh;
  const canaryControls = (r) => {
    if (!isAdmin() || !r.canary) return '';
    const input = h('input', { type: 'number', min: 0, max: 100, value: r.canary.weight, size: 4, 'aria-label': `canary weight of ${r.model}` });
    return h(
      'span',
      { class: 'actions' },
      input,
      h('button', { type: 'button', onclick: async () => (await change(msg, `Canary of ${r.model} set to ${input.value}%`, () => api(`/admin/routes/${encodeURIComponent(r.model)}/canary`, { method: 'POST', body: { weight: Number(input.value) } }))) && again() }, 'Set'),
      h('button', { type: 'button', onclick: async () => (await change(msg, `Canary of ${r.model} back to its configured weight`, () => api(`/admin/routes/${encodeURIComponent(r.model)}/canary`, { method: 'POST', body: { weight: null } }))) && again() }, 'Reset'),
    );
  };
  refresh = async (current) => {
    const [routes, backends, infra] = await Promise.all([api('/admin/routes'), api('/admin/backends'), api('/infra')]);
    if (!current()) return;
    const detail = new Map((infra.data.routing?.backends || []).map((b) => [b.name, b]));
    routesBox.replaceChildren(
      table(
        [
          { label: 'Model', cell: (r) => r.model },
          { label: 'Backends', cell: (r) => r.backends.join(', ') },
          { label: 'Canary', cell: (r) => (r.canary ? `${r.canary.model}: ${r.canary.weight}%${r.canary.set_by_operator ? ' (set by operator)' : ''}` : '–') },
          { label: 'Canary state', cell: (r) => (r.canary ? (r.canary.active ? badge('active', 'ok') : badge('rolled back', 'bad')) : '') },
          { label: '', cell: canaryControls },
        ],
        routes.data.routes,
        'no routes',
      ),
    );
    backendsBox.replaceChildren(
      table(
        [
          { label: 'Name', cell: (b) => b.name },
          { label: 'Address', cell: (b) => b.address },
          { label: 'State', cell: (b) => stateBadge(b.state) },
          { label: 'Breaker', cell: (b) => detail.get(b.name)?.breaker?.state ?? '–' },
          { label: 'Health', cell: (b) => { const d = detail.get(b.name)?.health; return d ? `${d.healthy ? 'healthy' : 'unhealthy'}${d.ejected ? ', ejected' : ''}${d.last_probe_error ? ` (${d.last_probe_error})` : ''}` : '–'; } },
          { label: 'In flight', num: true, cell: (b) => fmt.n(b.in_flight) },
          {
            label: '',
            cell: (b) =>
              isAdmin()
                ? h('button', {
                    type: 'button',
                    class: b.drained ? '' : 'danger',
                    onclick: async () => {
                      const act = b.drained ? 'undrain' : 'drain';
                      if (await change(msg, `${b.name}: ${act}ed`, () => api(`/admin/backends/${encodeURIComponent(b.name)}/${act}`, { method: 'POST' }))) await again();
                    },
                  }, b.drained ? 'Undrain' : 'Drain')
                : '',
          },
        ],
        backends.data.backends,
        'no backends',
      ),
    );
  };
  return refresh;
}

// ---- keys ------------------------------------------------------------------------------

function buildKeys(root, again) {
  const msg = h('p', { class: 'msg', id: 'keys-msg' });
  const secretBox = h('div', { id: 'secret-box' });
  const list = h('div', { id: 'keys' });
  let refresh;
  const showSecret = (name, secret, what) => {
    secretBox.replaceChildren(
      h(
        'div',
        { class: 'secret' },
        h('p', {}, `${what} ${name}. Copy its secret now: it is not shown again.`),
        h('code', { id: 'new-secret' }, secret),
        ' ',
        h('button', { type: 'button', onclick: () => navigator.clipboard?.writeText(secret) }, 'Copy'),
        ' ',
        h('button', { type: 'button', id: 'secret-done', onclick: () => secretBox.replaceChildren() }, 'Done'),
      ),
    );
  };
  if (isAdmin() && state.who.key_store) {
    const f = {
      name: h('input', { name: 'name', required: true, pattern: '[A-Za-z0-9._:@\\-]+', placeholder: 'team-app' }),
      tenant: h('input', { name: 'tenant', placeholder: 'default' }),
      tier: h('input', { name: 'tier', placeholder: 'standard' }),
      role: h('select', { name: 'role' }, ['user', 'viewer', 'admin'].map((r) => h('option', { value: r }, r))),
      models: h('input', { name: 'models', placeholder: '* (all)' }),
      expires: h('input', { name: 'expires_in', placeholder: 'never (90d, 12h)' }),
      inflight: h('input', { name: 'max_in_flight', type: 'number', min: 0, placeholder: 'default' }),
      budget: h('input', { name: 'budget_tokens', type: 'number', min: 1, placeholder: 'none' }),
      per: h('select', { name: 'budget_per' }, ['month', 'day', 'hour', 'minute'].map((p) => h('option', { value: p }, p))),
    };
    const field = (label, el) => h('label', { class: 'field' }, label, el);
    root.append(
      h('h2', {}, 'New key'),
      h(
        'form',
        {
          class: 'row panel',
          id: 'key-create',
          onsubmit: async (ev) => {
            ev.preventDefault();
            const body = { name: f.name.value.trim(), role: f.role.value };
            if (f.tenant.value.trim()) body.tenant = f.tenant.value.trim();
            if (f.tier.value.trim()) body.tier = f.tier.value.trim();
            if (f.models.value.trim()) body.models = f.models.value.split(',').map((m) => m.trim()).filter(Boolean);
            if (f.expires.value.trim()) body.expires_in = f.expires.value.trim();
            if (f.inflight.value !== '') body.max_in_flight = Number(f.inflight.value);
            if (f.budget.value !== '') body.budget = { tokens: Number(f.budget.value), per: f.per.value };
            const r = await change(msg, `Created ${body.name}`, () => api('/admin/keys', { method: 'POST', body }));
            if (r) {
              showSecret(r.data.name, r.data.secret, 'Created');
              ev.target.reset();
              await again();
            }
          },
        },
        field('Name', f.name),
        field('Tenant', f.tenant),
        field('Tier', f.tier),
        field('Role', f.role),
        field('Models (comma-separated)', f.models),
        field('Expires in', f.expires),
        field('Max in flight', f.inflight),
        field('Token budget', f.budget),
        field('per', f.per),
        h('button', { class: 'primary', type: 'submit' }, 'Create'),
      ),
    );
  }
  root.append(msg, secretBox, h('h2', {}, 'Keys'), list);
  const act = (k, what, path, body, after) =>
    h('button', {
      type: 'button',
      'data-action': what.toLowerCase(),
      class: what === 'Delete' || what === 'Disable' ? 'danger' : '',
      onclick: async (ev) => {
        // A destructive change asks once more, on the button itself.
        if ((what === 'Delete' || what === 'Rotate') && ev.target.dataset.armed !== '1') {
          ev.target.dataset.armed = '1';
          ev.target.textContent = `Confirm ${what.toLowerCase()}`;
          setTimeout(() => {
            if (ev.target.isConnected) {
              ev.target.dataset.armed = '';
              ev.target.textContent = what;
            }
          }, 5000);
          return;
        }
        const method = what === 'Delete' ? 'DELETE' : 'POST';
        const r = await change(msg, `${k.name}: ${what.toLowerCase()} done`, () => api(path, { method, body }));
        if (r && after) after(r);
        if (r) await again();
      },
    }, what);
  refresh = async (current) => {
    if (!state.who.key_store) {
      const { data } = await api('/admin/keys').catch((e) => ({ data: { error: e.message } }));
      if (!current()) return;
      list.replaceChildren(h('p', { class: 'empty' }, data.error || 'The key store is off (key_store.enabled): keys come from the configuration file.'));
      return;
    }
    const { data } = await api('/admin/keys');
    if (!current()) return;
    const keyPath = (k) => `/admin/keys/${encodeURIComponent(k.name)}`;
    list.replaceChildren(
      table(
        [
          { label: 'Name', cell: (k) => k.name },
          { label: 'Key', cell: (k) => h('code', {}, k.key) },
          { label: 'Source', cell: (k) => (k.source === 'config' ? badge('file', '') : badge('store', 'ok')) },
          { label: 'Tenant', cell: (k) => k.tenant },
          { label: 'Tier', cell: (k) => k.tier },
          { label: 'Role', cell: (k) => k.role },
          { label: 'Models', cell: (k) => k.models.join(', ') },
          { label: 'State', cell: (k) => (k.enabled ? badge('enabled', 'ok') : badge('disabled', 'bad')) },
          { label: 'Budget', cell: (k) => (k.budget ? `${k.budget.tokens} tokens / ${k.budget.per}` : '–') },
          { label: 'Expires', cell: (k) => (k.expires_ms ? fmt.time(k.expires_ms) : 'never') },
          { label: 'Last used', cell: (k) => (k.last_used_ms ? fmt.time(k.last_used_ms) : '–') },
          {
            label: '',
            cell: (k) =>
              isAdmin() && !k.read_only
                ? h(
                    'span',
                    { class: 'actions' },
                    k.enabled ? act(k, 'Disable', `${keyPath(k)}/disable`) : act(k, 'Enable', `${keyPath(k)}/enable`),
                    act(k, 'Rotate', `${keyPath(k)}/rotate`, { grace: '1h' }, (r) => showSecret(k.name, r.data.secret, 'Rotated (the old secret works for 1 hour)')),
                    act(k, 'Delete', keyPath(k)),
                  )
                : '',
          },
        ],
        data.keys,
        'no keys',
      ),
    );
    for (const tr of list.querySelectorAll('tbody tr')) tr.dataset.key = tr.firstChild.textContent;
  };
  return refresh;
}

// ---- usage by key or tenant over time (the history) ------------------------------------

const WINDOWS = { '1h': 3600e3, '24h': 86400e3, '7d': 7 * 86400e3 };
const COLORS = ['#2456d6', '#e07b00', '#1a7f37', '#c62828', '#7b3fc4', '#0a8ea0', '#b8860b', '#d63384', '#6b7385'];

function buildUsage(root, again) {
  const win = h('select', { id: 'usage-window' }, Object.keys(WINDOWS).map((w) => h('option', { value: w }, `last ${w}`)));
  // By key or tenant (who spends), by model, or by a load option (a tuning sweep's rows:
  // docs/tuning.md).
  const GROUPS = { key: 'Key', tenant: 'Tenant', model: 'Model', num_ctx: 'num_ctx', num_gpu: 'num_gpu', num_batch: 'num_batch' };
  const group = h('select', { id: 'usage-group' }, Object.entries(GROUPS).map(([v, label]) => h('option', { value: v }, `by ${label}`)));
  const measure = h('select', { id: 'usage-measure' }, h('option', { value: 'tokens' }, 'tokens'), h('option', { value: 'count' }, 'requests'));
  const chart = h('div', { id: 'usage-chart' });
  const totals = h('div', { id: 'usage-table' });
  let refresh;
  const redo = () => again();
  for (const s of [win, group, measure]) s.addEventListener('change', redo);
  root.append(
    h('p', { class: 'muted' }, 'From the request history (every instance sharing its database).'),
    h('div', { class: 'row' }, win, group, measure, h('button', { type: 'button', onclick: redo }, 'Refresh')),
    h('h2', {}, 'Over time'),
    chart,
    h('h2', {}, 'Totals'),
    totals,
  );
  refresh = async (current) => {
    if (!state.who.history) {
      chart.replaceChildren(h('p', { class: 'empty' }, 'The request history is off (history.backend: none).'));
      return;
    }
    const by = group.value;
    const what = measure.value;
    const span = WINDOWS[win.value];
    const n = 12;
    const until = Date.now();
    const since = until - span;
    const q = (a, b) => `/history/stats?since=${Math.round(a)}&until=${Math.round(b)}&group_by=${by}`;
    const parts = await Promise.all([...Array(n).keys()].map((i) => api(q(since + (span * i) / n, since + (span * (i + 1)) / n))));
    const whole = await api(q(since, until));
    if (!current()) return;
    const value = (g) => (what === 'tokens' ? g.prompt_tokens + g.completion_tokens : g.count);
    const name = (g) => (g.key === null ? '(none)' : g.key);
    const top = whole.data.groups.slice().sort((a, b) => value(b) - value(a)).slice(0, COLORS.length - 1).map(name);
    const series = parts.map((p) => {
      const m = new Map();
      for (const g of p.data.groups) {
        const k = top.includes(name(g)) ? name(g) : 'other';
        m.set(k, (m.get(k) || 0) + value(g));
      }
      return m;
    });
    const names = [...top, ...(series.some((m) => m.has('other')) ? ['other'] : [])];
    const max = Math.max(1, ...series.map((m) => [...m.values()].reduce((a, b) => a + b, 0)));
    const W = 600;
    const H = 160;
    const bw = W / n;
    const bars = [];
    series.forEach((m, i) => {
      let y = H;
      names.forEach((k, c) => {
        const v = m.get(k) || 0;
        if (!v) return;
        const hh = (v / max) * (H - 10);
        y -= hh;
        bars.push(svg('rect', { x: (i * bw + 2).toFixed(1), y: y.toFixed(1), width: (bw - 4).toFixed(1), height: hh.toFixed(1), fill: COLORS[c % COLORS.length] }, svg('title', {}, `${k}: ${fmt.n(v)}`)));
      });
    });
    chart.replaceChildren(
      names.length
        ? svg('svg', { class: 'chart', viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: 'none' }, bars)
        : h('p', { class: 'empty' }, 'no requests in this window'),
      h('div', { class: 'legend' }, names.map((k, c) => h('span', {}, h('i', { 'data-color': c }), k)), h('span', { class: 'muted' }, `max ${fmt.n(max)} ${what === 'tokens' ? 'tokens' : 'requests'} per ${fmt.age(span / n)}`)),
    );
    // (colours through a class: the page's policy allows no inline style)
    for (const i of chart.querySelectorAll('.legend i')) i.classList.add(`c${i.dataset.color}`);
    totals.replaceChildren(
      table(
        [
          { label: GROUPS[by], cell: name },
          { label: 'Requests', num: true, cell: (g) => fmt.n(g.count) },
          { label: 'Errors', num: true, cell: (g) => fmt.n(g.errors) },
          { label: 'Prompt tokens', num: true, cell: (g) => fmt.n(g.prompt_tokens) },
          { label: 'Completion tokens', num: true, cell: (g) => fmt.n(g.completion_tokens) },
          { label: 'TTFT p50', num: true, cell: (g) => fmt.ms(g.ttft_ms?.p50) },
          { label: 'TTFT p95', num: true, cell: (g) => fmt.ms(g.ttft_ms?.p95) },
          { label: 'Tokens/s', num: true, cell: (g) => (g.tokens_per_s ? g.tokens_per_s.mean.toFixed(1) : '—') },
        ],
        whole.data.groups,
        'no requests in this window',
      ),
    );
  };
  return refresh;
}

// ---- recent requests (the history) -----------------------------------------------------

function buildHistory(root, again) {
  const f = {
    model: h('input', { name: 'model', placeholder: 'model' }),
    key: h('input', { name: 'key', placeholder: 'key' }),
    tenant: h('input', { name: 'tenant', placeholder: 'tenant' }),
    status: h('input', { name: 'status', placeholder: 'status (200, 429…)', size: 12 }),
  };
  const box = h('div', { id: 'history' });
  const more = h('button', { type: 'button', id: 'history-older', hidden: true }, 'Older');
  let before = null;
  let rows = [];
  let refresh;
  const query = () => {
    const p = new URLSearchParams({ limit: '50' });
    for (const [k, el] of Object.entries(f)) if (el.value.trim()) p.set(k, el.value.trim());
    return p;
  };
  root.append(
    h(
      'form',
      {
        class: 'row',
        id: 'history-filters',
        onsubmit: (ev) => {
          ev.preventDefault();
          again();
        },
      },
      Object.values(f),
      h('button', { class: 'primary', type: 'submit' }, 'Filter'),
    ),
    box,
    more,
  );
  const render = () =>
    box.replaceChildren(
      table(
        [
          { label: 'Time', cell: (r) => fmt.time(r.unix_ms) },
          { label: 'Key', cell: (r) => r.key_name ?? '–' },
          { label: 'Tenant', cell: (r) => r.tenant ?? '–' },
          { label: 'Model', cell: (r) => r.alias ?? '–' },
          { label: 'Backend', cell: (r) => r.backend ?? '–' },
          { label: 'Status', cell: (r) => badge(String(r.status), r.status >= 500 ? 'bad' : r.status >= 400 ? 'warn' : 'ok') },
          { label: 'Reason', cell: (r) => r.reason },
          { label: 'Stream', cell: (r) => (r.stream ? 'yes' : '') },
          { label: 'TTFT', num: true, cell: (r) => fmt.ms(r.ttft_ms) },
          { label: 'Time taken', num: true, cell: (r) => fmt.ms(r.wall_ms) },
          { label: 'Tokens in/out', num: true, cell: (r) => `${fmt.n(r.prompt_tokens)} / ${fmt.n(r.completion_tokens)}` },
          { label: 'Request id', cell: (r) => h('code', {}, r.request_id) },
        ],
        rows,
        'no requests match',
      ),
    );
  let used = null; // the filters of the rows shown: "Older" pages back through those
  more.addEventListener('click', async () => {
    const p = new URLSearchParams(used);
    p.set('before_id', before);
    try {
      const { data } = await api(`/history?${p}`);
      rows = rows.concat(data.data);
      before = data.next_before_id;
      more.hidden = !data.has_more;
      render();
    } catch (e) {
      footer(e.message, true);
    }
  });
  refresh = async (current) => {
    if (!state.who.history) {
      box.replaceChildren(h('p', { class: 'empty' }, 'The request history is off (history.backend: none).'));
      return;
    }
    const asked = query();
    const { data } = await api(`/history?${asked}`);
    if (!current()) return;
    used = asked;
    rows = data.data;
    before = data.next_before_id;
    more.hidden = !data.has_more;
    render();
  };
  return refresh;
}

// ---- live requests and streams ---------------------------------------------------------

function buildLive(root, again) {
  const onlyStreams = h('input', { type: 'checkbox', id: 'live-streams' });
  const msg = h('p', { class: 'msg', id: 'live-msg' });
  const box = h('div', { id: 'live' });
  const info = h('p', { class: 'muted', id: 'live-info' });
  root.append(h('div', { class: 'row' }, h('label', {}, onlyStreams, ' streams only')), info, msg, box);
  let refresh;
  onlyStreams.addEventListener('change', () => again());
  refresh = async (current) => {
    const { data } = await api(`/admin/requests${onlyStreams.checked ? '?stream=true' : ''}`);
    if (!current()) return;
    info.textContent = data.fleet
      ? `The fleet's requests (instances: ${data.instances.join(', ')})${data.error ? ` · ${data.error}` : ''}`
      : `This instance's requests (no live registry: admin.live_registry)`;
    box.replaceChildren(
      table(
        [
          { label: 'Id', cell: (r) => h('code', {}, r.id) },
          { label: 'Instance', cell: (r) => r.instance },
          { label: 'Key', cell: (r) => r.key ?? '–' },
          { label: 'Tenant', cell: (r) => r.tenant ?? '–' },
          { label: 'Model', cell: (r) => r.model ?? '–' },
          { label: 'Path', cell: (r) => r.path },
          { label: 'Stream', cell: (r) => (r.stream ? badge('stream', 'ok') : '') },
          { label: 'Running for', num: true, cell: (r) => fmt.age(r.age_ms) },
          {
            label: '',
            cell: (r) =>
              isAdmin()
                ? h('button', {
                    type: 'button',
                    class: 'danger',
                    'data-id': r.id,
                    onclick: async (ev) => {
                      ev.target.disabled = true;
                      const res = await change(msg, `Cancelled ${r.id}`, () => api(`/admin/requests/${encodeURIComponent(r.id)}/cancel`, { method: 'POST' }));
                      if (res && res.status === 202) message(msg, `Cancel of ${r.id} sent (${res.data.instance ?? 'here'}: it ends at its next step)`, true);
                      await again();
                    },
                  }, 'Cancel')
                : '',
          },
        ],
        // Oldest first, by the gateway's id on a tie: rows stay where they are between
        // refreshes, under the Cancel buttons.
        data.requests.slice().sort((a, b) => a.start_ms - b.start_ms || a.id.localeCompare(b.id)),
        'nothing in flight',
      ),
    );
  };
  return refresh;
}

// ---- dependencies (/infra) ---------------------------------------------------------------

// Up, down, off or degraded, from what a section of /infra says of itself.
function health(section) {
  if (!section || typeof section !== 'object') return null;
  if (section.configured === 'none' || section.active === 'none' || section.enabled === false || section.fleet === false) return badge('off');
  if (section.up === false || section.redis_up === false) return badge('down', 'bad');
  if (section.store && section.store.up === false) return badge('down', 'bad');
  if (section.active && section.configured && section.active !== section.configured && section.active !== 'none') return badge(`degraded: ${section.active}`, 'warn');
  if (section.up === true || section.redis_up === true || (section.store && section.store.up === true)) return badge('up', 'ok');
  return null;
}

const DEPENDENCIES = [
  ['rate_limiter', 'Rate limits (Redis or memory)'],
  ['history', 'Request history (database)'],
  ['keys', 'Key store (database)'],
  ['audit', 'Audit trail (database)'],
  ['events', 'Events (Kafka)'],
  ['cache', 'Response cache'],
  ['live_registry', 'Live registry (Redis)'],
  ['stored_responses', 'Stored responses'],
  ['access_log', 'Access log'],
];

function buildInfra(root) {
  const cards = h('div', { id: 'infra' });
  const raw = h('details', {}, h('summary', {}, 'Everything /infra says'), h('pre', { id: 'infra-raw' }));
  root.append(h('p', { class: 'muted' }, 'This instance, as GET /infra reports it.'), cards, raw);
  return async (current) => {
    const { data } = await api('/infra');
    if (!current()) return;
    const line = (k, v) => (v === undefined || v === null || typeof v === 'object' ? null : h('div', {}, h('span', { class: 'muted' }, `${k}: `), String(v)));
    cards.replaceChildren(
      table(
        [
          { label: 'Part', cell: ([, title]) => title },
          { label: 'State', cell: ([id]) => health(data[id]) ?? (data[id] ? badge('on', 'ok') : badge('off')) },
          {
            label: 'Details',
            cell: ([id]) => {
              const s = data[id];
              if (!s) return 'not running';
              const shown = ['configured', 'active', 'backend', 'store', 'target', 'reason', 'brokers', 'topic', 'queued', 'pending', 'dropped', 'written', 'in_force', 'last_error', 'redis_up', 'published'];
              return h('div', {}, shown.map((k) => line(k, s[k])).filter(Boolean), s.store && typeof s.store === 'object' ? line('store', s.store.up ? `up (${s.store.keys} keys)` : `down: ${s.store.last_error}`) : null);
            },
          },
        ],
        DEPENDENCIES.filter(([id]) => id in data),
      ),
      h('p', {}, `Draining: ${data.draining ? 'yes' : 'no'} · requests in flight: ${data.requests?.live ?? 0} · streams: ${data.requests?.streams ?? 0}`),
    );
    $('#infra-raw', root).textContent = JSON.stringify(data, null, 2);
  };
}

// ---- audit -------------------------------------------------------------------------------

function buildAudit(root) {
  const box = h('div', { id: 'audit' });
  root.append(h('p', { class: 'muted' }, 'Every change made through /admin/, newest first.'), box);
  return async (current) => {
    if (!state.who.audit) {
      box.replaceChildren(h('p', { class: 'empty' }, 'No audit table (history.backend: none): the events and the access log are the trail.'));
      return;
    }
    const { data } = await api('/admin/audit?limit=100');
    if (!current()) return;
    box.replaceChildren(
      table(
        [
          { label: 'Time', cell: (a) => fmt.time(a.unix_ms) },
          { label: 'Actor', cell: (a) => a.actor },
          { label: 'Action', cell: (a) => a.action },
          { label: 'Target', cell: (a) => a.target },
          { label: 'Status', num: true, cell: (a) => a.status },
          { label: 'Instance', cell: (a) => a.instance },
          { label: 'Asked', cell: (a) => h('code', {}, JSON.stringify(a.detail?.body ?? a.detail ?? '')) },
        ],
        data.audit,
        'no changes recorded',
      ),
    );
  };
}

const PAGES = {
  overview: { title: 'Overview', build: buildOverview, every: 2000 },
  routes: { title: 'Routes & backends', build: buildRoutes, every: 3000 },
  keys: { title: 'Keys', build: buildKeys, every: 10000 },
  usage: { title: 'Usage', build: buildUsage, every: 60000 },
  history: { title: 'Requests', build: buildHistory, every: 0 },
  live: { title: 'Live', build: buildLive, every: 1000 },
  infra: { title: 'Dependencies', build: buildInfra, every: 3000 },
  audit: { title: 'Audit', build: buildAudit, every: 10000 },
};

start();
