#pragma once
// What one worker took from Redis in advance (leases), so that requests far from their
// limits are admitted without a Redis call. Each worker has its own table (a share of the
// process's lease size), used on that worker's thread only (its requests, settlement
// flushes and refills all run there): no lock, and nothing another core writes. See
// docs/limits.md, "Leases".
//   Request limits: units already counted in Redis. Admitting with one never over-admits;
//     units left unused when their window ends are lost (a small under-admission, bounded
//     by the lease sizes). A window's units end a little before it does: a
//     unit counted in one window must not admit a request of the next.
//   Token quotas: a reservation of many requests' worth (a lease, "<id>:L:<size>" in the
//     reservation set). Requests reserve from it locally and settle against it locally;
//     their usage reaches Redis in sums per lease (drain()). When it has ended (after 2 s,
//     or at its period's end) and its last request settled, what is left is given back.
//     If the process dies, it expires like any reservation.
//   Refills: a request that leaves a lease low (less than half of a lease left, or a
//     token lease near its end) claims a refill, asked of Redis in the background, so
//     that under steady traffic no request waits for Redis.
#include <cassert>
#include <chrono>
#include <cstdint>
#include <span>
#include <thread>
#include <string>
#include <string_view>
#include <memory>
#include <unordered_map>
#include <vector>

#include "limits/check.hpp"

namespace sluice::limits {

struct QuotaLease {
  std::string key;             // the quota counter with its period
  std::uint32_t slot = 0;      // its counter's slot in the table
  std::string id;              // the lease's member in the reservation set: "<id>:L:<size>"
  std::int64_t size = 0;       // tokens reserved in Redis
  std::int64_t avail = 0;      // not handed out (or handed back by settlements)
  std::int64_t unsent = 0;     // usage settled here, not yet sent to Redis
  int inflight = 0;            // requests served from it, not settled yet
  bool retired = false;        // replaced by a newer lease: hands out nothing more
  std::int64_t remaining = 0;  // for the headers
  std::chrono::steady_clock::time_point valid_until, reset_at;
};

class LeaseTable {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kQuotaLeaseLife{2000};
  static constexpr std::size_t kMaxChecks = 16;  // requests with more checks are decided by Redis

  // The slot of a counter key, made on first use. A check that carries its slot
  // (Check::slot, set by the worker's plan cache) is found without hashing its key; one
  // without is looked up by key. Slots are never removed: counter keys come from the
  // configuration (keys, tiers, tenants, models), so they are bounded (but for reloads
  // that rename limits: each adds the new names' slots).
  std::uint32_t slot(std::string_view key);

  // Admits a request from the leases of all its checks, or takes nothing (ok false). Fills
  // the headers and, for quotas, the request's reservations (drawing on the leases).
  // `refill`: bit i set when checks[i]'s lease runs low and this request claimed its
  // refill: the caller asks Redis for it (cost 0, `lease` more), passes the answer to
  // add()/add_quota() and then calls release() with the same bits.
  struct Taken {
    bool ok = false;
    std::uint32_t refill = 0;
  };
  Taken take(std::span<const Check> checks, Admission& a, Clock::time_point now = Clock::now());

  // Claims every check's counter for a lease request: false (nothing claimed) while
  // another request of this worker asks for one of them (a burst would otherwise take a
  // lease per request). release() unmarks the counters of `mask` (default: all).
  bool claim(std::span<const Check> checks);
  void release(std::span<const Check> checks, std::uint32_t mask = ~0u);

  // A request limit's units granted by Redis (r.leased of them), merged with what is left
  // of the same window.
  void add(const Check& c, const CheckResult& r, Clock::time_point received);
  // A token lease granted by Redis: r.leased tokens (plus c.cost when `first` is the
  // admitted request it came with: that request becomes its first user and its
  // reservation is rewritten to draw on it). `id` is the reservation id it was made with.
  // A newer lease of the same counter retires the older one.
  void add_quota(const Check& c, const CheckResult& r, std::string id, Reserved* first, Clock::time_point received);

  // A request that drew on `r.lease` ended, using `actual` tokens.
  void settle(const Reserved& r, std::int64_t actual);

  // What Redis must be told: per lease, the usage settled since the last drain ('c'), and
  // the leases given back ('x', with the usage not sent yet).
  struct Pending {
    std::string key, id;
    std::int64_t size = 0, actual = 0;
    bool give_back = false;
  };
  void drain(std::vector<Pending>& out, Clock::time_point now = Clock::now());
  // Whether drain() may find something (token leases exist, or some were given back).
  bool busy() const;
  // The limits changed (a reload): units held are dropped (counted in Redis, never used:
  // a small under-admission) and token leases retired (given back once their requests
  // settled), so that a lowered limit is not passed on units taken under the old one.
  void forget();

  // For tests.
  std::size_t quota_leases() const;
  std::int64_t units(std::string_view key) const;

 private:
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };
  template <class V>
  using Map = std::unordered_map<std::string, V, Hash, std::equal_to<>>;

  struct Units {
    std::int64_t period = 0;     // the window the units are counted in (buckets: 0)
    std::int64_t units = 0;
    std::int64_t remaining = 0;  // for the headers: left in the counter, own units included
    Clock::time_point valid_until;
    Clock::time_point reset_at;
  };

  // What this worker holds of one counter.
  struct Slot {
    Units units;                    // request limits (none while valid_until has passed)
    QuotaLease* current = nullptr;  // token quotas: the lease handing out
    bool fetching = false;          // a request of this worker asks Redis for a lease
  };

  void retire(QuotaLease& q);
  void give_back(Map<QuotaLease>::iterator it);
  std::uint32_t slot_of_key(std::string_view key);
  std::uint32_t index(const Check& c);  // c's slot (made on first use)
  Slot& slot_at(const Check& c) { return *slots_[index(c)]; }
  const Slot* find(std::string_view key) const;

  std::vector<std::unique_ptr<Slot>> slots_;  // by slot
  Map<std::uint32_t> slot_of_;                // counter key -> slot
  Map<QuotaLease> quota_;                     // by lease id
  std::vector<Pending> released_;             // given back, not drained yet

  // The table has no lock: in builds with assertions (the sanitizer build of the tests),
  // every call that changes it must come from the thread of the first one.
#ifndef NDEBUG
  std::thread::id owner_;
  void on_owner_thread() {
    if (owner_ == std::thread::id()) owner_ = std::this_thread::get_id();
    assert(owner_ == std::this_thread::get_id() && "a worker's lease table used from another thread");
  }
#else
  void on_owner_thread() {}
#endif
};

}  // namespace sluice::limits
