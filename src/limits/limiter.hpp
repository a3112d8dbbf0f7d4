#pragma once
// Rate limits and token quotas (admission, phase 6). One Limiter per process holds the
// rules and the per-instance counters; each worker has a WorkerLimiter with its own
// pipelined Redis connection. See docs/limits.md.
#include <atomic>
#include <chrono>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <memory>
#include <algorithm>
#include <boost/container/small_vector.hpp>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/text.hpp"
#include "config/config.hpp"
#include "limits/check.hpp"
#include "limits/local.hpp"

namespace sluice::store {
class RedisConnection;
struct RedisScript;
}  // namespace sluice::store

namespace sluice::limits {

// Counters of the limiter, one set per worker, summed at scrape.
#define SLUICE_LIMITER_COUNTERS(X)                                                           \
  X(allowed) X(rate_limited) X(token_limited) X(quota_exceeded) X(unavailable)               \
  X(by_redis) X(by_local) X(by_lease) X(redis_errors) X(settle_errors)                       \
  X(tokens_reserved) X(tokens_charged) X(tokens_refunded) X(lease_refills) X(settle_batches)  \
  X(too_large)

struct Stats {
#define SLUICE_LIMITER_ATOMIC(name) std::atomic<std::uint64_t> name{0};
  SLUICE_LIMITER_COUNTERS(SLUICE_LIMITER_ATOMIC)
#undef SLUICE_LIMITER_ATOMIC
  static void bump(std::atomic<std::uint64_t>& c, std::uint64_t n = 1) {
    c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);  // one writer
  }
};

class WorkerLimiter;
class LeaseTable;

// Whether a limit's filters (`when`) select a request of key `key_name` (of `tier` and
// `tenant`) for model alias `model`: every filter that is set must match.
bool limit_applies(const config::LimitMatch& when, std::string_view key_name, std::string_view tier,
                   std::string_view tenant, std::string_view model) noexcept;

// A quota counter as the limiter holds it (its hash in Redis, or this process's memory).
struct Ledger {
  bool present = false;  // the counter exists (one that never counted, or expired, does not)
  std::int64_t used = 0, reserved = 0;
};

class Limiter {
 public:
  explicit Limiter(std::shared_ptr<const config::Config> cfg);
  ~Limiter();

  // The limits in force (rate_limits of the file last loaded): replaced whole by a reload,
  // kept alive by whoever still reads them (a request's plan).
  struct Rules {
    std::shared_ptr<const config::Config> cfg;
    std::vector<std::string> names;  // counter names: per request limit, then per token limit
    bool active = false;             // any limit of the file
    const config::RateLimits& limits() const { return cfg->rate_limits; }
  };
  std::shared_ptr<const Rules> rules() const;
  // A reload: the limits of `cfg` replace these (its rate_limits, but `backend`, which the
  // workers' connections follow: a restart). Requests admitted keep their counters and
  // reservations; each worker plans the next ones on the new limits. A limit keeps its
  // counters when its name (or, unnamed, its position), algorithm and window stay.
  void reconfigure(std::shared_ptr<const config::Config> cfg);

  // Whether any limit is in force: the file's, or a key's budget (no: admission is free).
  bool active() const {
    return active_.load(std::memory_order_relaxed) || budgets_.load(std::memory_order_relaxed);
  }
  // Whether a key in force has a budget (ApiKey::budget_tokens): said before the keys are
  // installed, so that a request of a new budgeted key finds the limiter on.
  void set_budgets(bool any) { budgets_.store(any, std::memory_order_relaxed); }
  bool wants_redis() const { return wants_redis_; }

  // The checks that apply to requests of `key` for `model`: built once per pair (counter
  // keys included) and kept by each worker. `keys` owns what the checks' keys point to,
  // `rules` what their ids and quotas point to.
  struct Plan {
    std::shared_ptr<const Rules> rules;
    std::vector<std::string> keys;
    std::vector<Check> checks;  // quota checks cost 0 here: the request's tokens are set per request
    std::vector<const config::TokenLimit*> quotas;  // per check: its token limit, or null
    config::TokenLimit budget;  // the key's own budget (ApiKey::budget_tokens), when it has one
  };
  std::shared_ptr<const Plan> plan(std::shared_ptr<const Rules> rules, const config::ApiKey& key,
                                   std::string_view model) const;
  // Lease size of a quota check costing `tokens` (its configured lease, or an automatic one
  // for large budgets), for the whole process.
  static std::int64_t quota_lease(const config::TokenLimit& l, std::int64_t tokens);
  // A worker's share of a process's lease: each worker holds its own leases (no lock or
  // cache line shared between workers on the request path), the process as much as before.
  std::int64_t worker_lease(std::int64_t process_lease) const {
    return process_lease > 0 ? std::max<std::int64_t>(1, process_lease / worker_count_) : 0;
  }

  LocalCounters& local() { return local_; }

  // The counter key (without the period suffix) of token limit `i` of `r`'s tokens for
  // requests of `key` to model alias `model`: the name admission counts under.
  std::string quota_counter(const Rules& r, std::size_t i, const config::ApiKey& key, std::string_view model) const;
  // A token limit's period length in ms; 0 = a calendar month (UTC).
  static std::int64_t quota_window_ms(config::QuotaPeriod per) noexcept;
  // Reads quota counters from Redis (`keys`: counter keys with their period suffix), one
  // script call per 256 keys, on a worker's connection and executor (the caller's thread
  // is not blocked; it resumes on its own executor). On failure (no Redis backend, Redis
  // unreachable, a timeout) `error` says why and `ledgers` is empty.
  struct LedgerRead {
    std::vector<Ledger> ledgers;  // per key, in order
    std::string error;
  };
  boost::asio::awaitable<LedgerRead> read_ledgers(std::vector<std::string> keys) const;

  // One worker's limiter; call on that worker's thread.
  std::unique_ptr<WorkerLimiter> make_worker(boost::asio::any_io_executor ex);

  // Status for /infra, the metrics and the banner.
  struct Status {
    std::string configured;      // memory | redis | auto
    std::string active;          // memory | redis | mixed (some workers fell back)
    std::string reason;          // why it is not redis when it should be
    int connections = 0, connections_up = 0;
    std::string last_error;
    std::uint64_t reconnects = 0;
  };
  Status status() const;
  // At shutdown, on a worker's loop once its requests are gone: drains the limiter of
  // that worker (WorkerLimiter::drain). Returns at once for a worker with nothing queued.
  boost::asio::awaitable<void> drain_worker();

  // Sums of every worker's counters.
  struct Totals {
#define SLUICE_LIMITER_TOTAL(name) std::uint64_t name = 0;
    SLUICE_LIMITER_COUNTERS(SLUICE_LIMITER_TOTAL)
#undef SLUICE_LIMITER_TOTAL
  };
  Totals totals() const;

 private:
  friend class WorkerLimiter;
  void attach(WorkerLimiter* w);
  void detach(WorkerLimiter* w);

  static std::shared_ptr<const Rules> make_rules(std::shared_ptr<const config::Config> cfg);

  std::shared_ptr<const config::Config> cfg_;  // as started: the backend, Redis, the workers
  std::shared_ptr<const Rules> rules_;         // (mu_)
  std::atomic<std::uint64_t> generation_{0};   // bumped by each reconfigure
  std::atomic<bool> active_{false};
  std::atomic<bool> budgets_{false};
  bool wants_redis_ = false;
  LocalCounters local_;
  int worker_count_ = 1;  // workers the server runs
  // How long Redis keeps an admission's record, for a void that comes after a timeout:
  // at least 60 s, and at least 4 reconnections' time (docs/limits.md, "Redis timeouts").
  std::chrono::milliseconds record_ms_{60000};
  std::unique_ptr<store::RedisScript> admit_script_, settle_script_, ledger_script_;
  mutable std::mutex mu_;
  std::vector<WorkerLimiter*> workers_;
};

class WorkerLimiter {
  friend class Limiter;

 public:
  WorkerLimiter(Limiter& owner, boost::asio::any_io_executor ex);
  ~WorkerLimiter();

  // Decides a request without waiting, when that decides it: no limit applies, every
  // limit is served from this worker's leases, or counting is local (memory backend,
  // Redis down). `tokens` = prompt tokens + output tokens to reserve. With `bound`, the
  // prompt's tokens are an upper bound: a refusal by a token limit then sets `recount`
  // instead of counting as a refusal. False (`out` untouched) when Redis must be asked.
  // A request whose `tokens` exceed a token limit by themselves is refused at once with
  // request_too_large (with `bound`: recount), and nothing is counted.
  // `requests_only`: only the request rate limits count it (no token quota, nothing
  // reserved), e.g. /v1/messages/count_tokens.
  bool admit_now(const config::ApiKey& key, std::string_view model, std::int64_t tokens, bool bound, Admission& out,
                 bool requests_only = false);
  // The same, asking Redis: for a request admit_now() did not decide (it does not try the
  // leases again).
  boost::asio::awaitable<Admission> admit(const config::ApiKey& key, std::string_view model, std::int64_t tokens,
                                          bool bound = false, bool requests_only = false);
  // The most one settlement charges (an upstream reporting absurd usage): below 10^14, so
  // Redis's Lua numbers (doubles printed with 14 digits) keep it exact.
  static constexpr std::int64_t kMaxCharge = 99'999'999'999'999;
  // Charges what the request really used and releases its reservation. Never waits: with
  // Redis, settlements are queued and sent together, one script call per batch (at most
  // one batch every kSettleEvery per worker, so a batch grows with the load).
  void settle(Admission& a, std::int64_t actual_tokens);

  bool active() const { return owner_.active(); }  // any limit in force
  const Stats& stats() const { return *stats_; }
  const store::RedisConnection* redis() const { return redis_.get(); }
  // The configuration the limits in force came from (a reload's, once this worker has seen
  // it): rate_limits.reserve_output_tokens and what llm::reservation reads. Valid until
  // this worker's next call into the limiter.
  const config::Config& config() {
    refresh();
    return *rules_->cfg;
  }

  // At shutdown, once no request is left: sends the queued settlements now and gives
  // every token lease back to Redis (none is kept for a next request), within `timeout`
  // (a batch sent then may still be unanswered). Returns at once while Redis is down: what
  // is queued is lost then, and the reservations expire by themselves (reservation_ttl).
  boost::asio::awaitable<void> drain(std::chrono::milliseconds timeout);

  struct AdmitCall;  // one admission script call (limiter.cpp)

 private:
  Admission finish(std::span<const Check> checks, const Verdict& v, Counted where, bool bound);
  bool from_leases(std::span<const Check> checks, Admission& out);  // admitted from leases
  Admission admit_local(std::span<const Check> checks, bool bound);  // counted in memory
  Admission refuse_unavailable(const Check& c);

  // The limits of the last reload, once: the plans are made again on them.
  void refresh();
  // The checks of one request: the cached plan with its token cost filled in.
  // (Kept in the coroutine's frame: no allocation of its own.)
  using Checks = boost::container::small_vector<Check, 4>;
  // `hold`: the plan the checks point into, for a caller that waits (a reload or a key's
  // change may replace it in the cache meanwhile).
  void checks_for(const config::ApiKey& key, std::string_view model, std::int64_t tokens, Checks& out,
                  bool requests_only = false, std::shared_ptr<const Limiter::Plan>* hold = nullptr);

  struct SettleQueue;
  static constexpr std::chrono::milliseconds kSettleEvery{20};
  void flush_settlements();
  // (Static: they may outlive this object; they stop once the queue says it is gone.)
  static boost::asio::awaitable<void> flush_loop(std::shared_ptr<SettleQueue> q,
                                                 std::shared_ptr<store::RedisConnection> redis,
                                                 std::shared_ptr<Stats> stats, const store::RedisScript* script,
                                                 LeaseTable* leases, std::chrono::milliseconds retry, std::string keep);
  // The admission script over `checks`: one call, or on a Redis Cluster one per slot their
  // counters fall in, made at once (each call's records are under its first key's tag).
  static boost::asio::awaitable<std::vector<AdmitCall>> admit_calls(std::shared_ptr<store::RedisConnection> redis,
                                                                    const store::RedisScript* script,
                                                                    std::span<const Check> checks, std::string id,
                                                                    bool lease, std::string record_ms);
  void refill(std::span<const Check> checks, std::uint32_t mask);
  static boost::asio::awaitable<void> refill_one(std::shared_ptr<SettleQueue> q,
                                                 std::shared_ptr<store::RedisConnection> redis,
                                                 std::shared_ptr<Stats> stats, const store::RedisScript* script,
                                                 LeaseTable* leases, std::vector<std::string> keys,
                                                 std::vector<Check> checks);

  Limiter& owner_;
  boost::asio::any_io_executor ex_;
  // Shared with the settlement flushes in flight, which may outlive this object.
  std::shared_ptr<store::RedisConnection> redis_;
  std::shared_ptr<Stats> stats_ = std::make_shared<Stats>();
  std::shared_ptr<SettleQueue> settles_;
  // What this worker took from Redis in advance. (Read by the flushes and refills, which
  // stop before touching it once the queue says the worker is gone.)
  std::unique_ptr<LeaseTable> leases_;
  std::uint64_t admits_ = 0;
  // Plans by key name, then model (a short list: the aliases that key uses). Keys change
  // at runtime (reload, the key store): a plan made for another tier or tenant of the
  // same name is made again. Bounded by the keys ever seen and the routed models.
  std::uint64_t generation_ = 0;  // of the limits plans_ were made on
  std::shared_ptr<const Limiter::Rules> rules_;  // the limits this worker plans on
  struct CachedPlan {
    std::string model, tier, tenant;
    std::int64_t budget_tokens = 0;
    config::QuotaPeriod budget_per = config::QuotaPeriod::month;
    std::shared_ptr<const Limiter::Plan> plan;
    std::vector<std::uint32_t> slots;  // per check: its counter's slot in leases_
  };
  std::unordered_map<std::string, std::vector<CachedPlan>, StringHash, std::equal_to<>> plans_;
};

}  // namespace sluice::limits
