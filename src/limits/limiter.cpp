#include "limits/limiter.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <algorithm>
#include <charconv>
#include <chrono>
#include <thread>
#include <cmath>
#include <cstdlib>
#include <unordered_map>

#include "common/ids.hpp"
#include "limits/leases.hpp"
#include "limits/scripts.hpp"
#include "store/redis.hpp"

namespace sluice::limits {

namespace net = boost::asio;
using config::DownPolicy;
using config::LimitScope;

namespace {

std::int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool matches(const config::LimitMatch& m, const config::ApiKey& k, std::string_view model) {
  return limit_applies(m, k.name, k.tier, k.tenant, model);
}

// Counter key. The part in braces is a Redis Cluster hash tag: all of one tenant's
// counters live in one slot (key, tenant and tenant_model scopes).
std::string counter_key(const std::string& prefix, LimitScope scope, const config::ApiKey& k, std::string_view model,
                        const std::string& rule) {
  std::string s;
  s.reserve(prefix.size() + k.tenant.size() + k.name.size() + model.size() + rule.size() + 16);
  s += prefix;
  switch (scope) {
    case LimitScope::key: s += ":{t:"; s += k.tenant; s += "}:k:"; s += k.name; break;
    case LimitScope::tenant: s += ":{t:"; s += k.tenant; s += "}:t"; break;
    case LimitScope::tenant_model: s += ":{t:"; s += k.tenant; s += "}:m:"; s += model; break;
    case LimitScope::tier: s += ":{tier:"; s += k.tier; s += "}"; break;
    case LimitScope::model: s += ":{m:"; s += model; s += "}"; break;
  }
  s += ':';
  s += rule;
  return s;
}

std::int64_t period_ms(config::QuotaPeriod p) { return Limiter::quota_window_ms(p); }

const char* kind_arg(Kind k) {
  switch (k) {
    case Kind::fixed_window: return "fw";
    case Kind::sliding_window: return "sw";
    case Kind::sliding_log: return "sl";
    case Kind::token_bucket: return "tb";
    case Kind::quota: return "tq";
  }
  return "fw";
}

// The admission script's keys and arguments for `checks` (see kAdmitScript): `id` names
// the quota reservations; with `lease`, each check may take its lease besides its cost.
void script_args(std::span<const Check> checks, std::string_view id, bool lease, std::string_view record_ms,
                 std::vector<std::string>& keys, std::vector<std::string>& args) {
  keys.reserve(checks.size());
  args.reserve(2 + checks.size() * 6);
  args.emplace_back(id);
  for (const auto& c : checks) {
    keys.emplace_back(c.key);
    args.emplace_back(kind_arg(c.kind));
    args.push_back(std::to_string(c.limit));
    args.push_back(std::to_string(c.window_ms));
    args.push_back(std::to_string(c.cost));
    args.push_back(std::to_string(c.extra));
    args.push_back(lease ? std::to_string(c.lease) : std::string("0"));
  }
  args.emplace_back(record_ms);
}

// The script's answer for n checks; false when it is not one.
bool read_verdict(const store::RedisReply& r, std::size_t n, Verdict& v) {
  if (r.type != store::RedisReply::Type::array || r.elements.size() != 3 + 4 * n) return false;
  const auto& e = r.elements;
  v.allowed = e[0].integer == 0;
  v.denied = static_cast<int>(e[0].integer) - 1;
  v.retry_after_ms = e[1].integer;
  v.now_ms = e[2].integer;
  v.results.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    v.results[i] = {e[3 + 4 * i].integer, e[4 + 4 * i].integer, e[5 + 4 * i].integer, e[6 + 4 * i].integer};
  }
  return true;
}

// A call that failed may still have run: it was sent, and its answer was lost (a
// timeout, a dropped connection). One never sent fails with these.
bool may_have_run(const store::RedisResult& r) {
  return !r.ok() && !r.error.starts_with("not connected") && !r.error.starts_with("pipeline full");
}

// An error reply that says the script did not run, and would on another try: Redis
// loading its data, a replica after a failover, a busy script. (A script that failed
// while running is not retried.)
bool retry_later(const store::RedisReply& r) {
  // (ASK: a Redis Cluster slot being migrated; a script waits for the migration's end.)
  for (std::string_view p : {"LOADING", "READONLY", "MASTERDOWN", "BUSY", "TRYAGAIN", "NOREPLICAS", "CLUSTERDOWN", "ASK "}) {
    if (r.str.starts_with(p)) return true;
  }
  return false;
}

// Redis Cluster: a script runs on one node, over keys of one slot. The indices of `n`
// keys grouped by their slot, in key order; without a cluster, one group of all.
template <class KeyOf>
std::vector<std::vector<std::size_t>> by_slot(const store::RedisConnection& redis, std::size_t n, KeyOf key_of) {
  std::vector<std::vector<std::size_t>> groups;
  if (!redis.cluster()) {
    groups.emplace_back(n);
    for (std::size_t i = 0; i < n; ++i) groups[0][i] = i;
    return groups;
  }
  std::vector<std::uint16_t> slots;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint16_t s = store::key_slot(key_of(i));
    const auto at = std::find(slots.begin(), slots.end(), s);
    if (at == slots.end()) {
      slots.push_back(s);
      groups.emplace_back(1, i);
    } else {
      groups[static_cast<std::size_t>(at - slots.begin())].push_back(i);
    }
  }
  return groups;
}

// `script` once per group of keys and arguments, all at once (a cluster's nodes each
// answer theirs); the answers in group order.
net::awaitable<std::vector<store::RedisResult>> eval_all(std::shared_ptr<store::RedisConnection> redis,
                                                         const store::RedisScript* script,
                                                         std::vector<std::vector<std::string>> keys,
                                                         std::vector<std::vector<std::string>> args) {
  std::vector<store::RedisResult> out(keys.size());
  if (keys.size() == 1) {
    out[0] = co_await redis->eval(*script, std::move(keys[0]), std::move(args[0]));
    co_return out;
  }
  const auto ex = co_await net::this_coro::executor;
  struct Fan {
    std::vector<store::RedisResult> results;
    std::size_t left;
    net::steady_timer done;
  };
  auto fan = std::make_shared<Fan>(Fan{std::move(out), keys.size(), net::steady_timer(ex)});
  fan->done.expires_at(net::steady_timer::time_point::max());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    auto one = [fan, redis, script, i, k = std::move(keys[i]), a = std::move(args[i])]() mutable -> net::awaitable<void> {
      try {
        fan->results[i] = co_await redis->eval(*script, std::move(k), std::move(a));
      } catch (const std::exception& e) {  // (out of memory: as a call never sent)
        fan->results[i] = store::RedisResult{std::nullopt, std::string("not connected: ") + e.what()};
      }
      if (--fan->left == 0) fan->done.cancel();
    };
    net::co_spawn(ex, std::move(one), net::detached);
  }
  // (A call refused at once may have finished already: the timer's cancel then came first.)
  if (fan->left > 0) co_await fan->done.async_wait(net::as_tuple(net::use_awaitable));
  co_return std::move(fan->results);
}

}  // namespace

// One admission script call per slot group of `checks` (one without a cluster): its
// checks, Redis's outcome, and the verdict read from it.
struct WorkerLimiter::AdmitCall {
  std::vector<std::size_t> checks;
  store::RedisResult r;
  Verdict v;
  bool answered = false;
};

net::awaitable<std::vector<WorkerLimiter::AdmitCall>> WorkerLimiter::admit_calls(
    std::shared_ptr<store::RedisConnection> redis, const store::RedisScript* script, std::span<const Check> checks,
    std::string id, bool lease, std::string record_ms) {
  std::vector<AdmitCall> calls;
  for (auto& g : by_slot(*redis, checks.size(), [&](std::size_t i) { return checks[i].key; })) {
    calls.push_back(AdmitCall{std::move(g), {}, {}, false});
  }
  std::vector<std::vector<std::string>> keys(calls.size()), args(calls.size());
  if (calls.size() == 1) {
    script_args(checks, id, lease, record_ms, keys[0], args[0]);  // (no cluster: in order, no copy)
  } else {
    for (std::size_t c = 0; c < calls.size(); ++c) {
      std::vector<Check> part;
      for (auto i : calls[c].checks) part.push_back(checks[i]);
      script_args(part, id, lease, record_ms, keys[c], args[c]);
    }
  }
  auto results = co_await eval_all(std::move(redis), script, std::move(keys), std::move(args));
  for (std::size_t c = 0; c < calls.size(); ++c) {
    calls[c].r = std::move(results[c]);
    const auto& r = calls[c].r;
    calls[c].answered = r.ok() && read_verdict(*r.reply, calls[c].checks.size(), calls[c].v);
  }
  co_return calls;
}

namespace {

// The calls' verdicts as one over every check: admitted when every call admitted, then
// refused by the first refusing check, retry after the longest wait. (Every call answered.)
Verdict merge(const std::vector<WorkerLimiter::AdmitCall>& calls, std::size_t n) {
  if (calls.size() == 1) return calls[0].v;
  Verdict v;
  v.allowed = true;
  v.results.resize(n);
  v.now_ms = calls[0].v.now_ms;
  for (const auto& c : calls) {
    for (std::size_t j = 0; j < c.checks.size(); ++j) v.results[c.checks[j]] = c.v.results[j];
    if (c.v.allowed) continue;
    const int denied = static_cast<int>(c.checks[static_cast<std::size_t>(c.v.denied)]);
    if (v.allowed || denied < v.denied) v.denied = denied;
    v.allowed = false;
    v.retry_after_ms = std::max(v.retry_after_ms, c.v.retry_after_ms);
  }
  if (!v.allowed) {
    for (auto& r : v.results) r.leased = 0;  // what was taken is voided
  }
  return v;
}

std::string describe_window(std::int64_t ms) {
  if (ms == 0) return "month";
  return format_reset(ms);
}

}  // namespace

bool limit_applies(const config::LimitMatch& m, std::string_view key_name, std::string_view tier,
                   std::string_view tenant, std::string_view model) noexcept {
  return (m.key.empty() || m.key == key_name) && (m.tier.empty() || m.tier == tier) &&
         (m.tenant.empty() || m.tenant == tenant) && (m.model.empty() || m.model == model);
}

std::int64_t Limiter::quota_window_ms(config::QuotaPeriod p) noexcept {
  switch (p) {
    case config::QuotaPeriod::minute: return 60'000;
    case config::QuotaPeriod::hour: return 3'600'000;
    case config::QuotaPeriod::day: return 86'400'000;
    case config::QuotaPeriod::month: return 0;
  }
  return 60'000;
}

std::string Limiter::quota_counter(const Rules& r, std::size_t i, const config::ApiKey& key, std::string_view model) const {
  const auto& rl = r.limits();
  return counter_key(cfg_->redis.key_prefix, rl.tokens.at(i).scope, key, model, r.names.at(rl.requests.size() + i));
}

std::shared_ptr<const Limiter::Rules> Limiter::make_rules(std::shared_ptr<const config::Config> cfg) {
  auto r = std::make_shared<Rules>();
  r->cfg = std::move(cfg);
  const auto& rl = r->limits();
  r->active = rl.any();
  // The rule's name (else its index), algorithm and window name its counters: a changed
  // rule starts afresh, a renamed or moved one too unless it has a name.
  for (std::size_t i = 0; i < rl.requests.size(); ++i) {
    const auto& l = rl.requests[i];
    const char* alg = l.algorithm == config::LimitAlgorithm::fixed_window     ? "fw"
                      : l.algorithm == config::LimitAlgorithm::sliding_window ? "sw"
                      : l.algorithm == config::LimitAlgorithm::sliding_log    ? "sl"
                                                                              : "tb";
    const std::string who = l.name.empty() ? "r" + std::to_string(i) : "r-" + l.name;
    r->names.push_back(who + "." + alg + "." + std::to_string(l.window.count()));
  }
  for (std::size_t i = 0; i < rl.tokens.size(); ++i) {
    const auto& l = rl.tokens[i];
    const std::string who = l.name.empty() ? "q" + std::to_string(i) : "q-" + l.name;
    r->names.push_back(who + "." + std::string(to_string(l.per)));
  }
  return r;
}

std::shared_ptr<const Limiter::Rules> Limiter::rules() const {
  std::lock_guard lock(mu_);
  return rules_;
}

void Limiter::reconfigure(std::shared_ptr<const config::Config> cfg) {
  auto next = make_rules(std::move(cfg));
  std::lock_guard lock(mu_);
  active_.store(next->active, std::memory_order_relaxed);
  rules_ = std::move(next);
  // (Release: a worker that sees the new generation finds the new rules under mu_.)
  generation_.fetch_add(1, std::memory_order_release);
}

Limiter::Limiter(std::shared_ptr<const config::Config> cfg) : cfg_(cfg), rules_(make_rules(std::move(cfg))) {
  const auto& rl = cfg_->rate_limits;
  active_ = rules_->active;
  // (Connections whenever Redis counts, limits or not: a reload may bring some.)
  wants_redis_ = rl.backend != config::LimiterBackend::memory;
  // The workers the server runs (its rule: 0 means one per core).
  {
    const auto& rs = cfg_->redis;
    record_ms_ = std::max<std::chrono::milliseconds>(std::chrono::milliseconds(60000),
                                                     4 * (rs.retry_interval + rs.connect_timeout + rs.timeout));
  }
  worker_count_ = cfg_->workers > 0 ? cfg_->workers : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  admit_script_ = std::make_unique<store::RedisScript>(std::string(kAdmitScript));
  settle_script_ = std::make_unique<store::RedisScript>(std::string(kSettleScript));
  ledger_script_ = std::make_unique<store::RedisScript>(std::string(kLedgerScript));
}

Limiter::~Limiter() = default;

std::int64_t Limiter::quota_lease(const config::TokenLimit& l, std::int64_t tokens) {
  if (l.lease >= 0) return l.lease;
  // (Saturating: `tokens` comes from the client's request.)
  const std::int64_t per_requests = tokens > INT64_MAX / 1024 ? INT64_MAX : 1024 * tokens;
  return l.limit >= 1'000'000 ? std::min<std::int64_t>(l.limit / 1000, per_requests) : 0;
}

std::shared_ptr<const Limiter::Plan> Limiter::plan(std::shared_ptr<const Rules> rules, const config::ApiKey& key,
                                                   std::string_view model) const {
  const auto& rl = rules->limits();
  const auto& prefix = cfg_->redis.key_prefix;
  const auto& names = rules->names;
  auto p = std::make_shared<Plan>();
  p->rules = std::move(rules);
  for (std::size_t i = 0; i < rl.requests.size(); ++i) {
    const auto& l = rl.requests[i];
    if (!matches(l.when, key, model)) continue;
    Check c;
    c.limit = l.limit;
    c.window_ms = l.window.count();
    c.cost = 1;
    switch (l.algorithm) {
      case config::LimitAlgorithm::fixed_window: c.kind = Kind::fixed_window; break;
      case config::LimitAlgorithm::sliding_window: c.kind = Kind::sliding_window; break;
      case config::LimitAlgorithm::sliding_log: c.kind = Kind::sliding_log; break;
      case config::LimitAlgorithm::token_bucket: c.kind = Kind::token_bucket; c.extra = l.burst; break;
    }
    p->keys.push_back(counter_key(prefix, l.scope, key, model, names[i]));
    c.on_redis_down = l.on_redis_down;
    c.lease = worker_lease(l.lease);
    c.id = &l.id;
    p->checks.push_back(c);
    p->quotas.push_back(nullptr);
  }
  // A token quota's check, counting under `rule`.
  auto quota = [&](const config::TokenLimit& l, const std::string& rule) {
    Check c;
    c.kind = Kind::quota;
    c.tokens = true;
    c.limit = l.limit;
    c.window_ms = period_ms(l.per);
    c.cost = 0;
    c.extra = rl.reservation_ttl.count();
    p->keys.push_back(counter_key(prefix, l.scope, key, model, rule));
    c.on_redis_down = l.on_redis_down;
    c.id = &l.id;
    p->checks.push_back(c);
    p->quotas.push_back(&l);
  };
  for (std::size_t i = 0; i < rl.tokens.size(); ++i) {
    if (matches(rl.tokens[i].when, key, model)) quota(rl.tokens[i], names[rl.requests.size() + i]);
  }
  // The key's own budget (a stored key's): a token quota of scope key, named apart from
  // the configured ones.
  if (key.budget_tokens > 0) {
    auto& l = p->budget;
    l.id = "key budget";
    l.scope = config::LimitScope::key;
    l.limit = key.budget_tokens;
    l.per = key.budget_per;
    l.on_redis_down = rl.on_redis_down;
    quota(l, "qb." + std::string(to_string(l.per)));
  }
  // The keys are complete: the views cannot move any more.
  for (std::size_t i = 0; i < p->checks.size(); ++i) p->checks[i].key = p->keys[i];
  return p;
}

void WorkerLimiter::checks_for(const config::ApiKey& key, std::string_view model, std::int64_t tokens,
                               Checks& out, bool requests_only, std::shared_ptr<const Limiter::Plan>* hold) {
  refresh();
  auto found = plans_.find(std::string_view(key.name));
  if (found == plans_.end()) found = plans_.emplace(key.name, std::vector<CachedPlan>{}).first;
  auto& list = found->second;
  CachedPlan* cached = nullptr;
  for (auto& c : list) {
    if (c.model == model) {
      cached = &c;
      break;
    }
  }
  if (cached && (cached->tier != key.tier || cached->tenant != key.tenant || cached->budget_tokens != key.budget_tokens ||
                 cached->budget_per != key.budget_per)) {
    cached->plan = owner_.plan(rules_, key, model);  // the key changed (a reload, the key store)
    cached->tier = key.tier;
    cached->tenant = key.tenant;
    cached->budget_tokens = key.budget_tokens;
    cached->budget_per = key.budget_per;
    cached->slots.clear();
    if (redis_) {
      for (const auto& c : cached->plan->checks) cached->slots.push_back(leases_->slot(c.key));
    }
  }
  if (!cached) {
    CachedPlan fresh{std::string(model), key.tier, key.tenant, key.budget_tokens, key.budget_per,
                     owner_.plan(rules_, key, model), {}};
    if (redis_) {
      for (const auto& c : fresh.plan->checks) fresh.slots.push_back(leases_->slot(c.key));
    }
    list.push_back(std::move(fresh));
    cached = &list.back();
  }
  const Limiter::Plan* plan = cached->plan.get();
  if (hold) *hold = cached->plan;
  out.assign(plan->checks.begin(), plan->checks.end());
  tokens = std::max<std::int64_t>(tokens, 0);
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (!cached->slots.empty()) out[i].slot = cached->slots[i];
    if (const auto* l = plan->quotas[i]) {
      out[i].cost = tokens;
      out[i].lease = owner_.worker_lease(Limiter::quota_lease(*l, tokens));
    }
  }
  if (requests_only) {
    out.erase(std::remove_if(out.begin(), out.end(), [](const Check& c) { return c.kind == Kind::quota; }), out.end());
  }
}

std::unique_ptr<WorkerLimiter> Limiter::make_worker(net::any_io_executor ex) {
  return std::make_unique<WorkerLimiter>(*this, std::move(ex));
}

void Limiter::attach(WorkerLimiter* w) {
  std::lock_guard lock(mu_);
  workers_.push_back(w);
}

void Limiter::detach(WorkerLimiter* w) {
  std::lock_guard lock(mu_);
  std::erase(workers_, w);
}

Limiter::Status Limiter::status() const {
  Status s;
  s.configured = std::string(config::to_string(cfg_->rate_limits.backend));
  const auto now = rules();
  const bool budgets = budgets_.load(std::memory_order_relaxed);
  {
    // (Counted with no limit in force too: the workers hold their connections.)
    std::lock_guard lock(mu_);
    for (const auto* w : workers_) {
      if (const auto* r = w->redis()) {
        ++s.connections;
        if (r->up()) ++s.connections_up;
        auto e = r->last_error();
        if (!e.empty()) s.last_error = std::move(e);
        s.reconnects += r->reconnects();
      }
    }
  }
  if (!now->active && !budgets) {
    s.active = "none";
    s.reason = "no limits configured";
    return s;
  }
  if (!wants_redis_) {
    s.active = "memory";
    s.reason = "configured";
    return s;
  }
  if (s.connections > 0 && s.connections_up == s.connections) {
    s.active = "redis";
  } else if (s.connections_up > 0) {
    s.active = "mixed";
    s.reason = "some workers lost Redis: " + s.last_error;
  } else {
    // Each limit has its own policy (rate_limits.on_redis_down is only their default):
    // refusing only when every limit refuses, as every limited request then is.
    const auto& rl = now->limits();
    std::size_t closed = 0;
    for (const auto& l : rl.requests) closed += l.on_redis_down == DownPolicy::closed;
    for (const auto& l : rl.tokens) closed += l.on_redis_down == DownPolicy::closed;
    const std::size_t limits = rl.requests.size() + rl.tokens.size();
    s.active = limits > 0 && closed == limits ? "refusing" : "memory";
    s.reason = s.connections ? "redis unreachable: " + s.last_error : "starting";
    if (closed > 0 && closed < limits) {
      s.reason += "; " + std::to_string(closed) + " of " + std::to_string(limits) +
                  " limits refuse meanwhile (on_redis_down: closed), the others count per instance";
    }
  }
  return s;
}

Limiter::Totals Limiter::totals() const {
  Totals t;
  std::lock_guard lock(mu_);
  for (const auto* w : workers_) {
    const Stats& s = w->stats();
#define SLUICE_LIMITER_SUM(name) t.name += s.name.load(std::memory_order_relaxed);
    SLUICE_LIMITER_COUNTERS(SLUICE_LIMITER_SUM)
#undef SLUICE_LIMITER_SUM
  }
  return t;
}

// Settlements waiting for the next batch, and whether a batch is in flight.
struct WorkerLimiter::SettleQueue {
  struct Entry {
    std::string key;     // quota counter with its period
    std::string tag;     // "r:<reservation id>", "c:<lease id>" or "x:<lease id>"
    std::int64_t amount = 0;
    std::int64_t actual = 0;
  };
  std::vector<Entry> entries;
  bool flushing = false;
  bool stopped = false;  // the worker is gone: stop waiting for Redis
  bool closing = false;  // shutdown: send at once, give every token lease back
  int refilling = 0;     // lease refills asked of Redis, not answered yet
  // Kept while Redis is down, up to this many entries; beyond, the oldest are dropped
  // (their reservations expire on their own, the usage goes uncharged; counted).
  static constexpr std::size_t kMaxEntries = 100000;

  std::size_t sending = 0;  // the first `sending` entries are in a script call now
  // A batch whose answer was lost (it may have run): the first `resend` entries, sent
  // again as they were, under the same id, until Redis answers (the id makes a second
  // run do nothing).
  std::size_t resend = 0;
  // This worker's batches are numbered: Redis keeps the last number it ran per worker,
  // and a resent batch that already ran finds its number there.
  std::string worker = new_request_id();
  std::uint64_t seq = 0;
  std::string record_ms;  // how long Redis keeps an admission's record (Limiter::record_ms)

  // Makes room for n more entries; returns how many were dropped.
  std::size_t make_room(std::size_t n) {
    if (entries.size() + n <= kMaxEntries) return 0;
    const std::size_t keep = std::max(sending, resend);
    const std::size_t drop = std::min(entries.size() - keep, entries.size() + n - kMaxEntries);
    entries.erase(entries.begin() + static_cast<std::ptrdiff_t>(keep),
                  entries.begin() + static_cast<std::ptrdiff_t>(keep + drop));
    return drop;
  }
  // The first n entries left (Redis ran them, or refused them).
  void pop(std::size_t n) {
    sending = 0;
    resend = 0;
    entries.erase(entries.begin(), entries.begin() + static_cast<std::ptrdiff_t>(n));
  }
  // Admission `id`, whose first counter is `key`, was given up after it was sent: it is
  // voided (what it took, if it ran, is given back; if it has not run yet, it never will).
  std::size_t void_admission(std::string_view key, const std::string& id) {
    const std::size_t dropped = make_room(1);
    entries.push_back({std::string(key), "v:" + id, 0, 0});
    return dropped;
  }
};

void WorkerLimiter::refresh() {
  // (The plans in use stay alive with the requests that hold them.)
  if (const auto gen = owner_.generation_.load(std::memory_order_acquire); gen != generation_ || !rules_) {
    const bool reload = rules_ != nullptr;
    rules_ = owner_.rules();
    generation_ = gen;
    plans_.clear();
    if (reload && redis_) {
      leases_->forget();  // (units taken under the old limits)
      if (leases_->busy() && !settles_->flushing) flush_settlements();
    }
  }
}

WorkerLimiter::WorkerLimiter(Limiter& owner, net::any_io_executor ex)
    : owner_(owner), ex_(std::move(ex)), leases_(std::make_unique<LeaseTable>()) {
  if (owner_.wants_redis_) {
    const auto& rs = owner_.cfg_->redis;
    std::string err;
    auto ep = store::parse_redis_url(rs.url, &err);
    if (!ep) throw std::runtime_error("redis.url: " + err);  // checked at startup already
    store::RedisOptions opt;
    opt.command_timeout = rs.timeout;
    opt.connect_timeout = rs.connect_timeout;
    opt.reconnect_interval = rs.retry_interval;
    redis_ = std::make_shared<store::RedisConnection>(ex_, *ep, opt);
    settles_ = std::make_shared<SettleQueue>();
    settles_->record_ms = std::to_string(owner_.record_ms_.count());
    // Every second: token leases that ended while no request settled here are given back
    // by a flush.
    net::co_spawn(
        ex_,
        [this, q = settles_]() -> net::awaitable<void> {
          net::steady_timer t{co_await net::this_coro::executor};
          for (;;) {
            t.expires_after(std::chrono::seconds(1));
            co_await t.async_wait(net::as_tuple(net::use_awaitable));
            if (q->stopped) co_return;  // `this` is gone
            if (!q->flushing && (!q->entries.empty() || leases_->busy())) flush_settlements();
          }
        },
        net::detached);
    redis_->start();
  }
  owner_.attach(this);
}

WorkerLimiter::~WorkerLimiter() {
  owner_.detach(this);
  if (settles_) settles_->stopped = true;
  if (redis_) redis_->stop();
}

// The id of a request's token reservations (none without a quota). Generated here, never
// the client's X-Request-Id: a repeated id would merge reservations. (Redis admissions
// always have one: it names the call, so that a lost one can be voided.)
static std::string reservation_id(std::span<const Check> checks) {
  for (const auto& c : checks) {
    if (c.kind == Kind::quota) return new_request_id();
  }
  return {};
}

// A request whose own token cost is above a token limit can never pass it, whatever is
// used or reserved: it is refused at once (nothing counted, no Retry-After), not asked of
// a counter that would answer "retry at the end of the period". With `bound`, the cost is
// an upper bound: the caller counts the prompt exactly and asks again (recount).
static bool too_large(std::span<const Check> checks, bool bound, Admission& out) {
  for (const auto& c : checks) {
    if (c.kind != Kind::quota || c.cost <= c.limit) continue;
    out = Admission{};
    if (bound) {
      out.reason = Reason::token_limit_exceeded;
      out.recount = true;
      return true;
    }
    out.reason = Reason::request_too_large;
    out.tokens = {true, c.limit, 0, 0};
    out.message = "this request needs " + std::to_string(c.cost) + " tokens (prompt + max output), more than token limit " +
                  *c.id + " allows in a whole " + (c.window_ms == 0 ? std::string("month") : format_reset(c.window_ms)) +
                  " (" + std::to_string(c.limit) +
                  "): it can never pass at this limit; lower max_tokens (or n) or shorten the prompt";
    return true;
  }
  return false;
}

static bool leasable(std::span<const Check> checks) {
  return std::all_of(checks.begin(), checks.end(), [](const Check& c) { return c.lease > 0; });
}

bool WorkerLimiter::admit_now(const config::ApiKey& key, std::string_view model, std::int64_t tokens, bool bound,
                              Admission& out, bool requests_only) {
  if (!owner_.active()) return true;
  Checks checks;
  checks_for(key, model, tokens, checks, requests_only);
  if (checks.empty()) return true;
  if (too_large(checks, bound, out)) {
    if (!bound) Stats::bump(stats_->too_large);
    return true;
  }
  if (redis_ && redis_->up()) return from_leases(checks, out);
  out = admit_local(checks, bound);
  return true;
}

bool WorkerLimiter::from_leases(std::span<const Check> checks, Admission& out) {
  // Only when every limit of the request can be leased (request limits far from their
  // threshold); then a request that finds a unit of each in this worker's leases is
  // admitted without a Redis call.
  if (!leasable(checks)) return false;
  const auto taken = leases_->take(checks, out);
  if (!taken.ok) return false;
  out.counted = Counted::redis;
  Stats::bump(stats_->allowed);
  Stats::bump(stats_->by_lease);
  if (out.reserved_tokens > 0) Stats::bump(stats_->tokens_reserved, static_cast<std::uint64_t>(out.reserved_tokens));
  if (taken.refill) refill(checks, taken.refill);
  return true;
}

net::awaitable<Admission> WorkerLimiter::admit(const config::ApiKey& key, std::string_view model, std::int64_t tokens,
                                               bool bound, bool requests_only) {
  if (!owner_.active()) co_return Admission{};
  Checks checks;
  std::shared_ptr<const Limiter::Plan> plan;  // what `checks` point into, until this returns
  checks_for(key, model, tokens, checks, requests_only, &plan);
  if (checks.empty()) co_return Admission{};
  if (Admission a; too_large(checks, bound, a)) {
    if (!bound) Stats::bump(stats_->too_large);
    co_return a;
  }

  if (redis_ && redis_->up()) {
    // (Leases were tried by admit_now(), which the caller asks first.)
    // Asks for leases too when it may, unless this worker already asks for one of them.
    const bool claimed = leasable(checks) && leases_->claim(checks);
    // Unmarks the claimed counters however this ends (the coroutine may be destroyed).
    struct Unclaim {
      LeaseTable* t;
      std::span<const Check> checks;
      ~Unclaim() {
        if (t) t->release(checks);
      }
    } unclaim{claimed ? leases_.get() : nullptr, checks};
    const std::string res_id = new_request_id();
    auto calls = co_await admit_calls(redis_, owner_.admit_script_.get(), checks, res_id, claimed, settles_->record_ms);
    const bool answered = std::all_of(calls.begin(), calls.end(), [](const AdmitCall& c) { return c.answered; });
    // All or nothing across a cluster's slots: when the whole did not pass, a call that
    // took (or may have: unanswered) is voided.
    const bool passed = answered && std::all_of(calls.begin(), calls.end(), [](const AdmitCall& c) { return c.v.allowed; });
    if (calls.size() > 1 && !passed) {
      bool voided = false;
      for (const auto& c : calls) {
        if (!(c.answered ? c.v.allowed : may_have_run(c.r))) continue;
        if (const auto dropped = settles_->void_admission(checks[c.checks[0]].key, res_id)) Stats::bump(stats_->settle_errors, dropped);
        voided = true;
      }
      if (voided && !settles_->flushing) flush_settlements();
    }
    if (answered) {
      const Verdict v = merge(calls, checks.size());
      const auto received = std::chrono::steady_clock::now();
      Stats::bump(stats_->by_redis);
      auto a = finish(checks, v, Counted::redis, bound);
      a.reservation_id = res_id;
      if (v.allowed) {
        std::size_t q = 0;  // index in a.reserved: one per quota check, in order
        for (std::size_t i = 0; i < checks.size(); ++i) {
          const bool quota = checks[i].kind == Kind::quota;
          if (v.results[i].leased > 0) {
            if (quota) leases_->add_quota(checks[i], v.results[i], res_id, &a.reserved[q], received);
            else leases_->add(checks[i], v.results[i], received);
          }
          q += quota;
        }
      }
      co_return a;
    }
    // Redis failed this request (timeout, lost, or an error reply): counted as down for it.
    // A call that may still run (Redis paused, then resumed) is voided: whatever the
    // request is told now, Redis does not keep a count or a reservation of it. (Split
    // calls were voided above.)
    Stats::bump(stats_->redis_errors);
    if (calls.size() == 1 && may_have_run(calls[0].r)) {
      if (const auto dropped = settles_->void_admission(checks[0].key, res_id)) Stats::bump(stats_->settle_errors, dropped);
      if (!settles_->flushing) flush_settlements();
    }
  }
  co_return admit_local(checks, bound);
}

Admission WorkerLimiter::admit_local(std::span<const Check> checks, bool bound) {
  if (redis_) {
    for (const auto& c : checks) {
      if (c.on_redis_down == DownPolicy::closed) return refuse_unavailable(c);
    }
  }
  const auto now = unix_ms();
  if ((++admits_ & 4095) == 0) owner_.local_.sweep(now);
  std::string res_id = reservation_id(checks);
  auto v = owner_.local_.admit(checks, res_id, now);
  Stats::bump(stats_->by_local);
  auto a = finish(checks, v, Counted::local, bound);
  a.reservation_id = std::move(res_id);
  return a;
}

Admission WorkerLimiter::finish(std::span<const Check> checks, const Verdict& v, Counted where, bool bound) {
  Admission a;
  a.counted = where;
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const Check& c = checks[i];
    const CheckResult& r = v.results[i];
    HeaderLimit& h = c.tokens ? a.tokens : a.requests;
    const std::int64_t remaining = std::max<std::int64_t>(r.remaining - (v.allowed ? c.cost + r.leased : 0), 0);
    if (!h.set || remaining < h.remaining) h = {true, c.limit, remaining, r.reset_ms};
  }
  if (v.allowed) {
    Stats::bump(stats_->allowed);
    for (std::size_t i = 0; i < checks.size(); ++i) {
      if (checks[i].kind != Kind::quota) continue;
      std::string key(checks[i].key);
      key += ':';
      key += std::to_string(v.results[i].period);
      a.reserved.push_back({std::move(key), checks[i].cost, nullptr});
      a.reserved_tokens = std::max(a.reserved_tokens, checks[i].cost);
    }
    if (a.reserved_tokens > 0) Stats::bump(stats_->tokens_reserved, static_cast<std::uint64_t>(a.reserved_tokens));
    return a;
  }
  const Check& c = checks[static_cast<std::size_t>(v.denied)];
  a.retry_after_ms = v.retry_after_ms;
  if (bound && c.kind == Kind::quota) {
    a.reason = Reason::token_limit_exceeded;
    a.recount = true;
    return a;
  }
  const std::string retry = format_reset(v.retry_after_ms);
  if (c.kind != Kind::quota) {
    a.reason = Reason::rate_limited;
    a.message = "rate limit " + *c.id + " reached: " + std::to_string(c.limit) + " requests per " +
                describe_window(c.window_ms) + "; retry after " + retry;
    Stats::bump(stats_->rate_limited);
  } else {
    const bool budget = c.window_ms == 0 || c.window_ms >= 86'400'000;
    a.reason = budget ? Reason::quota_exceeded : Reason::token_limit_exceeded;
    a.message = "token limit " + *c.id + " reached: this request needs " + std::to_string(c.cost) +
                " tokens (prompt + max output), " + std::to_string(v.results[v.denied].remaining) +
                " of " + std::to_string(c.limit) + " per " + describe_window(c.window_ms) + " left; retry after " + retry;
    Stats::bump(budget ? stats_->quota_exceeded : stats_->token_limited);
  }
  return a;
}

Admission WorkerLimiter::refuse_unavailable(const Check& c) {
  Admission a;
  a.reason = Reason::limiter_unavailable;
  a.retry_after_ms = owner_.cfg_->redis.retry_interval.count();
  a.message = "the rate limiter cannot reach Redis and limit " + *c.id +
              " is set to refuse while it is down (on_redis_down: closed)";
  Stats::bump(stats_->unavailable);
  return a;
}


void WorkerLimiter::settle(Admission& a, std::int64_t actual) {
  if (a.reserved.empty()) return;
  // An upstream's usage is not trusted to be sane: one charge is at most kMaxCharge (the
  // counters' sums then cannot overflow, and the Redis scripts' numbers stay exact).
  actual = std::clamp<std::int64_t>(actual, 0, kMaxCharge);
  Stats::bump(stats_->tokens_charged, static_cast<std::uint64_t>(actual));
  if (a.reserved_tokens > actual) Stats::bump(stats_->tokens_refunded, static_cast<std::uint64_t>(a.reserved_tokens - actual));
  auto reserved = std::move(a.reserved);
  a.reserved.clear();
  if (a.counted == Counted::local || !redis_) {
    const auto now = unix_ms();
    for (const auto& r : reserved) owner_.local_.settle(r, a.reservation_id, actual, now);
    if (!redis_ || actual == 0) return;
    // Counted in memory while Redis was unreachable: the usage still reaches Redis once it
    // is back, so the shared ledger holds every token the upstream charged.
    auto& q = *settles_;
    for (auto& r : reserved) {
      if (const auto dropped = q.make_room(1)) Stats::bump(stats_->settle_errors, dropped);
      q.entries.push_back({std::move(r.key), "u:", 0, actual});
    }
    if (!q.flushing) flush_settlements();
    return;
  }
  auto& q = *settles_;
  for (auto& r : reserved) {
    if (r.lease) {
      leases_->settle(r, actual);  // its usage reaches Redis summed per lease
      continue;
    }
    if (const auto dropped = q.make_room(1)) Stats::bump(stats_->settle_errors, dropped);
    q.entries.push_back({std::move(r.key), "r:" + a.reservation_id, r.amount, actual});
  }
  if (!q.flushing) flush_settlements();
}

// Settlements leave in batches, one script call each, every kSettleEvery at most: they
// are not urgent (a reservation holds its tokens meanwhile; a lease's usage is already
// counted here), and gathering them keeps Redis's share of a request small. Each batch
// also carries what the token leases drained: their usage since the last batch, and the
// leases given back. While Redis is unreachable the entries are kept and sent once it is
// back, so a short outage loses no usage (a reservation that expired meanwhile was
// released by an admission; the late settlement then only charges the usage). A batch
// whose outcome is unknown or that Redis refused is dropped and counted in settle_errors.
void WorkerLimiter::flush_settlements() {
  refresh();
  if (settles_->flushing) return;  // (a reload's flush, just started by refresh())
  settles_->flushing = true;
  net::co_spawn(ex_, flush_loop(settles_, redis_, stats_, owner_.settle_script_.get(), leases_.get(),
                                owner_.cfg_->redis.retry_interval,
                                std::to_string(rules_->limits().reservation_ttl.count())),
                net::detached);
}

net::awaitable<void> WorkerLimiter::flush_loop(std::shared_ptr<SettleQueue> q,
                                               std::shared_ptr<store::RedisConnection> redis,
                                               std::shared_ptr<Stats> stats, const store::RedisScript* script,
                                               LeaseTable* leases, std::chrono::milliseconds retry, std::string keep) {
  constexpr std::size_t kMaxBatch = 512;  // keys per script call
  net::steady_timer wait{co_await net::this_coro::executor};
  std::vector<LeaseTable::Pending> drained;
  for (;;) {
    // (Closing: at once, yet still through the loop, so a retry never spins.)
    wait.expires_after(q->closing ? std::chrono::milliseconds(0) : kSettleEvery);
    co_await wait.async_wait(net::as_tuple(net::use_awaitable));
    if (q->stopped) co_return;  // the worker is gone (and maybe the lease table)
    drained.clear();
    // Closing: every lease has ended (those with no request in flight are given back).
    leases->drain(drained, q->closing ? LeaseTable::Clock::time_point::max() : LeaseTable::Clock::now());
    if (const auto dropped = q->make_room(drained.size())) Stats::bump(stats->settle_errors, dropped);
    for (auto& p : drained) {
      q->entries.push_back({std::move(p.key), (p.give_back ? "x:" : "c:") + p.id, p.size, p.actual});
    }
    if (q->entries.empty()) break;
    if (!redis->up()) {
      wait.expires_after(retry);
      co_await wait.async_wait(net::as_tuple(net::use_awaitable));
      if (q->stopped) co_return;
      continue;
    }
    // A batch whose answer was lost goes again as it was, under its number; a new one
    // gets the next.
    const std::size_t n = q->resend ? q->resend : std::min(q->entries.size(), kMaxBatch);
    if (!q->resend) ++q->seq;
    // (On a Redis Cluster, one call per slot the keys fall in: each part's record is under
    // its first key's tag, so a part that ran does not run again when the batch goes again.)
    const auto groups = by_slot(*redis, n, [&](std::size_t i) -> std::string_view { return q->entries[i].key; });
    std::vector<std::vector<std::string>> keys(groups.size()), args(groups.size());
    const std::string seq = std::to_string(q->seq);
    for (std::size_t g = 0; g < groups.size(); ++g) {
      keys[g].reserve(groups[g].size());
      args[g].reserve(4 + 3 * groups[g].size());
      args[g].push_back(keep);
      args[g].push_back(q->worker);
      args[g].push_back(seq);
      args[g].push_back(q->record_ms);
      for (const std::size_t i : groups[g]) {
        const auto& e = q->entries[i];
        keys[g].push_back(e.key);
        args[g].push_back(e.tag);
        args[g].push_back(std::to_string(e.amount));
        args[g].push_back(std::to_string(e.actual));
      }
    }
    q->sending = n;
    Stats::bump(stats->settle_batches);
    auto results = co_await eval_all(redis, script, std::move(keys), std::move(args));
    q->sending = 0;
    if (q->stopped) co_return;
    // Never sent: kept, and tried again a moment later (once Redis is up). Sent but
    // unanswered (a timeout, a lost connection): it may have run, so it is sent again
    // under the same id until Redis answers; a second run finds the first one's record.
    bool done = true, ran = false, not_now = false;
    std::size_t refused = 0;
    for (std::size_t g = 0; g < groups.size(); ++g) {
      const auto& r = results[g];
      if (!r.ok() || (r.reply->is_error() && retry_later(*r.reply))) {
        done = false;
        ran = ran || may_have_run(r);
        not_now = not_now || r.ok();
        continue;
      }
      ran = true;
      if (r.reply->is_error()) refused += groups[g].size();
    }
    if (!done) {
      if (!ran && !not_now) continue;
      q->resend = n;
      Stats::bump(stats->redis_errors);
      if (not_now) {  // Redis answered "not now": wait before the next try
        wait.expires_after(retry);
        co_await wait.async_wait(net::as_tuple(net::use_awaitable));
        if (q->stopped) co_return;
      }
      continue;
    }
    // Settlements queued meanwhile were appended: only these n leave the queue.
    q->pop(n);
    if (refused) Stats::bump(stats->settle_errors, refused);
  }
  q->flushing = false;
}

// A background lease request for the checks of `mask` (cost 0: it takes only their
// leases), so the requests after this one find units without waiting for Redis.
void WorkerLimiter::refill(std::span<const Check> checks, std::uint32_t mask) {
  std::vector<std::string> keys;
  std::vector<Check> some;
  for (std::size_t i = 0; i < checks.size() && i < 32; ++i) {
    if (!(mask & (1u << i))) continue;
    keys.emplace_back(checks[i].key);
    some.push_back(checks[i]);
    some.back().cost = 0;
  }
  ++settles_->refilling;
  net::co_spawn(ex_,
                refill_one(settles_, redis_, stats_, owner_.admit_script_.get(), leases_.get(), std::move(keys),
                           std::move(some)),
                net::detached);
}

net::awaitable<void> WorkerLimiter::refill_one(std::shared_ptr<SettleQueue> q,
                                               std::shared_ptr<store::RedisConnection> redis,
                                               std::shared_ptr<Stats> stats, const store::RedisScript* script,
                                               LeaseTable* leases, std::vector<std::string> keys,
                                               std::vector<Check> checks) {
  for (std::size_t i = 0; i < checks.size(); ++i) checks[i].key = keys[i];  // (the strings live here now)
  const std::string id = new_request_id();
  Stats::bump(stats->lease_refills);
  auto calls = co_await admit_calls(redis, script, checks, id, true, q->record_ms);
  --q->refilling;
  if (q->stopped) co_return;  // the worker is gone (and maybe the lease table)
  // (Each call stands alone: a lease is taken where one was granted.)
  for (const auto& c : calls) {
    if (c.answered) {
      const auto received = std::chrono::steady_clock::now();
      for (std::size_t j = 0; j < c.checks.size(); ++j) {
        const std::size_t i = c.checks[j];
        if (c.v.results[j].leased <= 0) continue;
        if (checks[i].kind == Kind::quota) leases->add_quota(checks[i], c.v.results[j], id, nullptr, received);
        else leases->add(checks[i], c.v.results[j], received);
      }
      continue;
    }
    Stats::bump(stats->redis_errors);
    // A refill that may still run is voided (the next flush sends it): a lease this worker
    // never learned of would hold its units until it expired.
    if (may_have_run(c.r)) {
      if (const auto dropped = q->void_admission(checks[c.checks[0]].key, id)) Stats::bump(stats->settle_errors, dropped);
    }
  }
  leases->release(checks);
}

net::awaitable<void> WorkerLimiter::drain(std::chrono::milliseconds timeout) {
  if (!settles_) co_return;  // counted in memory only: nothing waits for Redis
  const auto q = settles_;
  q->closing = true;
  const auto until = std::chrono::steady_clock::now() + timeout;
  net::steady_timer t{ex_};
  for (;;) {
    const bool left = !q->entries.empty() || leases_->busy();
    if (!q->flushing && !left && q->refilling == 0) co_return;  // all sent, every lease given back
    if (!redis_->up() || std::chrono::steady_clock::now() >= until) co_return;
    if (!q->flushing && left) flush_settlements();
    t.expires_after(std::chrono::milliseconds(5));
    co_await t.async_wait(net::as_tuple(net::use_awaitable));
  }
}

net::awaitable<void> Limiter::drain_worker() {
  const auto ex = co_await net::this_coro::executor;
  std::vector<WorkerLimiter*> here;
  {
    std::lock_guard lock(mu_);
    for (auto* w : workers_) {
      if (w->ex_ == ex) here.push_back(w);
    }
  }
  // One batch and the give-back after it, each within a command timeout; at least 200 ms.
  const auto timeout = std::max<std::chrono::milliseconds>(2 * cfg_->redis.timeout, std::chrono::milliseconds(200));
  for (auto* w : here) co_await w->drain(timeout);
}

namespace {

// A counter's field as the scripts wrote it: an integer, or a Lua number Redis printed
// with 14 significant digits ("1.2345678901234e+14") once it is that large.
std::int64_t ledger_number(const store::RedisReply& r) {
  if (r.type == store::RedisReply::Type::integer) return r.integer;
  std::int64_t n = 0;
  const auto* end = r.str.data() + r.str.size();
  if (auto [p, ec] = std::from_chars(r.str.data(), end, n); ec == std::errc() && p == end) return n;
  return static_cast<std::int64_t>(std::strtod(r.str.c_str(), nullptr));
}

}  // namespace

net::awaitable<Limiter::LedgerRead> Limiter::read_ledgers(std::vector<std::string> keys) const {
  LedgerRead out;
  if (!wants_redis_) {
    out.error = "the rate limiter counts in memory (rate_limits.backend: memory)";
    co_return out;
  }
  // A worker's connection, used on its own executor (a connection belongs to one thread):
  // one that is up, else the first (its error says why not).
  std::shared_ptr<store::RedisConnection> conn;
  net::any_io_executor ex;
  {
    std::lock_guard lock(mu_);
    for (const auto* w : workers_) {
      if (!w->redis_) continue;
      if (!conn || (!conn->up() && w->redis_->up())) {
        conn = w->redis_;
        ex = w->ex_;
      }
    }
  }
  if (!conn) {
    out.error = "no worker has a Redis connection yet";
    co_return out;
  }
  const store::RedisScript* script = ledger_script_.get();
  // (A named lambda: GCC 12 mishandles capturing lambda temporaries inside co_await.)
  auto read = [conn, script, keys = std::move(keys)]() mutable -> net::awaitable<LedgerRead> {
    LedgerRead r;
    if (!conn->up()) {
      const auto e = conn->last_error();
      r.error = "Redis unreachable" + (e.empty() ? std::string() : ": " + e);
      co_return r;
    }
    constexpr std::size_t kPerCall = 256;
    r.ledgers.resize(keys.size());
    // (On a Redis Cluster, the keys of one slot per call.)
    const auto groups = by_slot(*conn, keys.size(), [&](std::size_t i) -> std::string_view { return keys[i]; });
    for (const auto& group : groups) {
      for (std::size_t at = 0; at < group.size(); at += kPerCall) {
        const std::size_t n = std::min(kPerCall, group.size() - at);
        std::vector<std::string> some;
        some.reserve(n);
        for (std::size_t i = 0; i < n; ++i) some.push_back(keys[group[at + i]]);
        auto res = co_await conn->eval(*script, std::move(some), {});
        if (!res.ok() || res.reply->is_error() || res.reply->type != store::RedisReply::Type::array ||
            res.reply->elements.size() != 2 * n) {
          r.ledgers.clear();
          r.error = !res.ok()                ? "Redis: " + res.error
                    : res.reply->is_error() ? "Redis: " + res.reply->str
                                            : std::string("Redis: an unexpected answer to the ledger read");
          co_return r;
        }
        const auto& e = res.reply->elements;
        for (std::size_t i = 0; i < n; ++i) {
          const auto& used = e[2 * i];
          const auto& reserved = e[2 * i + 1];
          Ledger& l = r.ledgers[group[at + i]];
          l.present = !used.str.empty() || !reserved.str.empty() || used.type == store::RedisReply::Type::integer;
          if (!used.str.empty()) l.used = ledger_number(used);
          if (!reserved.str.empty()) l.reserved = ledger_number(reserved);
        }
      }
    }
    co_return r;
  };
  co_return co_await net::co_spawn(ex, std::move(read), net::use_awaitable);
}

}  // namespace sluice::limits
