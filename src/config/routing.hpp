#pragma once
// Routing settings: backend sets, balancing, health probes, circuit breakers, fallbacks,
// canaries (see docs/routing.md). Part of the validated Config.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::config {

// How a route picks one of its backends.
enum class Balance : std::uint8_t { round_robin, weighted, least_connections, latency };
std::string_view to_string(Balance) noexcept;

// Circuit breaker of one backend (and of one provider endpoint): opens on the error rate
// over a sliding window, or on the window's P95 time to first token (for a non-streamed
// answer: time to the whole answer); half-open after open_for with a few probe requests.
struct BreakerConfig {
  bool enabled = true;
  std::chrono::milliseconds window{10'000};   // sliding window, 10 buckets
  int min_requests = 20;                      // no decision on fewer requests in the window
  double error_rate = 0.5;                    // open at or above; 0 = never on errors
  std::chrono::milliseconds p95_ttft{0};      // open when the window's P95 is above; 0 = never
  std::chrono::milliseconds open_for{5'000};  // then half-open
  int half_open_probes = 3;                   // requests let through while half-open
  // Recovery with hysteresis (recover_for > 0): half-open lets half_open_share of the
  // requests through for at least recover_for, and closes only when their P95 is at or
  // under p95_ttft_recover (default p95_ttft); above p95_ttft it opens again.
  std::chrono::milliseconds recover_for{0};
  std::chrono::milliseconds p95_ttft_recover{0};
  double half_open_share = 0.1;
};

// Active probes (a real one-token completion on a timer) and passive ejection.
struct HealthConfig {
  std::chrono::milliseconds interval{0};      // probe period; 0 = no active probes
  std::chrono::milliseconds timeout{5'000};   // a probe slower than this failed
  int unhealthy_after = 3;                    // consecutive failed probes -> unhealthy
  int healthy_after = 2;                      // consecutive good probes -> healthy again
  int eject_after = 5;                        // consecutive failed requests -> ejected; 0 = never
  std::chrono::milliseconds eject_for{30'000};  // an ejected backend gets traffic again after this
};

// What keeps a client on one side of a canary: nothing (each request drawn), its API key,
// or the request's `user` field (OpenAI `user`, Anthropic `metadata.user_id`; requests
// without one are drawn).
enum class CanarySticky : std::uint8_t { none, key, user };
std::string_view to_string(CanarySticky) noexcept;

// Weighted canary between a route's own backends (stable) and another route's (canary).
struct CanaryConfig {
  std::string alias;           // the route whose backends serve the canary share
  double weight = 0;           // percent of requests (or keys, users) sent to the canary, 0..100
  CanarySticky sticky = CanarySticky::none;
  // Automatic rollback: compared over `window`, once each side has `min_requests`.
  std::chrono::milliseconds window{60'000};
  int min_requests = 20;
  double max_error_rate_increase = 0.1;  // canary error rate > stable + this -> rollback; <0 = off
  double max_ttft_ratio = 2.0;           // canary P95 TTFT > stable P95 TTFT x this -> rollback; 0 = off
};

// Routing settings shared by every route (a route may override the breaker).
struct RoutingSettings {
  HealthConfig health;
  BreakerConfig breaker;            // per backend
  BreakerConfig provider_breaker;   // per provider endpoint (provider + host:port)
  std::string webhook_url;          // POSTed a JSON notice when a route degrades or recovers; "" = none
};

}  // namespace sluice::config
