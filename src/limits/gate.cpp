#include "limits/gate.hpp"

#include <unordered_set>

#include <algorithm>
#include <limits>

#include "config/config.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace sluice::limits {

namespace net = boost::asio;
using Clock = std::chrono::steady_clock;

struct Gate::Waiter {
  explicit Waiter(net::any_io_executor ex) : timer(ex), executor(std::move(ex)) {}
  Need need;
  Priority cls = Priority::standard;
  std::string key;
  std::uint64_t seq = 0;
  Clock::time_point arrived;
  net::steady_timer timer;
  net::any_io_executor executor;
  bool granted = false;    // under the gate's mutex
  bool evicted = false;    // under the gate's mutex: its place went to another key
  bool cancelled = false;  // on the waiter's own thread
  bool degradable = false;  // its refusal is counted by its caller (GateWait::degradable)
};

namespace {

// The slot of a single-backend route's backend (its name is its identity, shared by
// every route that uses it). Routes with several backends leave per-backend limits to
// the router, which skips a backend at its max_in_flight.
const config::Backend* sole_backend(const config::Route& r) {
  return r.backends.size() == 1 ? &r.backends.front() : nullptr;
}

// The slot `name` of `slots` at `limit` (made if new; 0 = unlimited for an existing one,
// none for a new one).
void set_limit(std::unordered_map<std::string, std::unique_ptr<Gate::Slot>>& slots, const std::string& name,
               std::string_view kind, int limit) {
  auto it = slots.find(name);
  if (it != slots.end()) {
    it->second->limit = limit > 0 ? limit : std::numeric_limits<int>::max();
  } else if (limit > 0) {
    slots.emplace(name, std::make_unique<Gate::Slot>(Gate::Slot{std::string(kind) + name, limit, 0}));
  }
}

}  // namespace

Gate::Gate(const config::Config& cfg) : cfg_(&cfg) {
  for (const auto& k : cfg.keys) {
    const int limit = k.max_in_flight >= 0 ? k.max_in_flight : cfg.concurrency.per_key;
    if (limit > 0) key_slots_[k.name] = std::make_unique<Slot>(Slot{"key:" + k.name, limit, 0});
  }
  install_routes(cfg);
  // With the key store, any key may get a limit at runtime.
  active_ = !key_slots_.empty() || !model_slots_.empty() || !backend_slots_.empty() || cfg.key_store.enabled;
  keyed_.store(!key_slots_.empty(), std::memory_order_relaxed);
}

void Gate::install_routes(const config::Config& cfg) {
  std::unordered_map<std::string, Summed> summed;
  std::unordered_map<std::string, std::string> backend_of_alias;
  std::unordered_set<std::string> limited_models, limited_backends, loaded_models;
  // A limited backend's limit: the adaptive one announced, else the file's.
  auto limit_of = [&](const config::Backend& b) {
    if (b.max_in_flight <= 0) return b.max_in_flight;
    const auto it = announced_.find(b.name);
    return it != announced_.end() ? it->second : b.max_in_flight;
  };
  for (const auto& r : cfg.routes) {
    int model_limit = r.max_in_flight;
    // A set whose every backend is limited holds at most the sum: beyond it, requests
    // queue here instead of finding every backend full.
    bool all_limited = r.backends.size() > 1;
    long sum = 0;
    for (const auto& b : r.backends) {
      all_limited = all_limited && b.max_in_flight > 0;
      sum += limit_of(b);
    }
    if (all_limited) {
      if (model_limit == 0 || sum < model_limit) model_limit = static_cast<int>(sum);
      // Its backends' limits may change (adaptive concurrency): the sum follows.
      auto& s = summed[r.alias];
      s.cap = r.max_in_flight;
      for (const auto& b : r.backends) s.backends.emplace_back(b.name, limit_of(b));
    }
    // A model whose backends report their load gets a slot (unlimited) the router can hold.
    const bool loaded = std::any_of(r.backends.begin(), r.backends.end(),
                                    [](const config::Backend& b) { return b.load.source != config::LoadSource::none; });
    if (loaded && model_limit == 0) model_limit = std::numeric_limits<int>::max();
    if (loaded) loaded_models.insert(r.alias);
    set_limit(model_slots_, r.alias, "model:", model_limit);
    if (model_limit > 0) limited_models.insert(r.alias);
    const config::Backend* b = sole_backend(r);
    if (b && b->max_in_flight > 0) {
      set_limit(backend_slots_, b->name, "backend:", limit_of(*b));
      limited_backends.insert(b->name);
      backend_of_alias[r.alias] = b->name;
    }
  }
  // A route that went (or lost its limit), a backend no longer alone in its set: the slot
  // stays, unlimited, for the requests that hold it.
  for (auto& [alias, slot] : model_slots_) {
    if (!limited_models.count(alias)) slot->limit = std::numeric_limits<int>::max();
    if (!loaded_models.count(alias)) slot->held = false;  // nothing reports its load now: nothing would release it
  }
  for (auto& [name, slot] : backend_slots_) {
    if (!limited_backends.count(name)) slot->limit = std::numeric_limits<int>::max();
  }
  summed_ = std::move(summed);
  backend_of_alias_ = std::move(backend_of_alias);
}

const config::Concurrency& Gate::settings() const { return cfg_.load(std::memory_order_acquire)->concurrency; }

void Gate::reconfigure(std::shared_ptr<const config::Config> cfg) {
  std::lock_guard lock(mu_);
  kept_.push_back(cfg);
  install_routes(*cfg);
  cfg_.store(cfg.get(), std::memory_order_release);
  if (!model_slots_.empty() || !backend_slots_.empty() || cfg->concurrency.per_key > 0 ||
      std::any_of(cfg->keys.begin(), cfg->keys.end(), [](const config::ApiKey& k) { return k.max_in_flight > 0; })) {
    active_.store(true, std::memory_order_relaxed);  // (once active it stays: requests hold slots)
  }
  dispatch();  // a raised limit, a longer queue: the waiting requests it lets in
}

Gate::~Gate() = default;

Gate::Need Gate::need(const config::ApiKey& key, const std::string& alias) {
  Need n;
  if (!active_.load(std::memory_order_relaxed)) return n;
  n.key = key.name;
  // Keys change at runtime (reload, the key store): a key's slot is made when it is
  // first seen with a limit.
  std::lock_guard lock(mu_);  // (the maps change at a reload)
  const int limit = key.max_in_flight >= 0 ? key.max_in_flight : settings().per_key;
  if (limit > 0 || keyed_.load(std::memory_order_relaxed)) {
    auto it = key_slots_.find(key.name);
    if (it == key_slots_.end() && limit > 0) {
      it = key_slots_.emplace(key.name, std::make_unique<Slot>(Slot{"key:" + key.name, limit, 0})).first;
      keyed_.store(true, std::memory_order_relaxed);
    }
    // (An existing slot's limit follows update_keys(), not the request: a request may hold
    // an older copy of its key.)
    if (it != key_slots_.end()) n.slots[0] = it->second.get();
  }
  if (auto it = model_slots_.find(alias); it != model_slots_.end()) n.slots[1] = it->second.get();
  if (auto b = backend_of_alias_.find(alias); b != backend_of_alias_.end()) n.slots[2] = backend_slots_.at(b->second).get();
  return n;
}

Priority Gate::priority(const config::ApiKey& key, std::string_view header, bool urgent) const {
  const config::Concurrency& cc = settings();  // once: a reload may swap it meanwhile
  Priority own = Priority::standard;
  if (key.priority) {
    own = *key.priority;
  } else if (auto it = cc.tier_priority.find(key.tier); it != cc.tier_priority.end()) {
    own = it->second;
  }
  const Priority allowed = key.max_priority ? std::max(*key.max_priority, own) : own;
  Priority p = own;
  if (auto asked = config::priority_from_name(header)) p = std::min(*asked, allowed);
  if (urgent) p = std::max(p, std::min(cc.urgent_class, allowed));
  return p;
}

bool Gate::fits(const Need& n) const {
  for (const Slot* s : n.slots) {
    if (s && (s->used >= s->limit || s->held)) return false;
  }
  return true;
}

void Gate::hold(const std::string& alias, bool held) {
  std::lock_guard lock(mu_);
  auto it = model_slots_.find(alias);
  if (it == model_slots_.end() || it->second->held == held) return;
  it->second->held = held;
  if (!held) dispatch();
}

void Gate::update_keys(const std::vector<const config::ApiKey*>& keys) {
  if (!active_.load(std::memory_order_relaxed)) return;
  std::lock_guard lock(mu_);
  bool grew = false;
  for (const auto* k : keys) {
    auto it = key_slots_.find(k->name);
    if (it == key_slots_.end()) continue;  // made when the key is first used
    const int limit = k->max_in_flight >= 0 ? k->max_in_flight : settings().per_key;
    // Unlimited now: the slot stays (requests hold it) but no longer bounds.
    const int now = limit > 0 ? limit : std::numeric_limits<int>::max();
    grew = grew || now > it->second->limit;
    it->second->limit = now;
  }
  if (grew) dispatch();  // the requests waiting for the room it made
}

void Gate::limit_backend(const std::string& name, int limit) {
  if (limit <= 0) return;
  std::lock_guard lock(mu_);
  announced_[name] = limit;
  bool grew = false;
  if (auto it = backend_slots_.find(name); it != backend_slots_.end()) {
    grew = limit > it->second->limit;
    it->second->limit = limit;
  }
  for (auto& [alias, s] : summed_) {
    long sum = 0;
    bool mine = false;
    for (auto& [b, l] : s.backends) {
      if (b == name) l = limit, mine = true;
      sum += l;
    }
    if (!mine) continue;
    auto it = model_slots_.find(alias);
    if (it == model_slots_.end()) continue;
    const int now = static_cast<int>(s.cap > 0 ? std::min<long>(sum, s.cap) : sum);
    grew = grew || now > it->second->limit;
    it->second->limit = now;
  }
  if (grew) dispatch();
}

void Gate::take(const Need& n) {
  for (Slot* s : n.slots) {
    if (s) ++s->used;
  }
  ++in_flight_;
}

// Grants, best class first and in arrival order within a class, every waiter whose slots
// are all free. A waiter blocked on a busy key does not hold up others behind it.
void Gate::dispatch() {
  for (int c = kPriorities - 1; c >= 0; --c) {
    auto& q = queues_[c];
    for (auto it = q.begin(); it != q.end();) {
      if (!fits((*it)->need)) {
        ++it;
        continue;
      }
      auto w = *it;
      it = q.erase(it);
      --queued_;
      if (auto k = queued_by_key_.find(w->key); k != queued_by_key_.end() && --k->second <= 0) queued_by_key_.erase(k);
      take(w->need);
      w->granted = true;
      // The timer belongs to the waiter's thread: wake it there.
      net::post(w->executor, [w] { w->timer.cancel(); });
    }
  }
}

void Gate::remove(Waiter* w) {
  auto& q = queues_[static_cast<int>(w->cls)];
  for (auto it = q.begin(); it != q.end(); ++it) {
    if (it->get() == w) {
      q.erase(it);
      --queued_;
      if (auto k = queued_by_key_.find(w->key); k != queued_by_key_.end() && --k->second <= 0) queued_by_key_.erase(k);
      return;
    }
  }
}

// The queue is full and `key` wants a place: if another key has more requests waiting than
// `key` has, its newest request of its lowest class gives its place up (longest-queue
// drop). Returns whether a place was freed.
bool Gate::make_room(std::string_view key) {
  const auto own = queued_by_key_.find(std::string(key));
  const int mine = own == queued_by_key_.end() ? 0 : own->second;
  const std::string* heaviest = nullptr;
  int most = 0;
  for (const auto& [k, n] : queued_by_key_) {
    if (n > most) most = n, heaviest = &k;
  }
  if (!heaviest || most <= mine + 1) return false;
  for (int c = 0; c < kPriorities; ++c) {
    auto& q = queues_[c];
    for (auto it = q.rbegin(); it != q.rend(); ++it) {
      if ((*it)->key != *heaviest) continue;
      auto w = *it;
      remove(w.get());
      w->evicted = true;
      if (!w->degradable) ++stats_.queue_full;
      net::post(w->executor, [w] { w->timer.cancel(); });
      return true;
    }
  }
  return false;
}

void Gate::observe_wait(Priority cls, double ms) {
  const auto c = static_cast<std::size_t>(cls);
  const double s = ms / 1000.0;
  std::size_t b = 0;
  while (b < Snapshot::kBuckets.size() && s > Snapshot::kBuckets[b]) ++b;
  ++stats_.wait_buckets[c][b];
  stats_.wait_sum[c] += s;
}

bool Gate::try_enter(const Need& need) {
  if (need.empty()) return true;
  std::lock_guard lock(mu_);
  if (!fits(need)) return false;
  take(need);
  ++stats_.granted_now;
  return true;
}

double Gate::estimate(const Need& n, Priority p, const Waiter* self, int& position) const {
  double eta = 0;
  position = 0;
  for (const Slot* s : n.slots) {
    if (!s || (!s->held && s->used < s->limit)) continue;
    if (s->held || s->hold_ms <= 0) return -1;  // a held model frees no slot at a known pace
    // Ahead: every waiter of a better class, and of its own class the earlier arrivals.
    int ahead = 0;
    for (int c = kPriorities - 1; c >= static_cast<int>(p); --c) {
      for (const auto& w : queues_[c]) {
        if (c == static_cast<int>(p) && self && w->seq >= self->seq) break;
        if (std::find(w->need.slots.begin(), w->need.slots.end(), s) != w->need.slots.end()) ++ahead;
      }
    }
    const double e = (ahead + 1) * s->hold_ms / std::max(s->limit, 1);
    if (e > eta) eta = e, position = ahead + 1;
  }
  return eta;
}

net::awaitable<Gate::Result> Gate::enter(Need need, Priority p, Cancel& cancel, Wait wait) {
  Result res;
  res.served_as = p;
  if (need.empty()) co_return res;
  auto ex = co_await net::this_coro::executor;
  std::shared_ptr<Waiter> w;
  {
    std::lock_guard lock(mu_);
    // No waiter fits (dispatch() grants every one that does, whenever a slot frees), so
    // a request whose slots are free goes ahead of none of them, full queue or not.
    if (fits(need)) {
      take(need);
      ++stats_.granted_now;
      co_return res;
    }
    if (wait.accept_ms >= 0) {
      const double eta = estimate(need, p, nullptr, res.position);
      if (eta > wait.accept_ms) {
        ++stats_.eta_answers;
        res.outcome = Outcome::queued;
        res.eta_ms = eta;
        co_return res;
      }
    }
    if (queued_ >= settings().queue_size && !make_room(need.key)) {
      if (!wait.degradable) ++stats_.queue_full;
      res.outcome = Outcome::queue_full;
      co_return res;
    }
    w = std::make_shared<Waiter>(ex);
    w->need = need;
    w->cls = p;
    w->degradable = wait.degradable;
    w->key = std::string(need.key);
    w->seq = ++seq_;
    w->arrived = Clock::now();
    queues_[static_cast<int>(p)].push_back(w);
    ++queued_;
    ++queued_by_key_[w->key];
  }
  res.queued = true;
  // Leaves the queue at once (a slot freed meanwhile must not go to a client that left).
  cancel.fn = [this, w] {
    {
      std::lock_guard lock(mu_);
      if (!w->granted && !w->evicted && !w->cancelled) {
        remove(w.get());
        ++stats_.cancelled;
      }
    }
    w->cancelled = true;
    w->timer.cancel();
  };
  // The wait's own end (Wait::max_wait), if any.
  const auto own_end = wait.max_wait.count() > 0 ? w->arrived + wait.max_wait : Clock::time_point::max();
  auto class_end = [&] { return w->arrived + settings().max_wait[static_cast<int>(w->cls)]; };
  for (;;) {
    bool decided = false;
    {
      std::lock_guard lock(mu_);
      decided = w->granted || w->evicted;
    }
    if (!decided && !w->cancelled) {
      w->timer.expires_at(std::min(class_end(), own_end));
      co_await w->timer.async_wait(net::as_tuple(net::use_awaitable));
    }
    std::lock_guard lock(mu_);
    res.served_as = w->cls;
    res.waited_ms = std::chrono::duration<double, std::milli>(Clock::now() - w->arrived).count();
    if (w->granted) {
      ++stats_.granted_after_wait[static_cast<int>(w->cls)];
      observe_wait(w->cls, res.waited_ms);
      break;
    }
    if (w->evicted) {  // out of the queue, counted as queue_full
      res.outcome = Outcome::queue_full;
      break;
    }
    if (w->cancelled) {  // already out of the queue
      res.outcome = Outcome::cancelled;
      break;
    }
    const auto now = Clock::now();
    if (now >= own_end) {
      remove(w.get());
      if (!wait.degradable) ++stats_.timed_out[0];  // (counted as one: rejected for queue_timeout)
      observe_wait(w->cls, res.waited_ms);
      res.outcome = Outcome::timed_out;
      break;
    }
    if (now < class_end()) continue;
    if (w->cls != Priority::standard) {
      // Demoted, not dropped: into the standard queue at its arrival position.
      ++stats_.demoted[static_cast<int>(w->cls)];
      remove(w.get());
      w->cls = Priority::standard;
      auto& q = queues_[0];
      auto pos = q.begin();
      while (pos != q.end() && (*pos)->seq < w->seq) ++pos;
      q.insert(pos, w);
      ++queued_;
      ++queued_by_key_[w->key];
      res.demoted = true;
      res.served_as = Priority::standard;
      // Demoted: a client that accepts only so long learns the new estimate instead.
      if (wait.accept_ms >= 0) {
        const double eta = estimate(w->need, Priority::standard, w.get(), res.position);
        if (eta > wait.accept_ms - res.waited_ms) {
          remove(w.get());
          ++stats_.eta_answers;
          observe_wait(Priority::standard, res.waited_ms);  // it did wait, as a timed-out one
          res.outcome = Outcome::queued;
          res.eta_ms = eta;
          break;
        }
      }
      continue;
    }
    remove(w.get());
    if (!wait.degradable) ++stats_.timed_out[0];
    observe_wait(Priority::standard, res.waited_ms);
    res.outcome = Outcome::timed_out;
    break;
  }
  cancel.fn = nullptr;
  co_return res;
}

void Gate::refused(Outcome o) {
  std::lock_guard lock(mu_);
  if (o == Outcome::queue_full) ++stats_.queue_full;
  else if (o == Outcome::timed_out) ++stats_.timed_out[0];
}

void Gate::leave(const Need& need, double held_ms) {
  if (need.empty()) return;
  std::lock_guard lock(mu_);
  for (Slot* s : need.slots) {
    if (!s) continue;
    --s->used;
    if (held_ms >= 0) s->hold_ms = s->hold_ms <= 0 ? held_ms : 0.8 * s->hold_ms + 0.2 * held_ms;
  }
  --in_flight_;
  dispatch();
}

Gate::Snapshot Gate::snapshot() const {
  std::lock_guard lock(mu_);
  Snapshot s = stats_;
  for (int c = 0; c < kPriorities; ++c) s.depth[c] = static_cast<int>(queues_[c].size());
  s.in_flight = in_flight_;
  return s;
}

}  // namespace sluice::limits
