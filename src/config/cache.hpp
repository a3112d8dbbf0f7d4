#pragma once
// The response cache (docs/cache.md): where answers are kept (`cache`), and which routes
// use it (`models[].cache`). Declared in config/sections/cache.cpp.
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace sluice::config {

// memory: this instance's; redis: the fleet's (the `redis` section), with this instance's
// memory in front of it.
enum class CacheStore : std::uint8_t { memory, redis };

struct CacheSettings {
  CacheStore store = CacheStore::memory;
  std::chrono::milliseconds ttl{3600 * 1000};       // how long an answer is served again
  std::size_t max_bytes = 64 << 20;                 // this instance's memory layer
  std::size_t max_entry_bytes = 1 << 20;            // larger answers are not kept
  // With store redis: how long this instance's copy answers without asking Redis (what an
  // operator's drop on another instance may take to reach this one).
  std::chrono::milliseconds local_ttl{10 * 1000};
};

// A route's use of the cache (models[].cache; off without it).
struct RouteCache {
  bool enabled = true;
  std::chrono::milliseconds ttl{0};  // 0: cache.ttl
  bool shared = false;               // one entry for every tenant (else each tenant its own)
  bool any_temperature = false;      // also requests that are not deterministic
  bool coalesce = false;             // identical requests in flight share one generation
};

}  // namespace sluice::config
