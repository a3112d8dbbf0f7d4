// Admission: the Redis shared by the rate limits, the rate limits and token quotas, and
// the concurrency gate (docs/limits.md).
#include <algorithm>
#include <cctype>
#include <string>

#include "common/redis_url.hpp"
#include "config/schema.hpp"

namespace sluice::config::detail {

namespace {

const Table<RedisSettings>& redis_table() {
  const Millis positive{1};
  static const Table<RedisSettings> t{
      "redis",
      {
          text("url", &RedisSettings::url,
               "`redis://[user:password@]host[:port][/db]`, or through Sentinel "
               "`redis-sentinel://[user:password@]host[:port][,host[:port]...]/<master>[/db]` (the sentinels, "
               "port 26379 by default; the master is asked of them at each connection and followed through a "
               "failover), or a Redis Cluster `redis-cluster://[user:password@]host[:port][,host[:port]...]` "
               "(some of its nodes; the slot map is read from them and followed through failovers and "
               "migrations): `docs/redis.md`.")
              .then([](Loader& l, const YAML::Node& n, const std::string& p, RedisSettings& r) {
                std::string err;
                if (!parse_redis_url(r.url, &err)) l.fail(p, n, err);
                return true;
              })
              .from_env("SLUICE_REDIS_URL"),
          duration("timeout", &RedisSettings::timeout, positive, "Per command; slower counts as down."),
          duration("connect_timeout", &RedisSettings::connect_timeout, positive, "Connecting to Redis."),
          duration("retry_interval", &RedisSettings::retry_interval, positive, "Reconnect attempts while down."),
          text("key_prefix", &RedisSettings::key_prefix,
               "Prefix of every Redis key; non-empty, without spaces, control characters or braces.")
              .then([](Loader& l, const YAML::Node& n, const std::string& p, RedisSettings& r) {
                if (r.key_prefix.empty() || has_space_or_ctl(r.key_prefix) ||
                    r.key_prefix.find_first_of("{}") != std::string::npos) {
                  l.fail(p, n, "must be non-empty, without spaces, control characters or braces");
                }
                return true;
              }),
      }};
  return t;
}

const Enum<LimiterBackend>& backend_enum() {
  static const Enum<LimiterBackend> e{
      "backend",
      {{"memory", LimiterBackend::memory}, {"redis", LimiterBackend::redis}, {"auto", LimiterBackend::auto_}}};
  return e;
}

const Enum<DownPolicy>& down_enum() {
  static const Enum<DownPolicy> e{"on_redis_down",
                                  {{"open", DownPolicy::open}, {"closed", DownPolicy::closed}},
                                  "expected open (count per instance) or closed (refuse)"};
  return e;
}

const Enum<LimitScope>& scope_enum() {
  static const Enum<LimitScope> e{"scope",
                                  {{"key", LimitScope::key},
                                   {"tier", LimitScope::tier},
                                   {"tenant", LimitScope::tenant},
                                   {"model", LimitScope::model},
                                   {"tenant_model", LimitScope::tenant_model}}};
  return e;
}

const Enum<LimitAlgorithm>& algorithm_enum() {
  static const Enum<LimitAlgorithm> e{"algorithm",
                                      {{"fixed_window", LimitAlgorithm::fixed_window},
                                       {"sliding_window", LimitAlgorithm::sliding_window},
                                       {"sliding_log", LimitAlgorithm::sliding_log},
                                       {"token_bucket", LimitAlgorithm::token_bucket}}};
  return e;
}

const Enum<QuotaPeriod>& period_enum() {
  static const Enum<QuotaPeriod> e{"period",
                                   {{"minute", QuotaPeriod::minute},
                                    {"hour", QuotaPeriod::hour},
                                    {"day", QuotaPeriod::day},
                                    {"month", QuotaPeriod::month}}};
  return e;
}

// Below 10^14: Redis's Lua numbers (doubles, printed with 14 digits) keep every count exact.
constexpr long long kMaxLimit = 99'999'999'999'999LL;

// A limit's filter: applies only to requests of that key, tier, tenant or model.
template <class L>
Key<L> filter(std::string_view name, std::string LimitMatch::*m, std::string doc) {
  return custom<L>(name, "string", "any", std::move(doc),
                   [name, m](Loader& l, const YAML::Node& v, const std::string& p, L& lim) {
                     std::string& out = lim.when.*m;
                     if (l.get_string(v, p, out) && out.empty()) l.fail(p, v, "must not be empty (omit it to match any)");
                     l.limit_filters_.push_back({p, l.line_of(v), std::string(name), out});
                     return true;
                   });
}

template <class L>
Key<L> scope_key() {
  return choice("scope", &L::scope, scope_enum(), "What one counter aggregates over.")
      .needed(" (key, tier, tenant, model or tenant_model)");
}

template <class L>
Key<L> name_key() {
  return custom<L>(
      "name", "string", "none",
      "Names the limit (letters, digits, `-` and `_`, at most 64; unique in its list): errors and headers say it, and "
      "its counters are named after it, so reordering or editing the list (a reload) keeps its count. Without a name "
      "the limit's position names its counters: one inserted before it starts them afresh.",
      [](Loader& l, const YAML::Node& v, const std::string& p, L& lim) {
        if (!l.get_string(v, p, lim.name)) return false;
        const bool ok = !lim.name.empty() && lim.name.size() <= 64 &&
                        std::all_of(lim.name.begin(), lim.name.end(), [](char c) {
                          return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
                        });
        if (!ok) {
          l.fail(p, v, "a limit's name is 1 to 64 letters, digits, '-' or '_' (got '" + lim.name + "')");
          return false;
        }
        lim.id = lim.name;
        return true;
      });
}

template <class L>
Key<L> down_key() {
  return choice("on_redis_down", &L::on_redis_down, down_enum(), "While Redis is unreachable.")
      .with_default("`rate_limits.on_redis_down`")
      .read_at(1);
}

template <class L>
Key<L> lease_key(long long max, std::string doc) {
  return custom<L>("lease", "integer or `auto`", "`auto`", std::move(doc),
                   [max](Loader& l, const YAML::Node& v, const std::string& p, L& lim) {
                     return l.get_lease(v, p, max, lim.lease);
                   })
      .read_at(3);
}

const Table<RequestLimit>& request_limit_table() {
  static const Table<RequestLimit> t{
      "rate_limits.requests[]",
      {
          name_key<RequestLimit>(),
          scope_key<RequestLimit>(),
          filter<RequestLimit>("key", &LimitMatch::key, "Only requests with this key (a key name)."),
          filter<RequestLimit>("tier", &LimitMatch::tier, "Only requests of keys of this tier."),
          filter<RequestLimit>("tenant", &LimitMatch::tenant, "Only requests of keys of this tenant."),
          filter<RequestLimit>("model", &LimitMatch::model, "Only requests for this alias."),
          choice("algorithm", &RequestLimit::algorithm, algorithm_enum(),
                 "How the window counts; `sliding_log` is exact (every admitted request's time in the window) "
                 "and never leased.")
              .read_at(3),
          integer("limit", &RequestLimit::limit, 1, kMaxLimit,
                  "Requests per window (below 10^14: Redis's Lua numbers keep every count exact); at most "
                  "100000 with `sliding_log`.")
              .needed()
              .read_at(2),
          duration("window", &RequestLimit::window, Millis{1000}, "The window.").read_at(3),
          custom<RequestLimit>("burst", "integer", "`limit`", "Bucket capacity (`token_bucket` only); 1–1000000000000.",
                               [](Loader& l, const YAML::Node& v, const std::string& p, RequestLimit& lim) {
                                 if (lim.algorithm != LimitAlgorithm::token_bucket) {
                                   l.fail(p, v, "burst applies only to algorithm token_bucket");
                                   return false;
                                 }
                                 return l.get_int(v, p, 1, 1'000'000'000'000LL, lim.burst);
                               })
              .read_at(3),
          down_key<RequestLimit>(),
          lease_key<RequestLimit>(1'000'000'000LL,
                                  "Redis backend: requests a worker may take in advance and admit locally; `auto` = "
                                  "limit / 1000 (at most 1000; none below 1000 per window); 0 = off."),
      }};
  return t;
}

const Table<TokenLimit>& token_limit_table() {
  static const Table<TokenLimit> t{
      "rate_limits.tokens[]",
      {
          name_key<TokenLimit>(),
          scope_key<TokenLimit>(),
          filter<TokenLimit>("key", &LimitMatch::key, "Only requests with this key (a key name)."),
          filter<TokenLimit>("tier", &LimitMatch::tier, "Only requests of keys of this tier."),
          filter<TokenLimit>("tenant", &LimitMatch::tenant, "Only requests of keys of this tenant."),
          filter<TokenLimit>("model", &LimitMatch::model, "Only requests for this alias."),
          integer("limit", &TokenLimit::limit, 1, kMaxLimit, "Tokens per period (below 10^14).").needed().read_at(2),
          choice("per", &TokenLimit::per, period_enum(), "The period.")
              .needed(" (minute, hour, day or month)")
              .read_at(3),
          down_key<TokenLimit>(),
          lease_key<TokenLimit>(1'000'000'000'000LL,
                                "Redis backend: tokens a process may reserve in advance; `auto` = limit / 1000 for "
                                "limits of a million tokens or more (at most 1024 requests' worth); 0 = off."),
      }};
  return t;
}

// What a request limit's keys must agree on, once its entry is read.
void check_request_limit(Loader& l, const YAML::Node& n, const std::string& path, const Fields& f,
                         RequestLimit& lim) {
  if (lim.algorithm != LimitAlgorithm::sliding_log) return;
  // One entry per request in the window, in Redis and in memory: exact, for small limits.
  if (lim.limit > kMaxSlidingLog) {
    const auto* at = Loader::get(f, "limit");
    l.error(join(path, "limit"), l.line_of(at ? *at : n),
            "algorithm sliding_log keeps one entry per request of the window: limit at most " +
                std::to_string(kMaxSlidingLog) + " (got " + std::to_string(lim.limit) +
                "); use sliding_window for larger limits");
  }
  if (lim.lease > 0) {
    l.error(join(path, "lease"), l.line_of(*Loader::get(f, "lease")),
            "algorithm sliding_log is never leased (every request is logged): remove lease");
  }
  lim.lease = 0;
}

void check_token_limit(Loader&, const YAML::Node&, const std::string&, const Fields&, TokenLimit&) {}

// The entries of rate_limits.requests or rate_limits.tokens.
template <class L>
bool read_limits(Loader& l, const YAML::Node& v, const std::string& path, const Table<L>& table,
                 std::vector<L>& out, const char* id,
                 void (*check)(Loader&, const YAML::Node&, const std::string&, const Fields&, L&)) {
  if (v.IsNull()) return true;
  if (!v.IsSequence()) {
    l.fail(path, v, std::string("expected a list of limits, got ") + kind_of(v));
    return false;
  }
  for (size_t i = 0; i < v.size(); ++i) {
    L lim;
    lim.id = std::string(id) + "[" + std::to_string(i) + "]";
    Fields f;
    const std::string p = index(path, i);
    if (!table.read(l, v[i], p, lim, &f)) continue;
    check(l, v[i], p, f, lim);
    if (!lim.name.empty() && std::any_of(out.begin(), out.end(), [&](const L& o) { return o.name == lim.name; })) {
      l.error(join(p, "name"), l.line_of(*Loader::get(f, "name")), "another limit of this list is named '" + lim.name + "'");
    }
    out.push_back(std::move(lim));
  }
  return true;
}

const Table<RateLimits>& rate_limits_table() {
  static const Table<RateLimits> t{
      "rate_limits",
      {
          choice("backend", &RateLimits::backend, backend_enum(),
                 "Where the counters are: this instance, Redis, or Redis with a per-instance count while it is down.")
              .from_env("SLUICE_RATE_LIMIT_BACKEND", "(`memory`, `redis` or `auto`); the default of `on_redis_down` follows it"),
          choice("on_redis_down", &RateLimits::on_redis_down, down_enum(),
                 "While Redis is unreachable: count per instance (`open`) or refuse (`closed`); the default of every "
                 "limit.")
              .with_default("`closed` with backend `redis`, else `open`"),
          custom<RateLimits>("requests", "list of maps", "none", "Request rate limits, see `rate_limits.requests[]`.",
                             [](Loader& l, const YAML::Node& v, const std::string& p, RateLimits& rl) {
                               return read_limits(l, v, p, request_limit_table(), rl.requests, "requests", check_request_limit);
                             })
              .read_at(1),  // after reserve_output_tokens and reservation_ttl
          custom<RateLimits>("tokens", "list of maps", "none", "Token quotas, see `rate_limits.tokens[]`.",
                             [](Loader& l, const YAML::Node& v, const std::string& p, RateLimits& rl) {
                               return read_limits(l, v, p, token_limit_table(), rl.tokens, "tokens", check_token_limit);
                             })
              .read_at(1),
          integer("reserve_output_tokens", &RateLimits::reserve_output_tokens, 0, 100'000'000,
                  "Output tokens reserved when a request sets no `max_tokens`."),
          duration("reservation_ttl", &RateLimits::reservation_ttl, Millis{1000},
                   "A reservation not settled by then is released; at least `timeouts.total`.")
              .with_default("`timeouts.total` + 1m")
              .then([](Loader& l, const YAML::Node& n, const std::string&, RateLimits&) {
                l.reservation_ttl_line_ = l.line_of(n);
                return true;
              }),
      }};
  return t;
}

// One class's longest wait; max_wait is indexed by Priority.
Key<Concurrency> wait_key(std::string_view name, Priority pr, std::string doc) {
  const int i = static_cast<int>(pr);
  return make_key<Concurrency>(
      name, "duration", duration_allowed(Millis{0}), std::move(doc), {},
      [i](Loader& l, const YAML::Node& n, const std::string& p, Concurrency& c) {
        return l.get_duration(n, p, Millis{0}, c.max_wait[i]);
      },
      [i](const Concurrency& c) { return fmt_duration(c.max_wait[i]); });
}

const Table<Concurrency>& max_wait_table() {
  static const Table<Concurrency> t{
      "concurrency.max_wait",
      {
          wait_key("vip", Priority::vip, "Longest wait of a vip request; then it is demoted to standard.").read_at(2),
          wait_key("premium", Priority::premium, "Longest wait of a premium request; then it is demoted to standard.")
              .read_at(1),
          wait_key("standard", Priority::standard, "Longest wait of a standard request; then 503."),
      }};
  return t;
}

const Table<Concurrency>& concurrency_table() {
  static const Table<Concurrency> t{
      "concurrency",
      {
          integer("per_key", &Concurrency::per_key, 0, 1'000'000, "Requests in flight per key (0 = unlimited)."),
          integer("queue_size", &Concurrency::queue_size, 0, 1'000'000, "Waiting requests per instance; beyond: 429."),
          group("max_wait", max_wait_table(), "Longest wait per queue class."),
          custom<Concurrency>("tier_priority", "map of tier: class", "none",
                              "The queue class (`vip`, `premium`, `standard`) of each key tier.",
                              [](Loader& l, const YAML::Node& v, const std::string& p, Concurrency& cc) {
                                if (v.IsNull()) return true;
                                if (!v.IsMap()) {
                                  l.fail(p, v, std::string("expected a map of tier: class, got ") + kind_of(v));
                                  return false;
                                }
                                for (auto it = v.begin(); it != v.end(); ++it) {
                                  const YAML::Node k = it->first;
                                  const YAML::Node val = it->second;
                                  std::string tier;
                                  if (!l.get_string(k, p, tier)) continue;
                                  Priority pr{};
                                  if (l.get_priority(val, join(p, tier), pr)) cc.tier_priority[tier] = pr;
                                }
                                return true;
                              }),
          custom<Concurrency>("urgent_keywords", "list of strings", "none",
                              "Words that make a request urgent when its last user message holds one (the article's "
                              "`紧急`, `立刻`, `马上`; ASCII letters in any case): it is raised to `urgent_class`, "
                              "within its key's `max_priority`.",
                              [](Loader& l, const YAML::Node& v, const std::string& p, Concurrency& cc) {
                                return read_list(l, v, p, "keywords", [&](const YAML::Node& e, const std::string& ep, std::string w) {
                                  (void)e;
                                  if (w.empty()) {
                                    l.error(ep, l.line_of(e), "a keyword must not be empty");
                                    return;
                                  }
                                  cc.urgent_keywords.push_back(std::move(w));
                                });
                              }),
          custom<Concurrency>("urgent_class", "`vip`, `premium` or `standard`", "`premium`",
                              "The class an urgent request is raised to (within its key's `max_priority`).",
                              [](Loader& l, const YAML::Node& n, const std::string& p, Concurrency& cc) {
                                return l.get_priority(n, p, cc.urgent_class);
                              }),
      }};
  return t;
}

}  // namespace

void read_redis(Loader& l, const YAML::Node& n, Config& c) {
  if (n.IsNull()) return;
  redis_table().read(l, n, "redis", c.redis);
}

void read_rate_limits(Loader& l, const YAML::Node& n, Config& c) {
  if (n.IsNull()) return;
  rate_limits_table().read(l, n, "rate_limits", c.rate_limits);
}

void read_concurrency(Loader& l, const YAML::Node& n, Config& c) {
  if (n.IsNull()) return;
  concurrency_table().read(l, n, "concurrency", c.concurrency);
}

bool Loader::get_priority(const YAML::Node& n, const std::string& path, Priority& out) {
  static const Enum<Priority> e{
      "priority", {{"vip", Priority::vip}, {"premium", Priority::premium}, {"standard", Priority::standard}}};
  return e.read(*this, n, path, out);
}

bool Loader::get_lease(const YAML::Node& n, const std::string& path, long long max, std::int64_t& out) {
  std::string text;
  if (!scalar(n, path, "an integer or auto", text)) return false;
  if (trim(text) == "auto") {
    out = -1;
    return true;
  }
  return get_int(n, path, 0, max, out);
}

void redis_env(Loader& l, Config& c) { redis_table().apply_env(l, c.redis); }

void rate_limits_env(Loader& l, Config& c) { rate_limits_table().apply_env(l, c.rate_limits); }

void admission_env_reference(std::vector<EnvDoc>& out) {
  redis_table().env_doc(out, "redis");
  rate_limits_table().env_doc(out, "rate_limits");
}

void check_admission(Loader& l, Config& c, const std::unordered_map<std::string_view, size_t>& aliases,
                     const std::unordered_map<std::string_view, size_t>& names) {
  // A filter naming nothing that exists is surely a typo: the limit would never apply.
  for (const auto& lf : l.limit_filters_) {
    if (lf.value.empty()) continue;
    if (lf.field == "model" && !aliases.count(lf.value)) l.error(lf.path, lf.line, "unknown model alias " + q(lf.value));
    if (lf.field == "key" && !names.count(lf.value)) l.error(lf.path, lf.line, "unknown key name " + q(lf.value));
  }
}

void check_rate_limits(Loader& l, Config& c) {
  auto& rl = c.rate_limits;
  for (auto& lim : rl.requests) {
    if (lim.burst == 0) lim.burst = lim.limit;
    if (lim.lease < 0) lim.lease = lim.limit >= 1000 ? std::min<std::int64_t>(lim.limit / 1000, 1000) : 0;
  }
  if (rl.reservation_ttl.count() == 0) {
    rl.reservation_ttl = c.timeouts.total + Millis(60000);
  } else if (rl.reservation_ttl < c.timeouts.total) {
    // A request may run for timeouts.total: its reservation would expire under it, and
    // what it holds be admitted again meanwhile.
    l.error("rate_limits.reservation_ttl", l.reservation_ttl_line_,
            "must be at least timeouts.total (" + std::to_string(c.timeouts.total.count()) +
                " ms): a running request's reservation would expire under it (default: timeouts.total + 1m)");
  }
  // `redis` means the shared count is the point: refuse while Redis is down unless told
  // otherwise. `auto` prefers serving: it counts per instance meanwhile.
  if (rl.on_redis_down == DownPolicy::inherit) {
    rl.on_redis_down = rl.backend == LimiterBackend::redis ? DownPolicy::closed : DownPolicy::open;
  }
  for (auto& lim : rl.requests) {
    if (lim.on_redis_down == DownPolicy::inherit) lim.on_redis_down = rl.on_redis_down;
  }
  for (auto& lim : rl.tokens) {
    if (lim.on_redis_down == DownPolicy::inherit) lim.on_redis_down = rl.on_redis_down;
  }
}

std::string describe_admission(const Config& c) {
  std::string out;
  const auto& rl = c.rate_limits;
  if (rl.any()) {
    out += "rate limits: backend " + std::string(to_string(rl.backend));
    if (rl.backend != LimiterBackend::memory) {
      auto ep = parse_redis_url(c.redis.url);  // valid: checked at load
      const std::string url = ep ? sluice::describe(*ep) : c.redis.url;
      out += " (" + url + ", on_redis_down " + (rl.on_redis_down == DownPolicy::closed ? "closed" : "open") + ")";
    }
    out += ", " + std::to_string(rl.requests.size()) + " request limits, " + std::to_string(rl.tokens.size()) +
           " token limits\n";
  } else {
    out += "rate limits: none\n";
  }
  const auto& cc = c.concurrency;
  out += "concurrency: per key " + (cc.per_key ? std::to_string(cc.per_key) : std::string("unlimited")) + ", queue " +
         std::to_string(cc.queue_size) + ", max wait vip " + fmt_duration(cc.max_wait[2]) + " premium " +
         fmt_duration(cc.max_wait[1]) + " standard " + fmt_duration(cc.max_wait[0]) + "\n";
  return out;
}

void admission_reference(std::vector<TableDoc>& out) {
  out.push_back(redis_table().doc());
  out.push_back(rate_limits_table().doc());
  out.push_back(request_limit_table().doc());
  out.push_back(token_limit_table().doc());
  out.push_back(concurrency_table().doc());
  out.push_back(max_wait_table().doc());
}

}  // namespace sluice::config::detail

namespace sluice::config {

std::string_view to_string(LimitScope s) noexcept {
  switch (s) {
    case LimitScope::key: return "key";
    case LimitScope::tier: return "tier";
    case LimitScope::tenant: return "tenant";
    case LimitScope::model: return "model";
    case LimitScope::tenant_model: return "tenant_model";
  }
  return "?";
}

std::string_view to_string(LimitAlgorithm a) noexcept {
  switch (a) {
    case LimitAlgorithm::fixed_window: return "fixed_window";
    case LimitAlgorithm::sliding_window: return "sliding_window";
    case LimitAlgorithm::token_bucket: return "token_bucket";
    case LimitAlgorithm::sliding_log: return "sliding_log";
  }
  return "?";
}

std::string_view to_string(LimiterBackend b) noexcept {
  switch (b) {
    case LimiterBackend::memory: return "memory";
    case LimiterBackend::redis: return "redis";
    case LimiterBackend::auto_: return "auto";
  }
  return "?";
}

std::string_view to_string(QuotaPeriod p) noexcept {
  switch (p) {
    case QuotaPeriod::minute: return "minute";
    case QuotaPeriod::hour: return "hour";
    case QuotaPeriod::day: return "day";
    case QuotaPeriod::month: return "month";
  }
  return "?";
}

std::string_view to_string(Priority p) noexcept {
  switch (p) {
    case Priority::standard: return "standard";
    case Priority::premium: return "premium";
    case Priority::vip: return "vip";
  }
  return "?";
}

std::optional<Priority> priority_from_name(std::string_view n) noexcept {
  if (n == "standard") return Priority::standard;
  if (n == "premium") return Priority::premium;
  if (n == "vip") return Priority::vip;
  return std::nullopt;
}

}  // namespace sluice::config
