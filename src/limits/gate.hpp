#pragma once
// The concurrency gate (admission, phase 6): requests in flight per key, per model and
// per backend, with a bounded priority queue in front. One per process, shared by the
// workers. A queued request waits at most its class's max_wait; vip and premium are then
// demoted to standard (keeping their arrival order), and standard's max_wait ends the
// wait (503). The queue is shared fairly: when it is full, a key with fewer requests
// waiting takes the place of the newest request of the key with the most (which gets
// 429 queue_full), so one key cannot fill it for all. See docs/limits.md.
#include <array>
#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "config/admission.hpp"  // Concurrency
#include "config/keys.hpp"
#include "config/priority.hpp"

namespace sluice::config {
struct Config;  // config/config.hpp: only gate.cpp reads its fields
}

namespace sluice::limits {

using config::Priority;
using config::kPriorities;

// What one request asks of its wait in the gate (Gate::enter).
struct GateWait {
  // It waits at most this long (0: its class's max_wait, then demotion; with it, the
  // wait ends at the earlier of the two).
  std::chrono::milliseconds max_wait{0};
  // The client accepts to wait this long (Prefer: wait=N); a request whose estimated
  // wait is longer (when it would queue, and again when it is demoted) leaves with
  // Outcome::queued instead. < 0: no estimate asked.
  double accept_ms = -1;
  // The request may yet be served elsewhere when the gate refuses it (overload): its
  // queue_full or timed_out is not counted as a refusal here; the caller counts it with
  // Gate::refused() if it is refused after all.
  bool degradable = false;
};

class Gate {
 public:
  struct Slot {
    std::string name;      // "key:prod-app", "model:demo", "backend:10.0.0.5:8000"
    int limit = 0;
    int used = 0;          // guarded by the gate's mutex
    bool held = false;     // the model's backends are all full (hold()): nothing is let through
    double hold_ms = 0;    // how long a request holds it (moving average; 0 = not measured yet)
  };
  // The slots one request needs (null = unlimited), and whose request it is (the queue is
  // shared fairly between keys).
  struct Need {
    std::array<Slot*, 3> slots{};
    std::string_view key;  // the key's name; lives as long as the request (it holds its key set)
    bool empty() const { return !slots[0] && !slots[1] && !slots[2]; }
  };
  // queued: the request would wait longer than its client accepts (Wait::accept_ms); it
  // left the queue with the estimate (eta_ms, position).
  enum class Outcome : std::uint8_t { granted, queue_full, timed_out, cancelled, queued };
  struct Result {
    Outcome outcome = Outcome::granted;
    Priority served_as = Priority::standard;  // class it left the queue in
    bool queued = false;
    bool demoted = false;
    double waited_ms = 0;
    double eta_ms = -1;  // (queued) the estimated further wait
    int position = 0;    // (queued) its place in the line for its busiest slot, 1 = next
  };
  using Wait = GateWait;
  // Set by enter() while the request waits; calling it (on the request's thread, e.g.
  // from a client-disconnect watch) removes the request from the queue at once.
  struct Cancel {
    std::function<void()> fn;
    void operator()() const {
      if (fn) fn();
    }
  };

  explicit Gate(const config::Config& cfg);
  ~Gate();

  // The configuration file read again (SIGHUP, POST /admin/reload): `concurrency` (per_key,
  // queue_size, max_wait, tier_priority, urgent_keywords, urgent_class) in force for every
  // request from now on, those waiting included; routes' and sole backends' limits follow
  // (a new alias gets its slot; a slot in use is never removed: a route that went keeps an
  // unlimited one). Call update_keys() after it: per_key applies to the keys' slots there.
  void reconfigure(std::shared_ptr<const config::Config> cfg);
  // The concurrency settings in force (those of the last reconfigure(); kept alive).
  const config::Concurrency& settings() const;

  Need need(const config::ApiKey& key, const std::string& alias);
  // The class a request waits in: X-Priority if given and not above the key's allowance
  // (max_priority, else its own class: from `priority:` or its tier), else the key's
  // class; an urgent request (concurrency.urgent_keywords) is raised to urgent_class,
  // within the allowance.
  Priority priority(const config::ApiKey& key, std::string_view header, bool urgent = false) const;

  boost::asio::awaitable<Result> enter(Need need, Priority p, Cancel& cancel, Wait wait = {});
  // The slots at once when they are free (enter()'s first step, without a coroutine):
  // true = taken (leave() gives them back); false = enter() decides (queue or refuse).
  bool try_enter(const Need& need);
  // held_ms (≥ 0): how long the request held its slots, for the wait estimates.
  void leave(const Need& need, double held_ms = -1);
  // The keys in force changed (a reload, the key store): the slots of those already seen
  // take their new max_in_flight (a raised one lets waiting requests in at once).
  void update_keys(const std::vector<const config::ApiKey*>& keys);
  // Counts a refusal enter() left to its caller (GateWait::degradable).
  void refused(Outcome o);
  // Holds (or releases) a model's new requests: they wait in the queue, by priority, while
  // every backend of the model reports its memory full (docs/routing.md, "Load-aware
  // admission"). Only for models with load signals (they have a slot for it).
  void hold(const std::string& alias, bool held);
  // A backend's in-flight limit changed (adaptive concurrency, docs/routing.md): its slot
  // (a route's sole backend) and the sums of the routes whose every backend is limited
  // follow. Requests in flight above a lowered limit finish; new ones wait.
  void limit_backend(const std::string& name, int limit);

  struct Snapshot {
    std::array<int, kPriorities> depth{};
    int in_flight = 0;     // requests holding slots
    std::uint64_t granted_now = 0;  // without waiting
    std::array<std::uint64_t, kPriorities> granted_after_wait{}, timed_out{}, demoted{};
    std::uint64_t queue_full = 0, cancelled = 0, eta_answers = 0;
    // Wait time of requests that queued, by the class they left in (a histogram).
    static constexpr std::array<double, 10> kBuckets{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10};
    std::array<std::array<std::uint64_t, kBuckets.size() + 1>, kPriorities> wait_buckets{};
    std::array<double, kPriorities> wait_sum{};
  };
  Snapshot snapshot() const;
  bool active() const { return active_.load(std::memory_order_relaxed); }

 private:
  struct Waiter;
  bool fits(const Need& n) const;
  void take(const Need& n);
  void dispatch();
  void remove(Waiter* w);
  bool make_room(std::string_view key);
  void observe_wait(Priority cls, double ms);
  // The estimated wait of a request needing `n` in class `p` (behind `self`'s place when
  // it is queued): for each full slot, (requests ahead + 1) × its hold time ÷ its limit;
  // the longest. < 0 when a full slot has no measured hold time yet.
  double estimate(const Need& n, Priority p, const Waiter* self, int& position) const;

  // Model, backend and summed slots from `cfg`'s routes (under mu_, or in the constructor).
  void install_routes(const config::Config& cfg);

  // The configuration in force: the one at start, or one of kept_ (each reload's, kept so
  // that a reader of an older one never holds a dangling reference; reloads are few).
  std::atomic<const config::Config*> cfg_;
  std::vector<std::shared_ptr<const config::Config>> kept_;  // under mu_
  std::atomic<bool> active_{false};
  // Every map is read and changed under mu_ (reconfigure() adds slots at runtime).
  std::unordered_map<std::string, std::unique_ptr<Slot>> key_slots_;
  std::unordered_map<std::string, std::unique_ptr<Slot>> model_slots_, backend_slots_;
  std::atomic<bool> keyed_{false};  // key_slots_ holds a slot
  std::unordered_map<std::string, std::string> backend_of_alias_;
  struct Summed {  // a model slot that is the sum of its backends' limits
    int cap = 0;   // the route's own max_in_flight (0 = none)
    std::vector<std::pair<std::string, int>> backends;
  };
  std::unordered_map<std::string, Summed> summed_;
  // limit_backend()'s last word per backend (adaptive concurrency): a reload keeps it, as
  // the router keeps the backend's adaptive state.
  std::unordered_map<std::string, int> announced_;
  mutable std::mutex mu_;
  std::array<std::deque<std::shared_ptr<Waiter>>, kPriorities> queues_;
  int queued_ = 0;
  std::unordered_map<std::string, int> queued_by_key_;  // keys with requests waiting
  int in_flight_ = 0;
  std::uint64_t seq_ = 0;
  Snapshot stats_;
};

// Holds a request's slots until it ends.
class GatePass {
 public:
  GatePass() = default;
  GatePass(Gate* g, Gate::Need n) : gate_(g), need_(n), since_(std::chrono::steady_clock::now()) {}
  GatePass(GatePass&& o) noexcept : gate_(o.gate_), need_(o.need_), since_(o.since_) { o.gate_ = nullptr; }
  GatePass& operator=(GatePass&&) = delete;
  ~GatePass() {
    if (gate_) {
      gate_->leave(need_, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since_).count());
    }
  }

 private:
  Gate* gate_ = nullptr;
  Gate::Need need_;
  std::chrono::steady_clock::time_point since_;
};

}  // namespace sluice::limits
