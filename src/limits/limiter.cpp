#include "limits/limiter.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <array>
#include <charconv>
#include <chrono>
#include <cmath>
#include <unordered_map>
#include <unordered_set>

#include "common/ids.hpp"
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
  return (m.key.empty() || m.key == k.name) && (m.tier.empty() || m.tier == k.tier) &&
         (m.tenant.empty() || m.tenant == k.tenant) && (m.model.empty() || m.model == model);
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

std::int64_t period_ms(config::QuotaPeriod p) {
  switch (p) {
    case config::QuotaPeriod::minute: return 60'000;
    case config::QuotaPeriod::hour: return 3'600'000;
    case config::QuotaPeriod::day: return 86'400'000;
    case config::QuotaPeriod::month: return 0;
  }
  return 60'000;
}

const char* kind_arg(Kind k) {
  switch (k) {
    case Kind::fixed_window: return "fw";
    case Kind::sliding_window: return "sw";
    case Kind::token_bucket: return "tb";
    case Kind::quota: return "tq";
  }
  return "fw";
}

std::string describe_window(std::int64_t ms) {
  if (ms == 0) return "month";
  return format_reset(ms);
}

}  // namespace

void append_reset(std::string& out, std::int64_t ms) {
  // Formatted in place: it is on every limited request's headers (twice).
  char buf[48];
  char* p = buf;
  char* const end = buf + sizeof buf;
  auto put = [&](std::int64_t v, char unit) {
    p = std::to_chars(p, end - 2, v).ptr;  // (a 64-bit value always fits)
    if (p < end - 1) *p++ = unit;
  };
  if (ms < 0) ms = 0;
  if (ms < 1000) {
    put(ms, 'm');
    if (p < end) *p++ = 's';
    out.append(buf, p);
    return;
  }
  std::int64_t s = (ms + 999) / 1000;
  if (s >= 3600) {
    put(s / 3600, 'h');
    s %= 3600;
    put(s / 60, 'm');
    s %= 60;
  } else if (s >= 60) {
    put(s / 60, 'm');
    s %= 60;
  }
  put(s, 's');
  out.append(buf, p);
}

std::string format_reset(std::int64_t ms) {
  std::string s;
  append_reset(s, ms);
  return s;
}

// What this process took from Redis in advance, shared by its workers.
//   Request limits: units already counted in Redis. Admitting with one never over-admits;
//     units left unused when their window ends are lost (a small under-admission,
//     bounded by the lease size per process). A window's units end a little before it
//     does: a unit counted in one window must not admit a request of the next.
//   Token quotas: a reservation of many requests' worth (a lease, "<id>:L:<size>" in the
//     reservation set). Requests reserve from it locally; their settlements draw on it in
//     Redis; when it has ended (after 2 s, or at its period's end) and its last request
//     settled, what is left is given back (each worker looks every second). If the
//     process dies, it expires like any reservation.
class LeaseTable {
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };
  template <class V>
  using Map = std::unordered_map<std::string, V, Hash, std::equal_to<>>;

 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kQuotaLeaseLife{2000};

  // A lease given back, to be settled ('x') by the worker that finds it.
  struct Release {
    std::string key, id;
    std::int64_t size = 0;
  };

  // Takes what the request needs from every check's lease, or nothing. Fills the headers
  // from the leases and, for quotas, what the request reserved.
  bool take(const std::vector<Check>& checks, Admission& a) {
    // What each check draws on, found once (the counter keys are long: hashing them is
    // most of the cost here).
    constexpr std::size_t kMaxChecks = 16;
    if (checks.size() > kMaxChecks) return false;  // (Redis decides those)
    std::array<Units*, kMaxChecks> units{};
    std::array<std::pair<const std::string*, QuotaLease*>, kMaxChecks> quotas{};
    const auto now = Clock::now();
    std::lock_guard lock(mu_);
    for (std::size_t i = 0; i < checks.size(); ++i) {
      const Check& c = checks[i];
      if (c.kind == Kind::quota) {
        auto it = current_.find(c.key);
        if (it == current_.end()) return false;
        QuotaLease& q = quota_.find(it->second)->second;
        if (q.avail < c.cost || now >= q.valid_until) return false;
        quotas[i] = {&it->second, &q};
      } else {
        auto it = units_.find(c.key);
        if (it == units_.end() || it->second.units < c.cost || now >= it->second.valid_until) return false;
        units[i] = &it->second;
      }
    }
    for (std::size_t i = 0; i < checks.size(); ++i) {
      const Check& c = checks[i];
      HeaderLimit& h = c.tokens ? a.tokens : a.requests;
      std::int64_t remaining = 0;
      Clock::time_point reset_at;
      if (c.kind == Kind::quota) {
        auto [id, q] = quotas[i];
        q->avail -= c.cost;
        ++q->inflight;
        q->remaining = std::max<std::int64_t>(q->remaining - c.cost, 0);
        remaining = q->remaining;
        reset_at = q->reset_at;
        a.reserved.push_back({q->key, c.cost, *id, q->size});
        a.reserved_tokens = std::max(a.reserved_tokens, c.cost);
      } else {
        Units& l = *units[i];
        l.units -= c.cost;
        l.remaining = std::max<std::int64_t>(l.remaining - c.cost, 0);
        remaining = l.remaining;
        reset_at = l.reset_at;
      }
      const auto reset = std::chrono::duration_cast<std::chrono::milliseconds>(reset_at - now).count();
      if (!h.set || remaining < h.remaining) h = {true, c.limit, remaining, std::max<std::int64_t>(reset, 0)};
    }
    return true;
  }

  // Whether this request should ask Redis for leases: not while another request of this
  // process already does for one of its counters (a burst would otherwise take a lease per
  // request). Marks the counters; release() unmarks them when the answer is in.
  bool claim(const std::vector<Check>& checks) {
    std::lock_guard lock(mu_);
    for (const auto& c : checks) {
      if (fetching_.find(c.key) != fetching_.end()) return false;
    }
    for (const auto& c : checks) fetching_.emplace(c.key);
    return true;
  }
  void release(const std::vector<Check>& checks) {
    std::lock_guard lock(mu_);
    for (const auto& c : checks) {
      if (auto it = fetching_.find(c.key); it != fetching_.end()) fetching_.erase(it);
    }
  }

  // A request limit's units granted with an admission.
  void add(const Check& c, const CheckResult& r, Clock::time_point received) {
    using std::chrono::milliseconds;
    Units fresh;
    fresh.period = r.period;
    fresh.units = r.leased;
    // What is left for everyone after this request, plus this process's own units.
    fresh.remaining = std::max<std::int64_t>(r.remaining - c.cost - r.leased, 0) + r.leased;
    fresh.reset_at = received + milliseconds(r.reset_ms);
    // A window's units end 50 ms before the window (the reply's travel time); a bucket's
    // after a second, so a lease does not turn a smooth rate into bursts.
    fresh.valid_until = c.kind == Kind::token_bucket ? received + milliseconds(std::min<std::int64_t>(1000, c.window_ms))
                                                     : received + milliseconds(std::max<std::int64_t>(r.reset_ms - 50, 0));
    std::lock_guard lock(mu_);
    if ((++adds_ & 1023) == 0) {
      const auto now = Clock::now();
      std::erase_if(units_, [now](const auto& kv) { return kv.second.valid_until <= now; });
    }
    auto it = units_.find(c.key);
    if (it == units_.end()) {
      units_.emplace(std::string(c.key), fresh);
      return;
    }
    Units& l = it->second;
    if (l.period == fresh.period && Clock::now() < l.valid_until) {
      // The same window: both grants are ours.
      fresh.remaining += l.units;
      fresh.units += l.units;
      fresh.valid_until = std::max(fresh.valid_until, l.valid_until);
    }
    // Otherwise the old lease belongs to an earlier window (or expired): its units are gone.
    l = fresh;
  }

  // A token lease granted with an admission; the admitted request is its first user (its
  // reservation is rewritten to draw on the lease).
  void add_quota(const Check& c, const CheckResult& r, const std::string& id, Reserved& first,
                 Clock::time_point received) {
    using std::chrono::milliseconds;
    QuotaLease q;
    q.key = first.key;
    q.size = c.cost + r.leased;
    q.avail = r.leased;
    q.inflight = 1;
    q.remaining = std::max<std::int64_t>(r.remaining - c.cost - r.leased, 0) + r.leased;
    q.reset_at = received + milliseconds(r.reset_ms);
    q.valid_until = received + std::min(kQuotaLeaseLife, milliseconds(std::max<std::int64_t>(r.reset_ms - 50, 0)));
    first.lease = id;
    first.lease_size = q.size;
    std::lock_guard lock(mu_);
    if (auto old = current_.find(c.key); old != current_.end()) {
      retire(old->second);  // (may erase it)
    }
    if (auto cur = current_.find(c.key); cur != current_.end()) cur->second = id;
    else current_.emplace(std::string(c.key), id);
    quota_.emplace(id, std::move(q));
  }

  // A request served from lease `r.lease` ended, using `actual` tokens.
  void settle_quota(const Reserved& r, std::int64_t actual) {
    std::lock_guard lock(mu_);
    auto it = quota_.find(r.lease);
    if (it == quota_.end()) return;
    QuotaLease& q = it->second;
    q.avail += r.amount - actual;
    --q.inflight;
    if (q.inflight == 0 && (q.retired || Clock::now() >= q.valid_until)) give_back(it);
  }

  bool has_releases() {
    std::lock_guard lock(mu_);
    return !releases_.empty();
  }

  // Leases given back since the last call (the caller settles them).
  std::vector<Release> take_releases() {
    std::lock_guard lock(mu_);
    // Ended leases nobody will settle again are found here too.
    const auto now = Clock::now();
    for (auto it = quota_.begin(); it != quota_.end();) {
      auto next = std::next(it);
      if (it->second.inflight == 0 && (it->second.retired || now >= it->second.valid_until)) give_back(it);
      it = next;
    }
    return std::exchange(releases_, {});
  }

 private:
  struct Units {
    std::int64_t period = 0;     // the window the units are counted in (buckets: 0)
    std::int64_t units = 0;
    std::int64_t remaining = 0;  // for the headers: left in the counter, own units included
    Clock::time_point valid_until;
    Clock::time_point reset_at;
  };
  struct QuotaLease {
    std::string key;             // the quota counter with its period
    std::int64_t size = 0;       // tokens reserved in Redis
    std::int64_t avail = 0;      // not handed out (or handed back by settlements)
    int inflight = 0;            // requests served from it, not settled yet
    bool retired = false;        // replaced by a newer lease: hands out nothing more
    std::int64_t remaining = 0;  // for the headers
    Clock::time_point valid_until;
    Clock::time_point reset_at;
  };

  void retire(const std::string& id) {
    auto it = quota_.find(id);
    if (it == quota_.end()) return;
    it->second.retired = true;
    if (it->second.inflight == 0) give_back(it);
  }
  void give_back(Map<QuotaLease>::iterator it) {
    releases_.push_back({it->second.key, it->first, it->second.size});
    for (auto c = current_.begin(); c != current_.end(); ++c) {
      if (c->second == it->first) {
        current_.erase(c);
        break;
      }
    }
    quota_.erase(it);
  }

  std::mutex mu_;
  Map<Units> units_;
  Map<QuotaLease> quota_;          // by lease id
  Map<std::string> current_;       // quota check key -> lease id handing out
  std::unordered_set<std::string, Hash, std::equal_to<>> fetching_;
  std::vector<Release> releases_;
  std::uint64_t adds_ = 0;
};

Limiter::Limiter(std::shared_ptr<const config::Config> cfg) : cfg_(std::move(cfg)) {
  const auto& rl = cfg_->rate_limits;
  active_ = rl.any();
  wants_redis_ = active_ && rl.backend != config::LimiterBackend::memory;
  // The rule's index, algorithm and window name its counters: a changed rule starts afresh.
  for (std::size_t i = 0; i < rl.requests.size(); ++i) {
    const auto& l = rl.requests[i];
    const char* alg = l.algorithm == config::LimitAlgorithm::fixed_window     ? "fw"
                      : l.algorithm == config::LimitAlgorithm::sliding_window ? "sw"
                                                                              : "tb";
    rule_names_.push_back("r" + std::to_string(i) + "." + alg + "." + std::to_string(l.window.count()));
  }
  for (std::size_t i = 0; i < rl.tokens.size(); ++i) {
    rule_names_.push_back("q" + std::to_string(i) + "." + std::string(to_string(rl.tokens[i].per)));
  }
  leases_ = std::make_unique<LeaseTable>();
  admit_script_ = std::make_unique<store::RedisScript>(std::string(kAdmitScript));
  settle_script_ = std::make_unique<store::RedisScript>(std::string(kSettleScript));
}

Limiter::~Limiter() = default;

std::int64_t Limiter::quota_lease(const config::TokenLimit& l, std::int64_t tokens) {
  if (l.lease >= 0) return l.lease;
  return l.limit >= 1'000'000 ? std::min<std::int64_t>(l.limit / 1000, 1024 * tokens) : 0;
}

std::unique_ptr<const Limiter::Plan> Limiter::plan(const config::ApiKey& key, std::string_view model) const {
  const auto& rl = cfg_->rate_limits;
  const auto& prefix = cfg_->redis.key_prefix;
  auto p = std::make_unique<Plan>();
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
      case config::LimitAlgorithm::token_bucket: c.kind = Kind::token_bucket; c.extra = l.burst; break;
    }
    p->keys.push_back(counter_key(prefix, l.scope, key, model, rule_names_[i]));
    c.on_redis_down = l.on_redis_down;
    c.lease = l.lease;
    c.id = &l.id;
    p->checks.push_back(c);
    p->quotas.push_back(nullptr);
  }
  for (std::size_t i = 0; i < rl.tokens.size(); ++i) {
    const auto& l = rl.tokens[i];
    if (!matches(l.when, key, model)) continue;
    Check c;
    c.kind = Kind::quota;
    c.tokens = true;
    c.limit = l.limit;
    c.window_ms = period_ms(l.per);
    c.cost = 0;
    c.extra = rl.reservation_ttl.count();
    p->keys.push_back(counter_key(prefix, l.scope, key, model, rule_names_[rl.requests.size() + i]));
    c.on_redis_down = l.on_redis_down;
    c.id = &l.id;
    p->checks.push_back(c);
    p->quotas.push_back(&l);
  }
  // The keys are complete: the views cannot move any more.
  for (std::size_t i = 0; i < p->checks.size(); ++i) p->checks[i].key = p->keys[i];
  return p;
}

void WorkerLimiter::checks_for(const config::ApiKey& key, std::string_view model, std::int64_t tokens,
                               std::vector<Check>& out) {
  auto& list = plans_[&key];
  const Limiter::Plan* plan = nullptr;
  for (const auto& c : list) {
    if (c.model == model) {
      plan = c.plan.get();
      break;
    }
  }
  if (!plan) {
    list.push_back({std::string(model), owner_.plan(key, model)});
    plan = list.back().plan.get();
  }
  out = plan->checks;
  tokens = std::max<std::int64_t>(tokens, 0);
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (const auto* l = plan->quotas[i]) {
      out[i].cost = tokens;
      out[i].lease = Limiter::quota_lease(*l, tokens);
    }
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
  if (!active_) {
    s.active = "none";
    s.reason = "no limits configured";
    return s;
  }
  if (!wants_redis_) {
    s.active = "memory";
    s.reason = "configured";
    return s;
  }
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
  if (s.connections > 0 && s.connections_up == s.connections) {
    s.active = "redis";
  } else if (s.connections_up > 0) {
    s.active = "mixed";
    s.reason = "some workers lost Redis: " + s.last_error;
  } else {
    s.active = cfg_->rate_limits.on_redis_down == DownPolicy::closed ? "refusing" : "memory";
    s.reason = s.connections ? "redis unreachable: " + s.last_error : "starting";
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
  // Pending "c" entry per lease: the usage of its requests adds up into one entry.
  std::unordered_map<std::string, std::size_t> lease_entry;
  bool flushing = false;
  bool stopped = false;  // the worker is gone: stop waiting for Redis
  // Kept while Redis is down, up to this many entries; beyond, the oldest are dropped
  // (their reservations expire on their own, the usage goes uncharged; counted).
  static constexpr std::size_t kMaxEntries = 100000;

  std::size_t sending = 0;  // the first `sending` entries are in a script call now

  void push(std::string key, std::string tag, std::int64_t amount, std::int64_t actual) {
    if (tag[0] == 'c') {
      auto [it, fresh] = lease_entry.try_emplace(tag, entries.size());
      if (!fresh && it->second >= sending) {
        entries[it->second].actual += actual;
        return;
      }
      it->second = entries.size();  // (an entry being sent is not changed)
    }
    entries.push_back({std::move(key), std::move(tag), amount, actual});
  }
  // The first n entries left (sent).
  void pop(std::size_t n) {
    sending = 0;
    erase(0, n);
  }
  // Drops the oldest n entries not being sent (the queue is full).
  void drop(std::size_t n) { erase(sending, n); }
  void erase(std::size_t from, std::size_t n) {
    n = std::min(n, entries.size() - from);
    entries.erase(entries.begin() + static_cast<std::ptrdiff_t>(from),
                  entries.begin() + static_cast<std::ptrdiff_t>(from + n));
    lease_entry.clear();
    for (std::size_t i = 0; i < entries.size(); ++i) {
      if (entries[i].tag[0] == 'c') lease_entry.emplace(entries[i].tag, i);
    }
  }
};

WorkerLimiter::WorkerLimiter(Limiter& owner, net::any_io_executor ex) : owner_(owner), ex_(std::move(ex)) {
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
    // Every second: give back the leases that ended while no request settled here.
    net::co_spawn(
        ex_,
        [this, q = settles_]() -> net::awaitable<void> {
          net::steady_timer t{co_await net::this_coro::executor};
          for (;;) {
            t.expires_after(std::chrono::seconds(1));
            co_await t.async_wait(net::as_tuple(net::use_awaitable));
            if (q->stopped) co_return;  // `this` is gone
            queue_releases();
            if (!q->entries.empty() && !q->flushing) flush_settlements();
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

net::awaitable<Admission> WorkerLimiter::admit(const config::ApiKey& key, std::string_view model, std::int64_t tokens) {
  if (!owner_.active_) co_return Admission{};
  std::vector<Check> checks;
  checks_for(key, model, tokens, checks);
  if (checks.empty()) co_return Admission{};
  bool any_quota = false;
  for (const auto& c : checks) any_quota |= c.kind == Kind::quota;
  // Generated here, never the client's X-Request-Id: a repeated id would merge reservations.
  // Not needed when leases serve the request.
  std::string res_id;

  if (redis_ && redis_->up()) {
    // Leases: only when every limit of the request can be leased (request limits far from
    // their threshold); then a request that finds a unit of each in this process's leases
    // is admitted without a Redis call.
    bool leasable = true;
    for (const auto& c : checks) leasable &= c.lease > 0;
    if (leasable) {
      Admission a;
      if (owner_.leases_->take(checks, a)) {
        a.counted = Counted::redis;
        Stats::bump(stats_->allowed);
        Stats::bump(stats_->by_lease);
        if (a.reserved_tokens > 0) Stats::bump(stats_->tokens_reserved, static_cast<std::uint64_t>(a.reserved_tokens));
        co_return a;
      }
      leasable = owner_.leases_->claim(checks);
    }
    // Unmarks the claimed counters however this ends (the coroutine may be destroyed).
    struct Unclaim {
      LeaseTable* t;
      const std::vector<Check>* checks;
      ~Unclaim() {
        if (t) t->release(*checks);
      }
    } unclaim{leasable ? owner_.leases_.get() : nullptr, &checks};
    if (any_quota) res_id = new_request_id();
    std::vector<std::string> keys, args;
    keys.reserve(checks.size());
    args.reserve(1 + checks.size() * 6);
    args.push_back(res_id);
    for (const auto& c : checks) {
      keys.emplace_back(c.key);
      args.emplace_back(kind_arg(c.kind));
      args.push_back(std::to_string(c.limit));
      args.push_back(std::to_string(c.window_ms));
      args.push_back(std::to_string(c.cost));
      args.push_back(std::to_string(c.extra));
      args.push_back(leasable ? std::to_string(c.lease) : std::string("0"));
    }
    auto r = co_await redis_->eval(*owner_.admit_script_, std::move(keys), std::move(args));
    const auto n = checks.size();
    if (r.ok() && r.reply->type == store::RedisReply::Type::array && r.reply->elements.size() == 3 + 4 * n) {
      const auto received = std::chrono::steady_clock::now();
      const auto& e = r.reply->elements;
      Verdict v;
      v.allowed = e[0].integer == 0;
      v.denied = static_cast<int>(e[0].integer) - 1;
      v.retry_after_ms = e[1].integer;
      v.now_ms = e[2].integer;
      v.results.resize(n);
      for (std::size_t i = 0; i < n; ++i) {
        v.results[i] = {e[3 + 4 * i].integer, e[4 + 4 * i].integer, e[5 + 4 * i].integer, e[6 + 4 * i].integer};
      }
      Stats::bump(stats_->by_redis);
      auto a = finish(checks, v, Counted::redis);
      a.reservation_id = res_id;
      if (v.allowed) {
        std::size_t q = 0;  // index in a.reserved: one per quota check, in order
        for (std::size_t i = 0; i < n; ++i) {
          const bool quota = checks[i].kind == Kind::quota;
          if (v.results[i].leased > 0) {
            if (quota) owner_.leases_->add_quota(checks[i], v.results[i], res_id, a.reserved[q], received);
            else owner_.leases_->add(checks[i], v.results[i], received);
          }
          q += quota;
        }
      }
      co_return a;
    }
    // Redis failed this request (timeout, lost, or an error reply): counted as down for it.
    Stats::bump(stats_->redis_errors);
  }
  if (redis_) {
    for (const auto& c : checks) {
      if (c.on_redis_down == DownPolicy::closed) co_return refuse_unavailable(c);
    }
  }
  const auto now = unix_ms();
  if ((++admits_ & 4095) == 0) owner_.local_.sweep(now);
  if (any_quota && res_id.empty()) res_id = new_request_id();
  auto v = owner_.local_.admit(checks, res_id, now);
  Stats::bump(stats_->by_local);
  auto a = finish(checks, v, Counted::local);
  a.reservation_id = res_id;
  co_return a;
}

Admission WorkerLimiter::finish(const std::vector<Check>& checks, const Verdict& v, Counted where) {
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
      a.reserved.push_back({std::move(key), checks[i].cost, {}, 0});
      a.reserved_tokens = std::max(a.reserved_tokens, checks[i].cost);
    }
    if (a.reserved_tokens > 0) Stats::bump(stats_->tokens_reserved, static_cast<std::uint64_t>(a.reserved_tokens));
    return a;
  }
  const Check& c = checks[static_cast<std::size_t>(v.denied)];
  a.retry_after_ms = v.retry_after_ms;
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
                " tokens (prompt estimate + max output), " + std::to_string(v.results[v.denied].remaining) +
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
  actual = std::max<std::int64_t>(actual, 0);
  Stats::bump(stats_->tokens_charged, static_cast<std::uint64_t>(actual));
  if (a.reserved_tokens > actual) Stats::bump(stats_->tokens_refunded, static_cast<std::uint64_t>(a.reserved_tokens - actual));
  auto reserved = std::move(a.reserved);
  a.reserved.clear();
  if (a.counted == Counted::local || !redis_) {
    const auto now = unix_ms();
    for (const auto& r : reserved) owner_.local_.settle(r, a.reservation_id, actual, now);
    return;
  }
  auto& q = *settles_;
  if (q.entries.size() + reserved.size() > SettleQueue::kMaxEntries) {
    const std::size_t drop = std::min(q.entries.size(), q.entries.size() + reserved.size() - SettleQueue::kMaxEntries);
    q.drop(drop);
    Stats::bump(stats_->settle_errors, drop);
  }
  for (auto& r : reserved) {
    if (!r.lease.empty()) {
      owner_.leases_->settle_quota(r, actual);
      q.push(std::move(r.key), "c:" + r.lease, r.lease_size, actual);
    } else {
      q.push(std::move(r.key), "r:" + a.reservation_id, r.amount, actual);
    }
  }
  if (owner_.leases_->has_releases()) queue_releases();
  if (!q.flushing) flush_settlements();
}

// Leases that ended and whose requests all settled: what is left of them goes back.
void WorkerLimiter::queue_releases() {
  auto& q = *settles_;
  for (auto& x : owner_.leases_->take_releases()) q.push(std::move(x.key), "x:" + x.id, x.size, 0);
}

// One script call for everything queued; when it is answered, the next batch (what was
// queued meanwhile) leaves. While Redis is unreachable the batch is kept and sent once it
// is back, so a short outage loses no usage (a reservation that expired meanwhile was
// released by an admission; the late settlement then only charges the usage). A batch
// whose outcome is unknown or that Redis refused is dropped and counted in settle_errors.
void WorkerLimiter::flush_settlements() {
  auto q = settles_;
  q->flushing = true;
  net::co_spawn(
      ex_,
      [q, redis = redis_, stats = stats_, script = owner_.settle_script_.get(),
       retry = owner_.cfg_->redis.retry_interval,
       keep = std::to_string(owner_.cfg_->rate_limits.reservation_ttl.count())]() -> net::awaitable<void> {
        constexpr std::size_t kMaxBatch = 512;  // keys per script call
        constexpr std::chrono::milliseconds kSettleDelay{5};
        net::steady_timer wait{co_await net::this_coro::executor};
        // Settlements are not urgent (the reservations hold the tokens meanwhile): gathering
        // them for a few milliseconds makes one script call carry many.
        wait.expires_after(kSettleDelay);
        co_await wait.async_wait(net::as_tuple(net::use_awaitable));
        while (!q->entries.empty() && !q->stopped) {
          if (!redis->up()) {
            wait.expires_after(retry);
            co_await wait.async_wait(net::as_tuple(net::use_awaitable));
            continue;
          }
          const std::size_t n = std::min(q->entries.size(), kMaxBatch);
          std::vector<std::string> keys, args;
          keys.reserve(n);
          args.reserve(1 + 3 * n);
          args.push_back(keep);
          for (std::size_t i = 0; i < n; ++i) {
            const auto& e = q->entries[i];
            keys.push_back(e.key);
            args.push_back(e.tag);
            args.push_back(std::to_string(e.amount));
            args.push_back(std::to_string(e.actual));
          }
          q->sending = n;
          auto r = co_await redis->eval(*script, std::move(keys), std::move(args));
          q->sending = 0;
          // Never sent: kept, and tried again a moment later (once Redis is up). Sent but
          // unanswered (a timeout, a lost connection): it may have run, and running it twice
          // would charge twice, so it is dropped like a refused one.
          if (!r.ok() && (r.error.starts_with("not connected") || r.error.starts_with("pipeline full"))) {
            wait.expires_after(retry);
            co_await wait.async_wait(net::as_tuple(net::use_awaitable));
            continue;
          }
          // Settlements queued meanwhile were appended: only these n leave the queue.
          q->pop(n);
          if (!r.ok() || r.reply->is_error()) Stats::bump(stats->settle_errors, n);
        }
        q->flushing = false;
      },
      net::detached);
}

}  // namespace sluice::limits
