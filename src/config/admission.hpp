#pragma once
// Admission settings: rate limits, token quotas, the concurrency gate, and the Redis they
// share. Part of the validated Config (see docs/limits.md); declared in
// config/sections/admission.cpp.
#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/priority.hpp"

namespace sluice::config {

// What one counter aggregates over.
enum class LimitScope : std::uint8_t { key, tier, tenant, model, tenant_model };
enum class LimitAlgorithm : std::uint8_t { fixed_window, sliding_window, token_bucket, sliding_log };
// While Redis is unreachable: count per instance (open) or refuse (closed). `inherit`
// exists only while loading: limits take rate_limits.on_redis_down, which defaults to
// closed for backend `redis` and open otherwise.
enum class DownPolicy : std::uint8_t { inherit, open, closed };
enum class LimiterBackend : std::uint8_t { memory, redis, auto_ };
enum class QuotaPeriod : std::uint8_t { minute, hour, day, month };

std::string_view to_string(LimitScope) noexcept;
std::string_view to_string(LimitAlgorithm) noexcept;
// The largest limit of algorithm sliding_log (it keeps one entry per request of its window).
inline constexpr std::int64_t kMaxSlidingLog = 100000;
std::string_view to_string(LimiterBackend) noexcept;
std::string_view to_string(QuotaPeriod) noexcept;

// A limit applies to a request only when every filter set here matches (empty = any).
struct LimitMatch {
  std::string key;     // key name
  std::string tier;
  std::string tenant;
  std::string model;   // alias
  bool operator==(const LimitMatch&) const = default;
};

struct RequestLimit {
  std::string id;      // "requests[0]", or its name: names the limit in logs and errors
  std::string name;    // optional: names its counters too (else its position does)
  LimitScope scope = LimitScope::key;
  LimitMatch when;
  LimitAlgorithm algorithm = LimitAlgorithm::fixed_window;
  std::int64_t limit = 0;                       // requests per window
  std::chrono::milliseconds window{60000};
  std::int64_t burst = 0;                       // token bucket capacity (default: limit)
  DownPolicy on_redis_down = DownPolicy::inherit;
  // Redis backend: requests a worker may take from Redis in advance and admit locally.
  // -1 = auto (limit / 1000, at most 1000; none below 1000 per window); 0 = off.
  std::int64_t lease = -1;
  bool operator==(const RequestLimit&) const = default;
};

struct TokenLimit {
  std::string id;      // "tokens[0]", or its name
  std::string name;    // optional: names its counters too (else its position does)
  LimitScope scope = LimitScope::key;
  LimitMatch when;
  std::int64_t limit = 0;                       // tokens per period
  QuotaPeriod per = QuotaPeriod::minute;
  DownPolicy on_redis_down = DownPolicy::inherit;
  // Redis backend: tokens a process may reserve in advance and hand out to its requests.
  // -1 = auto (for limits of a million tokens or more: limit / 1000, at most 1024
  // requests' worth); 0 = off.
  std::int64_t lease = -1;
  bool operator==(const TokenLimit&) const = default;
};

struct RateLimits {
  LimiterBackend backend = LimiterBackend::memory;
  DownPolicy on_redis_down = DownPolicy::inherit;  // default of every limit
  std::vector<RequestLimit> requests;
  std::vector<TokenLimit> tokens;
  // Output tokens reserved when a request sets no max_tokens.
  std::int64_t reserve_output_tokens = 1024;
  // A reservation not settled by then is released (a request that died without settling).
  // 0 = timeouts.total + 1 minute.
  std::chrono::milliseconds reservation_ttl{0};
  bool any() const { return !requests.empty() || !tokens.empty(); }
  bool operator==(const RateLimits&) const = default;
};

struct RedisSettings {
  std::string url = "redis://127.0.0.1:6379";
  std::chrono::milliseconds timeout{250};          // per command; slower counts as down
  std::chrono::milliseconds connect_timeout{500};
  std::chrono::milliseconds retry_interval{1000};  // reconnect attempts while down
  std::string key_prefix = "sluice";
  bool operator==(const RedisSettings&) const = default;
};

struct Concurrency {
  int per_key = 0;                 // requests in flight per key (0 = unlimited)
  int queue_size = 256;            // waiting requests per instance; beyond: 429
  // Longest wait per class (indexed by Priority). A vip or premium request that waited
  // its class's maximum is demoted to standard; standard's maximum ends the wait (503).
  std::array<std::chrono::milliseconds, kPriorities> max_wait{
      std::chrono::milliseconds(10000), std::chrono::milliseconds(2000), std::chrono::milliseconds(1000)};
  std::map<std::string, Priority, std::less<>> tier_priority;  // key tier -> class
  // Urgency: a request whose last user message holds one of these words is raised to
  // urgent_class, within its key's allowance (keys[].max_priority).
  std::vector<std::string> urgent_keywords;
  Priority urgent_class = Priority::premium;
};

}  // namespace sluice::config
