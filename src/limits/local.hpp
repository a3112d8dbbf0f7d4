#pragma once
// Per-instance counting: the `memory` backend, and the fallback of `auto` while Redis is
// down. Same algorithms and answers as the Redis script (scripts.cpp), on this process's
// clock. Thread-safe; counters are sharded by key to keep workers off one lock.
#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "limits/check.hpp"

namespace sluice::limits {

class LocalCounters {
 public:
  // Tests every check; takes from all of them only when all pass.
  Verdict admit(std::span<const Check> checks, std::string_view reservation_id, std::int64_t now_ms);
  // Releases a reservation (if it has not expired meanwhile) and charges `actual`.
  void settle(const Reserved& r, std::string_view reservation_id, std::int64_t actual, std::int64_t now_ms);
  // A quota counter (its key with the period suffix): used and reserved, as admission
  // sees them; nullopt when this process holds no such counter.
  struct Quota {
    std::int64_t used = 0, reserved = 0;
  };
  std::optional<Quota> quota(std::string_view key_with_period) const;
  // Drops counters whose window ended (the limiter calls it every 4096 admissions per worker).
  void sweep(std::int64_t now_ms);
  std::size_t size() const;

 private:
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };
  template <class V>
  using Map = std::unordered_map<std::string, V, Hash, std::equal_to<>>;
  struct Counter {
    std::int64_t window = -1;   // fixed/sliding: index of `count`'s window
    double count = 0;           // fixed/sliding: count in `window`; bucket: tokens
    double prev = 0;            // sliding: count in window - 1
    std::int64_t ts = 0;        // bucket: last refill
    // sliding log: the times of the requests admitted in the window, oldest first, from
    // `head` (the entries before it have left the window; compacted now and then)
    std::vector<std::int64_t> log;
    std::size_t head = 0;
    // quota
    std::int64_t used = 0, reserved = 0;
    Map<std::pair<std::int64_t, std::int64_t>> holds;  // id -> amount, expiry
    std::int64_t next_expiry = 0;  // the earliest expiry in holds (0: none): scanned only then
    std::int64_t expires_ms = 0;  // the whole counter may go after this
  };
  struct Shard {
    mutable std::mutex mu;
    Map<Counter> counters;
  };
  static constexpr std::size_t kShards = 16;
  Shard& shard_of(std::string_view key);
  const Shard& shard_of(std::string_view key) const;

  std::array<Shard, kShards> shards_;
};

}  // namespace sluice::limits
