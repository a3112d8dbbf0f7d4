#pragma once
// The response cache (docs/cache.md): where answers are kept (`cache`), and which routes
// use it (`models[].cache`). Declared in config/sections/cache.cpp.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

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
  // The semantic stage's index: entries per partition (requests alike but for their
  // messages' text) and partitions, on this instance; beyond them the oldest go first.
  std::size_t semantic_max_entries = 2000;
  std::size_t semantic_max_partitions = 1024;
  std::size_t semantic_max_bytes = 256u << 20;
};

// A route's semantic stage (models[].cache.semantic; off without it): a request the exact
// key misses may be answered with the kept answer of a request that says the same in
// other words: its text's SimHash within simhash_distance bits (no model call), or its
// embedding (the `embedding` route's) within `threshold` cosine of one kept.
struct SemanticCache {
  std::string embedding;  // the alias of a route that serves embeddings; empty: SimHash only
  double threshold = 0.92;
  int simhash_distance = 0;  // 0: the same words only; more: bits of 64; -1: no SimHash stage
  std::chrono::milliseconds timeout{2000};  // the embedding call
  std::size_t max_text_bytes = 4096;        // longer prompts: the exact key only
  bool tools = false;                       // also requests with tools or tool calls
};

// A route's use of the cache (models[].cache; off without it).
struct RouteCache {
  bool enabled = true;
  std::chrono::milliseconds ttl{0};  // 0: cache.ttl
  bool shared = false;               // one entry for every tenant (else each tenant its own)
  bool any_temperature = false;      // also requests that are not deterministic
  bool coalesce = false;             // identical requests in flight share one generation
  std::optional<SemanticCache> semantic;
};

}  // namespace sluice::config
